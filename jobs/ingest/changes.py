"""Images of a folder or list file that changed since an ingest committed them: a file rewritten
under its name (an edited photo, or a camera's ``IMG_0001.jpg`` reused for a new one) and a file
deleted. An image is known by its id and its content: the ingest skips an id the store holds, so
without this a rewritten file would keep its old row forever, and a deleted one its row.

Each ingest keeps the size and modification time of the files it listed in the store
(`imgscale.storage.read_listing`); the next one compares: a committed image whose size or time
differs is read and hashed (sha256, no decoding), and is changed when the digest is not its
row's. A touched file with the same bytes is not. Deleted images are those the last listing held,
still committed, no longer listed. ``ingest --refresh`` forgets both kinds of rows in one commit
(`forget_changed`), after which the changed files are new images to the same ingest.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from imgscale.storage import (
    FeatureStore,
    ImagePartition,
    file_sha256,
    image_files,
    location,
    read_listing,
    row_digest,
    stat_files,
    write_listing,
)


@dataclass(frozen=True)
class Changes:
    """Committed ids whose file changed (``changed``) or is gone (``deleted``) since the last
    listing of the source, the keys whose file has the size and time it had then
    (``unchanged``), and the listing to keep once the ingest is done (``listing``)."""

    changed: list[str]
    deleted: list[str]
    listing: pa.Table
    unchanged: frozenset[str] = frozenset()


def find_changes(
    store: FeatureStore | None,
    source: str,
    partitions: list[ImagePartition],
    id_of_key: Callable[[str], str],
) -> Changes | None:
    """The changes of ``source``'s images (listed as ``partitions``, keys named in the store by
    ``id_of_key``) since its last ingest into ``store`` (None: a new store); None for a source
    whose files cannot be compared (tar shards, parquet, an object store)."""
    files = image_files(partitions)
    if files is None:
        return None
    now = stat_files(files)
    if store is None:
        return Changes([], [], now)
    before = read_listing(store.path, source)
    committed = store.rows(columns=["id"]).column("id")
    ids_now = pa.array([id_of_key(key) for key in files], pa.string())
    held = np.asarray(pc.is_in(ids_now, value_set=committed))
    seen = dict(zip(before.column("key").to_pylist(), _stats(before), strict=True))
    stats_now = _stats(now)
    candidates = [
        key
        for key, stat, is_held in zip(files, stats_now, held, strict=True)
        if is_held and key in seen and seen[key] != stat
    ]
    changed = _other_bytes(store, candidates, files, id_of_key)
    listed = set(files)
    gone = [key for key in seen if key not in listed]
    gone_held = np.asarray(
        pc.is_in(pa.array([id_of_key(k) for k in gone], pa.string()), value_set=committed)
    )
    deleted = [key for key, is_held in zip(gone, gone_held, strict=True) if is_held]
    # Changed and deleted images keep the stat their row was made from, so that they are
    # reported until resolved; every other file is remembered as it is now.
    kept = set(changed)
    keys = [*files, *deleted]
    stats = [seen[k] if k in kept else s for k, s in zip(files, stats_now, strict=True)]
    stats += [seen[k] for k in deleted]
    listing = pa.table(
        {
            "key": pa.array(keys, pa.string()),
            "size": pa.array([s[0] for s in stats], pa.int64()),
            "mtime_ns": pa.array([s[1] for s in stats], pa.int64()),
        }
    )
    unchanged = frozenset(
        key for key, stat in zip(files, stats_now, strict=True) if seen.get(key) == stat
    )
    return Changes(
        [id_of_key(k) for k in changed], [id_of_key(k) for k in deleted], listing, unchanged
    )


def forget_changed(store: FeatureStore, changes: Changes) -> int:
    """Forget the rows of the changed and deleted images in one commit (`FeatureStore.forget`),
    so that the changed files' ids are free for their new bytes; returns the rows forgotten."""
    ids = [*changes.changed, *changes.deleted]
    if not ids:
        return 0
    return store.forget(ids, reason="file changed or deleted since ingested (ingest --refresh)")


def keep_listing(store_path: str | os.PathLike, source: str, changes: Changes | None) -> None:
    """Keep the listing of ``changes`` in the store at ``store_path`` (if there is one) for the
    next ingest of ``source``."""
    store = location(store_path)
    if changes is not None and store.exists():
        write_listing(store, source, changes.listing)


def _stats(listing: pa.Table) -> list[tuple[int, int]]:
    sizes = listing.column("size").to_pylist()
    return list(zip(sizes, listing.column("mtime_ns").to_pylist(), strict=True))


def _other_bytes(
    store: FeatureStore,
    candidates: list[str],
    files: dict[str, Path],
    id_of_key: Callable[[str], str],
) -> list[str]:
    """The keys among ``candidates`` whose file's sha256 is not their committed row's."""
    if not candidates:
        return []
    content = store.content_hashes()
    digest_of = dict(
        zip(content.column("id").to_pylist(), content.column("sha256").to_pylist(), strict=True)
    )
    return [key for key in candidates if _digest_of(files[key]) != digest_of.get(id_of_key(key))]


def _digest_of(file: Path) -> bytes | None:
    """The digest a row made from ``file`` carries (None if it cannot be read)."""
    digest = file_sha256(file)
    return None if digest is None else row_digest(digest)
