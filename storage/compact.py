"""Compaction: a store rewritten without the rows of its removed batches and its forgotten rows,
so that their bytes leave the disk (`imgscale compact`).

Removing a batch or forgetting rows writes only the commit record (a tombstone); the rows stay
in the row chunks, skipped by every read. `compact_store` writes the live rows again, batch by
batch, into a scratch store beside the store (same array metadata, class tables, rejects,
codec arrays and creation stamp), then swaps the two directories in one atomic
``renameat2(RENAME_EXCHANGE)`` and deletes the old one. A process killed at any moment leaves
the old store (before the swap) or the new one (after it), and at most a scratch directory
that the next compaction deletes.

Models and embedded stores refer to batches by id and content digest, not to row positions:
each rewritten batch keeps the digest it was committed with and counts the rows compacted away
(``forgotten_before``), so a model that learned from the store as it was stays valid and
`imgscale update` still follows it — except where it must subtract rows compaction dropped
(rows forgotten, or a batch removed, after the model learned), which it refuses by name.

The writer lock is held throughout, so no batch is committed meanwhile. Readers take no lock: a
command reading the store while it is swapped may read rows of the new chunks at the old
positions, so compact when nothing reads the store (as `imgscale schedule` runs one command at
a time). Stores on an object store have no atomic swap and are refused.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from imgscale.storage.errors import StoreError
from imgscale.storage.forget import FORGOTTEN, FORGOTTEN_BEFORE, forgotten_count, live_offsets
from imgscale.storage.fs import is_local, tree_bytes
from imgscale.storage.layout import (
    CODES,
    FEATURES,
    LOCK_FILE,
    PARTIAL_SUFFIX,
    ROWS_DIR,
    SHA256,
    batch_digest,
    check_row_ranges,
    read_checked_table,
    read_record,
    schema_version,
    write_record,
)
from imgscale.storage.lock import writer_lock
from imgscale.storage.store import FeatureStore

SCRATCH_MARK = ".compacting-"
# renameat2(2): swap two paths atomically (Linux 3.15+, glibc 2.28+).
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def compact_store(
    path: str | os.PathLike, progress: Callable[[int, int], None] | None = None
) -> dict[str, Any]:
    """Rewrite the store at ``path`` without removed or forgotten rows (crash-safe, see the
    module); returns ``rows_dropped``, ``bytes_before``, ``bytes_after`` and ``batches``.
    A store with nothing to drop is left as it is. ``progress(done, total)`` counts rows."""
    store = FeatureStore(path)
    path = store.path
    if not is_local(path):
        raise StoreError(
            f"store {path}: compaction needs an atomic swap of two folders, which an object "
            "store has not; export the rows and ingest them into a new store instead"
        )
    with writer_lock(path):
        for leftover in path.parent.glob(f"{path.name}{SCRATCH_MARK}*"):
            shutil.rmtree(leftover, ignore_errors=True)  # of a compaction that was killed
        record = read_record(path)
        check_row_ranges(path, record)
        live = sum(b["stop"] - b["start"] for b in record["batches"])
        dropped = record["committed_rows"] - live
        dropped += sum(len(b.get(FORGOTTEN, [])) for b in record["batches"])
        before = tree_bytes(path)
        summary = {"rows_dropped": dropped, "bytes_before": before, "bytes_after": before}
        summary["batches"] = len(record["batches"])
        if not dropped and not record.get("removed"):
            return summary
        scratch = path.with_name(f"{path.name}{SCRATCH_MARK}{uuid.uuid4().hex}")
        try:
            _write_compacted(store, record, scratch, progress)
            FeatureStore(scratch).verify()
            _exchange(scratch, path)
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        shutil.rmtree(scratch, ignore_errors=True)  # the old store, now at the scratch path
    summary["bytes_after"] = tree_bytes(path)
    return summary


def _write_compacted(
    store: FeatureStore,
    record: dict[str, Any],
    scratch: Path,
    progress: Callable[[int, int], None] | None,
) -> None:
    """The store's live rows, batch by batch, in a new store at ``scratch`` whose record is the
    old one's without tombstones: same creation stamp, codec, class table and rejects."""
    path = store.path
    scratch.mkdir()
    _copy_skeleton(path, scratch)
    empty = {**record, "batches": [], "committed_rows": 0}
    empty.pop("removed", None)
    empty.pop("commit", None)
    empty["schema_version"] = schema_version(empty)
    write_record(scratch, empty)
    target = FeatureStore(scratch)
    rows_of = store.codes_at if record["encoding"] != "raw" else store.features_at
    total = sum(b["stop"] - b["start"] - len(b.get(FORGOTTEN, [])) for b in record["batches"])
    done = 0
    for batch in record["batches"]:
        offsets = live_offsets(batch)
        n = batch["stop"] - batch["start"]
        offsets = np.arange(n) if offsets is None else offsets
        meta = _batch_rows(path, batch).take(pa.array(offsets, pa.int64()))
        rows = rows_of(batch["start"] + offsets)
        with target.writer(batch["batch_id"]) as writer:
            first = 0
            for block in rows.blocks:
                block = np.asarray(block.compute())
                if not len(block):
                    continue
                part = meta.slice(first, len(block))
                digests = None
                if SHA256 in part.column_names:  # 32 bytes in an older rows file: kept as 16
                    digests = part.column(SHA256).to_pylist()
                writer.write(
                    block,
                    part.column("label").to_numpy(),
                    part.column("id").to_numpy(zero_copy_only=False),
                    part.column("split").to_numpy(zero_copy_only=False),
                    sha256=digests,
                )
                first += len(block)
                done += len(block)
                if progress is not None:
                    progress(done, total)
    # Each batch keeps the digest it was committed with and counts the rows compacted away.
    final = read_record(scratch)
    for new, old in zip(final["batches"], record["batches"], strict=True):
        new["digest"] = batch_digest(path, old)
        if forgotten_count(old):
            new[FORGOTTEN_BEFORE] = forgotten_count(old)
    final["schema_version"] = schema_version(final)
    write_record(scratch, final)


def _copy_skeleton(path: Path, scratch: Path) -> None:
    """Everything but the rows: the group metadata, the row array's metadata (at 0 rows), codec
    arrays, class tables and rejects; not the rows files, the lock or tmp files."""
    for entry in path.iterdir():
        if entry.name in (ROWS_DIR, LOCK_FILE) or entry.name.endswith(PARTIAL_SUFFIX):
            continue
        if entry.name in (FEATURES, CODES):
            (scratch / entry.name).mkdir()
            meta = json.loads((entry / "zarr.json").read_text())
            meta["shape"][0] = 0
            (scratch / entry.name / "zarr.json").write_text(json.dumps(meta))
        elif entry.is_dir():
            shutil.copytree(entry, scratch / entry.name)
        else:
            shutil.copy2(entry, scratch / entry.name)


def _batch_rows(path: Path, batch: dict[str, Any]) -> pa.Table:
    where = f"store {path}: rows file of batch {batch['batch_id']!r}"
    table = read_checked_table(path / batch["rows_file"], batch.get("crc32c"), where)
    if table.num_rows != batch["stop"] - batch["start"]:
        raise StoreError(
            f"{where} has {table.num_rows} rows; expected {batch['stop'] - batch['start']}"
        )
    return table


def _exchange(a: Path, b: Path) -> None:
    """Swap the paths ``a`` and ``b`` in one atomic step."""
    libc = ctypes.CDLL(None, use_errno=True)
    if not hasattr(libc, "renameat2"):
        raise StoreError(f"store {b}: this system has no renameat2, so no atomic swap")
    result = libc.renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if result != 0:
        errno = ctypes.get_errno()
        raise StoreError(
            f"store {b}: the atomic swap of the compacted store failed ({os.strerror(errno)}); "
            "the store is as it was"
        )
