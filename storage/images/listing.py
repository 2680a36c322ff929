"""What an ingest saw of a folder's or a list file's images: each one's size and modification
time, kept beside the store's rows, so that the next ingest finds a file rewritten under a known
name, or deleted, without reading every file again.

One parquet file per source (``listings/<blake2b of the source's URL>.parquet`` in the store),
written whole and atomically after the source is ingested. It is a memory of the files, not of
the rows: a store without it (older, or another source's) only lacks the comparison, and its
rows are read as ever. Only local files are compared (an object store's files are not).

Files of many images (tar shards, parquet files of image bytes) are kept the same way once an
ingest has committed every image they hold, one parquet file per split
(``listings/whole-<blake2b of the split>.parquet``), with the store's batches when they were
recorded (`read_whole_files`): the next ingest as that split need not read them again.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from imgscale.storage.errors import StoreError
from imgscale.storage.fs import Location, is_url, read_table
from imgscale.storage.images.files import FilePartition
from imgscale.storage.images.source_types import ImagePartition, file_at
from imgscale.storage.layout import write_table_atomic

LISTINGS = "listings"
LISTING_SCHEMA = pa.schema([("key", pa.string()), ("size", pa.int64()), ("mtime_ns", pa.int64())])
# The schema metadata of a record of whole files holding the store's batches then (`batches`).
_BATCHES = b"imgscale.batches"


def listing_file(store: Location, source: str) -> Location:
    name = hashlib.blake2b(source.encode(), digest_size=8).hexdigest()
    return store / LISTINGS / f"{name}.parquet"


def image_files(partitions: Sequence[ImagePartition]) -> dict[str, Path] | None:
    """The local file of each listed image, by key; None for a source whose files cannot be
    compared (tar shards, parquet, files on an object store)."""
    if not all(isinstance(p, FilePartition) for p in partitions):
        return None
    files = {}
    for partition in partitions:
        for key, file in zip(partition.keys, partition.files, strict=True):
            path = file_at(partition.root, file)
            if is_url(path):
                return None
            files[key] = path
    return files


def stat_files(files: dict[str, Path]) -> pa.Table:
    """(key, size, mtime_ns) of each file (-1, -1 for one that cannot be read)."""
    sizes, mtimes = np.full(len(files), -1, np.int64), np.full(len(files), -1, np.int64)
    for i, path in enumerate(files.values()):
        try:
            stat = os.stat(path)
        except OSError:
            continue
        sizes[i], mtimes[i] = stat.st_size, stat.st_mtime_ns
    return pa.table([pa.array(list(files), pa.string()), sizes, mtimes], schema=LISTING_SCHEMA)


def read_listing(store: Location, source: str) -> pa.Table:
    """The listing the last ingest of ``source`` into ``store`` kept (empty if none)."""
    file = listing_file(store, source)
    if not file.exists():
        return LISTING_SCHEMA.empty_table()
    return read_table(file).select(LISTING_SCHEMA.names).cast(LISTING_SCHEMA)


def write_listing(store: Location, source: str, listing: pa.Table) -> None:
    file = listing_file(store, source)
    if not is_url(file):
        file.parent.mkdir(exist_ok=True)
    write_table_atomic(listing.cast(LISTING_SCHEMA), file)


def file_sha256(path: Path) -> bytes | None:
    """sha256 of a file's bytes, read in blocks (None if it cannot be read)."""
    try:
        with open(path, "rb") as stream:
            return hashlib.file_digest(stream, "sha256").digest()
    except OSError:
        return None


def local_file_stats(files: Sequence[Location]) -> dict[str, tuple[int, int]]:
    """(size, mtime_ns) of each local file of ``files``, by its name; a file on an object store,
    or one that cannot be read, is left out."""
    stats = {}
    for file in files:
        if is_url(file):
            continue
        try:
            stat = os.stat(file)
        except OSError:
            continue
        stats[str(file)] = (stat.st_size, stat.st_mtime_ns)
    return stats


def whole_files_file(store: Location, split: str) -> Location:
    name = hashlib.blake2b(split.encode(), digest_size=8).hexdigest()
    return store / LISTINGS / f"whole-{name}.parquet"


def read_whole_files(store: Location, split: str) -> tuple[pa.Table, list[dict[str, Any]]]:
    """The files of many images an ingest as ``split`` committed whole into ``store`` (key: the
    file's name, size, mtime_ns: as they were listed then), and the store's batches when they
    were recorded (`FeatureStore.batches`'s ``batch_id``, ``digest``, ``forgotten``); an empty
    table and no batches if none."""
    file = whole_files_file(store, split)
    if not file.exists():
        return LISTING_SCHEMA.empty_table(), []
    try:
        table = read_table(file)
        batches = json.loads((table.schema.metadata or {}).get(_BATCHES, b"[]"))
        return table.select(LISTING_SCHEMA.names).cast(LISTING_SCHEMA), batches
    except (OSError, ValueError, KeyError, pa.ArrowException) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise StoreError(
            f"store {store}: {file} is not a readable record of files ingested whole ({reason}); "
            "remove it, and the next ingest reads every file again"
        ) from None


def write_whole_files(
    store: Location, split: str, listing: pa.Table, batches: list[dict[str, Any]]
) -> None:
    """Keep ``listing`` (key, size, mtime_ns) as the files committed whole as ``split``, beside
    the store's ``batches`` they were committed among (`read_whole_files`)."""
    table = listing.cast(LISTING_SCHEMA).replace_schema_metadata(
        {_BATCHES: json.dumps(batches).encode()}
    )
    write_table_atomic(table, whole_files_file(store, split))
