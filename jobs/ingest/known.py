"""What a store already holds, as an ingest names and finds it: each image's id (`image_id`),
the 64-bit hash of an id (`key_hash`), `Known`, the committed ids' hashes and images' digests
that every worker is sent once so that it reads no image twice, and `committed_holders`, the
committed rows holding given content, which images and vectors alike look up on the client."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from imgscale.storage import FeatureStore, as_digests, row_digest

# The digest a refusal carries for an image whose bytes could not be read.
EMPTY_SHA256 = hashlib.sha256(b"").digest()
# The split whose images' ids are their keys as the source gives them; other splits' are qualified.
DEFAULT_SPLIT = "train"


def image_id(split: str, key: str) -> str:
    """The id in a store of the image ``key`` of a source ingested as ``split``: the key itself
    for the default split, ``SPLIT/KEY`` for another, so that a test split reusing the train
    split's file names (``cat/0000.jpg`` in both) neither collides with it nor vanishes."""
    return key if split == DEFAULT_SPLIT else f"{split}/{key}"


@dataclass(frozen=True)
class Known:
    """What the store already holds, sent once to every worker: hashes of the committed ids
    (sorted; a key whose id's hash is among them is not read), and the committed images' sha256
    digests (sorted by their first 8 bytes), with the id each belongs to; and the split this
    ingest names its images' ids by (`image_id`)."""

    key_hashes: np.ndarray
    digest_prefixes: np.ndarray
    digests: np.ndarray
    digest_ids: pa.Array
    split: str = DEFAULT_SPLIT

    def id_of_key(self, key: str) -> str:
        return image_id(self.split, key)

    def has_key(self, key: str) -> bool:
        """Whether the id of the source's image ``key`` is committed."""
        if not len(self.key_hashes):
            return False
        h = np.uint64(key_hash(self.id_of_key(key)))
        i = int(self.key_hashes.searchsorted(h))
        return i < len(self.key_hashes) and self.key_hashes[i] == h

    def id_of(self, digest: bytes) -> str | None:
        """The id of the committed image with these bytes' ``digest`` (sha256), if any."""
        if not len(self.digest_prefixes):
            return None
        prefix = np.frombuffer(digest[:8], ">u8").astype(np.uint64)[0]
        first = int(np.searchsorted(self.digest_prefixes, prefix, side="left"))
        stop = int(np.searchsorted(self.digest_prefixes, prefix, side="right"))
        for i in range(first, stop):
            if self.digests[i].tobytes() == row_digest(digest):
                return self.digest_ids[i].as_py()
        return None


def key_hash(key: str) -> int:
    """A 64-bit hash of an image's key, computed per key on the workers (blake2b, in C: the
    per-key cost must stay far below a JPEG decode). A key whose hash collides with a committed
    one's would be skipped: with n committed keys, a chance of n / 2⁶⁴ for each new key."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little")


def known_of(
    store: FeatureStore | None,
    split: str = DEFAULT_SPLIT,
    unread: Sequence[str] = (),
    *,
    keys: bool = True,
) -> Known:
    """What ``store`` holds, for an ingest as ``split``; ``unread`` are more ids not to read.
    Without ``keys``, no id's hash: for partitions holding new images alone."""
    empty, unread_ids = np.empty(0, np.uint64), pa.array(unread, pa.string())
    if store is None or store.committed_rows == 0:
        hashes = _sorted_key_hashes([unread_ids]) if keys else empty
        no_ids = pa.array([], pa.string())
        return Known(hashes, empty, np.empty((0, 32), np.uint8), no_ids, split)
    committed = store.rows(columns=["id"]).column("id").chunks if keys else []
    content = store.content_hashes()
    column = content.column("sha256").combine_chunks()  # 16 bytes a row (`row_digest`)
    digests = np.frombuffer(column.buffers()[1], np.uint8).reshape(-1, column.type.byte_width)
    digests = digests[: content.num_rows]
    prefixes = digests[:, :8].copy().view(">u8").ravel().astype(np.uint64)
    order = np.argsort(prefixes, kind="stable")
    # The ids stay arrow strings: a Python string an id would take 50 bytes more each, on the
    # client and on every worker.
    return Known(
        _sorted_key_hashes([*committed, unread_ids]) if keys else empty,
        prefixes[order],
        digests[order],
        content.column("id").combine_chunks().take(order),
        split,
    )


def committed_holders(content: pa.Table, digests: Sequence[bytes] | np.ndarray) -> pa.Table:
    """The row of ``content`` (``id``, ``split``, ``sha256``: `FeatureStore.content_hashes`)
    holding each of the sha256 ``digests`` (whole, as (n, 32) uint8 or ``bytes``, or as rows
    carry them), in their order: a row of nulls for a digest no committed row holds."""
    probe = as_digests(digests, len(digests), "content digests")
    return content.take(pc.index_in(probe, value_set=content.column("sha256")))


def _sorted_key_hashes(ids: Sequence[pa.Array]) -> np.ndarray:
    """The sorted `key_hash` of every id of the arrow arrays ``ids``, made one array's Python
    strings at a time."""
    hashes = [np.fromiter(map(key_hash, part.to_pylist()), np.uint64, len(part)) for part in ids]
    return np.sort(np.concatenate(hashes)) if hashes else np.empty(0, np.uint64)
