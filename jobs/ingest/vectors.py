"""``imgscale ingest FILE STORE``: a file of vectors into a store, streamed in row blocks and
committed as one batch.

What this shares with the image ingest (`images`, `commit`) is shared code: both commit
through the store's one batch commit (`FeatureStore.writer`: the lock, the check that the batch
is not committed already, the atomic commit), and both find the rows a store already holds with
the same content by `known.committed_holders`. What differs is kept apart, because the two
differ in kind: a file of vectors is read by this process alone, a block at a time, and is one
batch that commits whole or not at all, so a repeated row is committed and counted (the user
decides, `remove-batch` undoes it); images arrive from the workers a partition at a time and
commit in many batches from a thread while the workers go on describing, and an image repeating
another's bytes or id is refused into the store's rejects. The batch ids differ too, and must
stay as they are: a stored id is what makes a second ingest of the same content a no-op, so
a vector file's is a hash of its values, labels and ids as read (`content_batch_id`), known
before the first row is written, and an image commit's a hash of the keys and digests it holds.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from imgscale.jobs.ingest.known import committed_holders
from imgscale.storage import (
    FeatureStore,
    Source,
    StoreError,
    create_or_open,
    create_store,
    default_rows_per_chunk,
    location,
    open_source,
)

# A small first file gets chunks of its size rounded up to this many rows.
SMALL_CHUNK_STEP = 4096


@dataclass(frozen=True)
class Ingested:
    """What `ingest_file` did: the store, the batch id, its rows, whether the batch was already
    committed (then nothing was written), and how many of its rows hold the same float32 values
    as rows committed before, by the split those were committed under."""

    store: FeatureStore
    batch_id: str
    rows: int
    skipped: bool
    repeated: dict[str, int] = field(default_factory=dict)


def ingest_file(
    src: str | Path,
    store_path: str | Path,
    *,
    batch_id: str | None = None,
    x_key: str | None = None,
    y_key: str | None = None,
    ids_key: str | None = None,
    labels_path: str | Path | None = None,
    split: str = "train",
    block_rows: int | None = None,
    class_names: Sequence[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
    unlabelled: bool = False,
) -> Ingested:
    """Append ``src`` to the store at ``store_path``, creating it (dim from the file) if missing.

    The whole file is one batch through one writer, so it commits entirely or not at all; a
    store this call created is removed again if the ingest fails. ``batch_id`` defaults to a
    hash of the rows' content (features, labels, ids), so ingesting the same rows again, from a
    touched or copied file too, is a no-op (``skipped``); the same rows under another split are
    refused. ``block_rows`` (default: the store's rows per chunk) bounds memory.
    ``class_names`` name the integer labels 0..C-1 (else labels are named by number, and string
    labels are names themselves). ``unlabelled`` says the rows have no labels: an .npz whose
    other arrays hold one value a row is refused without it (labels under another name).

    Each row is committed with the sha256 of its float32 values, as stored, so the same rows
    given again in another file, dtype, order or split are counted in ``repeated`` (by the
    split they were first committed under) for the caller to report.
    """
    src = Path(src)
    store_path = location(store_path)
    if not src.is_file():
        raise StoreError(f"{src}: no such file")
    # Labels from an idx --labels file are labels too: the source's other arrays are not.
    source = open_source(
        src,
        x_key=x_key,
        y_key=y_key,
        ids_key=ids_key,
        unlabelled=unlabelled or labels_path is not None,
    )
    labels = None
    try:
        if len(source.shape) != 2:
            raise StoreError(f"{src}: array of shape {source.shape}; expected 2-D features")
        if labels_path is not None:
            labels = open_source(Path(labels_path))
            if labels.shape != source.shape[:1]:
                raise StoreError(
                    f"{labels_path}: labels of shape {labels.shape}; expected "
                    f"({source.shape[0]},), one per row of {src}"
                )
        if batch_id is None:
            batch_id = content_batch_id(source, labels, block_rows or BLOCK_ROWS_FOR_HASH)
        create = partial(
            create_store,
            dim=source.shape[1],
            rows_per_chunk=_rows_per_chunk_for(source.shape),
            class_names=class_names,
            provenance={"source": str(src.resolve())},
        )
        committed = None
        with create_or_open(store_path, create) as (store, created):
            if not created:
                committed = _committed_rows_of(store, batch_id, split)
                if committed is not None:
                    return Ingested(store, batch_id, committed, skipped=True)
                if class_names:
                    store.set_class_names(class_names)
                committed = store.content_hashes()
            rows, repeated = _stream(
                source, labels, committed, store, batch_id, split, block_rows, progress
            )
    finally:
        source.close()
        if labels is not None:
            labels.close()
    return Ingested(store, batch_id, rows, skipped=False, repeated=repeated)


# Rows hashed at a time when the caller does not bound the blocks.
BLOCK_ROWS_FOR_HASH = 65_536


def content_batch_id(source: Source, labels: Source | None, block_rows: int) -> str:
    """A batch id from the rows' content: BLAKE2b over features, labels and ids as read.

    One extra read of the file, so the id is known before anything is written (the default row
    ids derive from it); the file's name and times do not enter.
    """
    digest = hashlib.blake2b(digest_size=8)
    label_blocks = labels.blocks(block_rows) if labels is not None else None
    for block in source.blocks(block_rows):
        y = next(label_blocks).X if label_blocks is not None else block.labels
        for part in (block.X, y, block.ids):
            if part is None:
                digest.update(b"-")
                continue
            part = np.ascontiguousarray(part)
            digest.update(f"{part.dtype.str}{part.shape}".encode())
            if part.dtype.kind == "O":
                digest.update("\0".join(map(str, part.tolist())).encode())
            else:
                digest.update(part.data)
    return f"content-{digest.hexdigest()}"


def row_digests(X: np.ndarray) -> np.ndarray:
    """(n, 32) uint8: the sha256 of each row's values as the store keeps them (float32, C order),
    so a row given as float64 or in another file has the digest it had before."""
    with np.errstate(over="ignore", invalid="ignore"):  # out-of-range rows are refused later
        rows = np.ascontiguousarray(X, dtype=np.float32)
    out = np.empty((len(rows), 32), np.uint8)
    for i, row in enumerate(rows):
        out[i] = np.frombuffer(hashlib.sha256(row.data).digest(), np.uint8)
    return out


def _committed_rows_of(store: FeatureStore, batch_id: str, split: str) -> int | None:
    """Rows of ``batch_id`` if already committed under ``split`` (None if not committed); a
    StoreError if it was committed under other splits."""
    if not store.has_batch(batch_id):
        return None
    rows = store.rows()
    rows = rows.filter(pc.equal(rows.column("batch_id"), batch_id))
    splits = sorted(set(rows.column("split").to_pylist()))
    if splits != [split]:
        raise StoreError(
            f"store {store.path}: batch {batch_id!r} is already committed ({rows.num_rows} rows) "
            f"as split {', '.join(map(repr, splits))}, not {split!r}; to change its split, run "
            f"`imgscale remove-batch {store.path} {batch_id}` and ingest it again"
        )
    return rows.num_rows


def _stream(
    source: Source,
    labels: Source | None,
    committed: pa.Table | None,
    store: FeatureStore,
    batch_id: str,
    split: str,
    block_rows: int | None,
    progress: Callable[[int, int], None] | None,
) -> tuple[int, dict[str, int]]:
    """Rows written, and how many held the values of ``committed`` rows, by their split."""
    block_rows = block_rows or store.rows_per_chunk
    total = source.shape[0]
    label_blocks = labels.blocks(block_rows) if labels is not None else None
    done = 0
    repeated: Counter[str] = Counter()
    with store.writer(batch_id) as w:
        if w.already_committed:  # committed by another process since we looked
            return _committed_rows_of(store, batch_id, split) or 0, {}
        for block in source.blocks(block_rows):
            y = next(label_blocks).X if label_blocks is not None else block.labels
            digests = row_digests(block.X)
            try:
                w.write(block.X, y, block.ids, split, sha256=digests)
            except StoreError as e:
                rows = f"rows {done}–{done + len(block.X) - 1}"
                raise StoreError(f"{source.path} {rows}: {e}") from e
            if committed is not None:
                held = committed_holders(committed, digests).column("split")
                repeated.update(held.drop_null().to_pylist())
            done += len(block.X)
            if progress is not None:
                progress(done, total)
    return done, dict(sorted(repeated.items()))


def _rows_per_chunk_for(shape: tuple[int, int]) -> int:
    """The default ~64 MiB chunk, or less for a small first file.

    zarr stores every chunk whole, so an uncompressed store of a few thousand rows would
    otherwise take a full 64 MiB chunk on disk.
    """
    rows = -(-max(shape[0], 1) // SMALL_CHUNK_STEP) * SMALL_CHUNK_STEP
    return min(default_rows_per_chunk(shape[1]), rows)
