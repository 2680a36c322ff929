"""Appending to a store: one batch streamed through one process (`BatchWriter`), or a copy of
another store's batches written chunk by chunk by many processes (`CopyWriter`); both commit once.
"""

from __future__ import annotations

import errno
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from imgscale.storage.classes import ClassTable
from imgscale.storage.errors import StoreError
from imgscale.storage.fs import read_table
from imgscale.storage.ids import HashRuns, first_repeated, id_hashes
from imgscale.storage.layout import (
    CLASSES_DIR,
    FULL_DIGEST_BYTES,
    IMAGE_ROWS_SCHEMA,
    REJECTED_DIR,
    REJECTED_SCHEMA,
    ROW_DIGEST_BYTES,
    ROW_DIGESTS_KEY,
    ROWS_DIR,
    ROWS_PARQUET_OPTIONS,
    ROWS_SCHEMA,
    SHA256,
    batch_digest,
    check_row_ranges,
    copy_file_atomic,
    file_crc32c,
    read_classes,
    read_record,
    rejected_file_name,
    rows_file_name,
    schema_version,
    write_classes,
    write_record,
    write_table_atomic,
)
from imgscale.storage.lock import remove_partials, writer_lock
from imgscale.storage.row_codecs import rows_codec
from imgscale.storage.validate import as_digests, as_strings


class WritableStore(Protocol):
    """What a writer uses of the `storage.store.FeatureStore` it appends to (or copies from);
    a protocol, so the store module imports the writers and not the other way round."""

    path: Path
    dim: int
    rows_per_chunk: int

    def committed_id_hashes(self) -> HashRuns: ...

    def rows(self, split: str | None = None, columns: list[str] | None = None) -> pa.Table: ...


class _LockedWriter:
    """A writer that holds the store's writer lock from ``__enter__`` to ``__exit__``: `_begin`
    runs under it (a failing one releases it) and `_finish` commits at a clean exit.

    Whatever fails, nothing is left behind: row chunks past the committed rows and uncommitted
    rows files are removed on the way out (and by the next writer, should this one be killed),
    and a full disk is reported as one line naming the store.
    """

    def __init__(self, store: WritableStore) -> None:
        self.store = store
        self._lock = writer_lock(store.path)

    def __enter__(self) -> Self:
        self._lock.acquire()
        try:
            self._begin()
        except BaseException:
            self._lock.release()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if exc_type is None:
                self._finish()
        except BaseException as failure:
            exc = failure
            raise
        finally:
            try:
                if exc is not None:
                    remove_uncommitted(self.store.path)
            finally:
                self._lock.release()
            if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
                raise StoreError(
                    f"store {self.store.path}: no space left on device; nothing was committed "
                    "and the rows written so far were removed"
                ) from exc

    def _begin(self) -> None:
        raise NotImplementedError

    def _finish(self) -> None:
        """Commit, at a clean exit only."""
        raise NotImplementedError


class BatchWriter(_LockedWriter):
    """Context manager that appends one batch, written in any number of blocks.

    Holds the store's writer lock from ``__enter__`` to ``__exit__``. Rows go to zarr as soon
    as they fill a chunk (bounded memory), but become visible only through the commit at a clean
    ``__exit__``: row metadata file first, then one atomic rewrite of the commit record. An
    exception (or a killed process) commits nothing; the rows it wrote past ``committed_rows``
    are garbage the next writer overwrites. A block rejected by validation changes nothing and
    the writer stays usable. ``already_committed`` tells whether the batch id was committed
    before, in which case writes are ignored.

    Rows made from images carry the sha256 of each image's bytes (``write(..., sha256=...)``,
    every block of the batch or none), and images an ingest refused are committed with the
    batch by `reject`; a batch of rejects only commits them and no rows.
    """

    def __init__(self, store: WritableStore, batch_id: str) -> None:
        if not isinstance(batch_id, str) or not batch_id:
            raise TypeError(f"batch_id must be a non-empty str, got {batch_id!r}")
        super().__init__(store)
        self.batch_id = batch_id
        self._active = False
        self._broken = False

    # -- context --------------------------------------------------------------------------

    def __enter__(self) -> Self:
        super().__enter__()
        self._active = True
        return self

    def _begin(self) -> None:
        path = self.store.path
        record = read_record(path)
        self.already_committed = any(b["batch_id"] == self.batch_id for b in record["batches"])
        if self.already_committed:
            return
        remove_uncommitted(path, record)
        self.start = record["committed_rows"]
        self.rows_written = 0  # rows accepted into this batch so far
        self._flushed = self.start  # rows [start, _flushed) are in zarr
        self._pending: list[np.ndarray] = []
        self._pending_rows = 0
        self._meta: list[pa.RecordBatch] = []
        self._rejects: list[pa.RecordBatch] = []
        self._classes = ClassTable(read_classes(path, record))
        self._rows_codec = rows_codec(path, record)
        self._array = self._rows_codec.open_array("r+")
        self._committed_hashes = self.store.committed_id_hashes()
        self._batch_hashes = HashRuns()

    def __exit__(self, *exc_info: Any) -> None:
        self._active = False
        super().__exit__(*exc_info)

    def _finish(self) -> None:
        if self.already_committed or self._broken:
            return
        if self.rows_written:
            self._flush(final=True)
        if self.rows_written or self._rejects:
            self._commit()

    # -- writing --------------------------------------------------------------------------

    def write(
        self,
        X: Any,
        labels: Any = None,
        ids: Any = None,
        split: Any = "train",
        sha256: Any = None,
    ) -> int:
        """Validate and buffer one block of rows; returns rows accepted (0 if already committed).

        ``sha256``: the (n, 32) sha256 digests of the rows' content (of the images' bytes for
        rows made from images), kept as their first 16 bytes (`layout.ROW_DIGEST_BYTES`)."""
        if not self._active:
            raise RuntimeError("BatchWriter.write called outside its `with` block")
        if self._broken:
            raise RuntimeError("an earlier write failed mid-way; this batch cannot be committed")
        if self.already_committed:
            return 0
        first = self.start + self.rows_written
        shape = np.shape(X)
        n = shape[0] if shape else 0
        where = f"store {self.store.path}, batch {self.batch_id!r}, rows {first}–{first + n - 1}"
        X = self._rows_codec.check_block(X, where, first)
        n = X.shape[0]
        labels = self._classes.encode(labels, n, where, first)
        if ids is None:
            ids = [f"{self.batch_id}:{i}" for i in range(self.rows_written, self.rows_written + n)]
        else:
            ids = as_strings(ids, n, "ids", where)
        split = as_strings(split, n, "split", where)
        if self._meta and (sha256 is None) != (self._meta[0].num_columns == len(ROWS_SCHEMA)):
            raise StoreError(f"{where}: sha256 given for some blocks of the batch, not all")
        digests = None if sha256 is None else as_digests(sha256, n, where)
        ids = pa.array(ids, pa.string())
        hashes = id_hashes(ids)
        repeated = first_repeated(
            ids, hashes,
            [(self._committed_hashes, self._committed_ids), (self._batch_hashes, self._ids)],
        )  # fmt: skip
        if repeated is not None:
            raise StoreError(
                f"{where}: duplicate id {ids[repeated].as_py()!r} at row {first + repeated}; "
                "expected ids unique across the store"
            )

        # Everything below mutates state; a failure here leaves the batch unusable.
        self._broken = True
        self._batch_hashes.add(hashes)
        columns = [
            ids,
            pa.array(labels, pa.int32()),
            pa.array(split, pa.string()),
            pa.array([self.batch_id] * n, pa.string()),
        ]
        if digests is None:
            self._meta.append(pa.RecordBatch.from_arrays(columns, schema=ROWS_SCHEMA))
        else:
            columns.append(digests)
            self._meta.append(pa.RecordBatch.from_arrays(columns, schema=IMAGE_ROWS_SCHEMA))
        self._pending.append(X)
        self._pending_rows += n
        self.rows_written += n
        self._flush(final=False)
        self._broken = False
        return n

    def reject(self, keys: Any, sha256: Any, reasons: Any, split: Any = "train") -> None:
        """Record images refused by an ingest (their keys, the sha256 of their bytes, a one-line
        reason each), committed with the batch."""
        if not self._active:
            raise RuntimeError("BatchWriter.reject called outside its `with` block")
        if self.already_committed:
            return
        n = len(keys)
        where = f"store {self.store.path}, batch {self.batch_id!r}, rejected images"
        self._rejects.append(
            pa.RecordBatch.from_arrays(
                [
                    pa.array(as_strings(keys, n, "keys", where), pa.string()),
                    as_digests(sha256, n, where, FULL_DIGEST_BYTES),
                    pa.array(as_strings(reasons, n, "reasons", where), pa.string()),
                    pa.array(as_strings(split, n, "split", where), pa.string()),
                ],
                schema=REJECTED_SCHEMA,
            )
        )

    def _committed_ids(self) -> pa.ChunkedArray:
        return self.store.rows(columns=["id"]).column("id")

    def _ids(self) -> pa.ChunkedArray:
        return pa.chunked_array([b.column(0) for b in self._meta], pa.string())

    def _flush(self, final: bool) -> None:
        """Write pending rows to zarr, up to the last whole chunk unless ``final``.

        Writes start at ``_flushed`` and end on a chunk boundary, so each chunk is written once
        per batch except the tail chunk of the last commit, whose read-modify-write is safe
        because zarr's LocalStore replaces a chunk file atomically with identical committed rows.
        """
        rpc = self.store.rows_per_chunk
        total = self._flushed + self._pending_rows
        end = total if final else total // rpc * rpc
        if end <= self._flushed:
            return
        data = self._pending[0] if len(self._pending) == 1 else np.concatenate(self._pending)
        if self._array.shape[0] < end:
            self._array.resize((end, self._array.shape[1]))
        take = end - self._flushed
        self._array[self._flushed : end] = data[:take]
        rest = data[take:]
        self._pending = [rest] if len(rest) else []
        self._pending_rows = len(rest)
        self._flushed = end

    def _commit(self) -> None:
        record = read_record(self.store.path)
        if self.rows_written:
            table = pa.Table.from_batches(self._meta)
            if self._classes.added:
                where = f"store {self.store.path}, batch {self.batch_id!r}"
                write_classes(self.store.path, self._classes.final_names(where), record)
            _add_batch(self.store.path, record, self.batch_id, self.start, table)
            if SHA256 in table.column_names:
                record[ROW_DIGESTS_KEY] = ROW_DIGEST_BYTES
                record["schema_version"] = schema_version(record)
        if self._rejects:
            rejected = record.setdefault("rejected", [])
            file = rejected_file_name(len(rejected))
            crc = write_table_atomic(pa.Table.from_batches(self._rejects), self.store.path / file)
            images = sum(b.num_rows for b in self._rejects)
            # The rows committed up to this commit: a refused key committed as a later row was
            # fixed; one committed no later (an id given twice) is another image's.
            rows = record["committed_rows"]
            rejected.append({"file": file, "images": images, "crc32c": crc, "rows": rows})
        write_record(self.store.path, record)


def _add_batch(
    path: Path, record: dict[str, Any], batch_id: str, start: int, rows: pa.Table
) -> None:
    """Write the rows file of a batch starting at row `start` and add the batch to `record`
    (committed by the caller's `write_record`, after every rows file is in place)."""
    rows_file = rows_file_name(start)
    crc = write_table_atomic(rows, path / rows_file, **ROWS_PARQUET_OPTIONS)
    _record_batch(record, batch_id, start, start + rows.num_rows, rows_file, crc)


def _record_batch(
    record: dict[str, Any], batch_id: str, start: int, stop: int, rows_file: str, crc32c: int
) -> None:
    record["batches"].append(
        {
            "batch_id": batch_id,
            "start": start,
            "stop": stop,
            "rows_file": rows_file,
            "crc32c": crc32c,
        }
    )
    record["committed_rows"] = stop


def remove_uncommitted(path: Path, record: dict[str, Any] | None = None) -> None:
    """Remove what a writer that failed or died before its commit left behind: tmp files, rows
    and rejects files the record does not name (a removed batch's tombstone names its rows
    file), class tables of more classes than the record's, and row chunks wholly past the
    committed rows (the row array shrinks to the committed rows, which drops their chunk files).
    Only safe while holding the lock."""
    record = read_record(path) if record is None else record
    remove_partials(path)
    named = {b["rows_file"] for b in record["batches"]}
    named.update(r["rows_file"] for r in record.get("removed", []) if "rows_file" in r)
    named.update(r["file"] for r in record.get("rejected", []))
    for folder in (ROWS_DIR, REJECTED_DIR):
        for file in (path / folder).glob("*.parquet"):
            if f"{folder}/{file.name}" not in named:
                file.unlink(missing_ok=True)
    # Earlier class tables stay: a reader holding an earlier record may still read one.
    classes = record.get("classes")
    committed = int(classes["file"].split("/")[1][:6]) if classes else 0
    for file in (path / CLASSES_DIR).glob("*.parquet"):
        if int(file.name[:6]) > committed:
            file.unlink(missing_ok=True)
    array = rows_codec(path, record).open_array("r+")
    if array.shape[0] > record["committed_rows"]:
        array.resize((record["committed_rows"], array.shape[1]))


class CopyWriter(_LockedWriter):
    """Context manager that appends a copy of another store's committed batches (same batch ids,
    ids, labels and splits) whose row chunks other processes write, one process per chunk.

    ``BatchWriter`` takes every row through one process and validates metadata row by row: for
    ``imgscale compress`` that client work outlasted the encoding itself. Here
    the rows go straight from the workers to their own chunk files (`write_row_chunk`), and the
    metadata, validated when the source committed it (its ids are unique), is only checked
    against this store, as a whole (`check_rows`). The writer lock is held from ``__enter__`` to
    ``__exit__``; ``__enter__`` grows the row array to its final length, so workers write chunk
    files only, never array metadata; a clean ``__exit__`` writes each batch's rows file, then
    the commit record, once. An exception (or a killed process) commits nothing, as for
    ``BatchWriter``. The store's committed rows must end on a chunk boundary (an empty store
    does), so no chunk holds both committed and new rows.
    """

    def __init__(self, store: WritableStore, source: WritableStore) -> None:
        super().__init__(store)
        self.source = source
        self.checked = False

    def _begin(self) -> None:
        path = self.store.path
        record = read_record(path)
        source = read_record(self.source.path)
        check_row_ranges(self.source.path, source)
        kept = [r["batch_id"] for r in source.get("removed", [])]
        what = "removed batches"
        if not kept:
            kept = [b["batch_id"] for b in source["batches"] if b.get("forgotten")]
            what = "the forgotten rows of batches"
        if kept:
            raise StoreError(
                f"store {self.source.path}: {what} {kept[:5]} still have their rows in "
                "its row chunks, and a chunk-parallel copy copies whole chunks; export its rows "
                "(`imgscale export`) and ingest them into a new store to copy it"
            )
        self.start, self.batches = record["committed_rows"], source["batches"]
        n = source["committed_rows"]
        self.where = (
            f"store {path}, rows {self.start}–{self.start + n - 1} copied from {self.source.path}"
        )
        present = {b["batch_id"] for b in record["batches"]}
        repeated = sorted(present.intersection(b["batch_id"] for b in self.batches))
        if repeated:
            raise StoreError(f"{self.where}: batches {repeated} are already committed")
        rpc = record["rows_per_chunk"]
        if self.start % rpc:
            raise StoreError(
                f"store {path}: {self.start} committed rows end inside a chunk of {rpc} rows; "
                "expected a chunk boundary for chunk-parallel writes"
            )
        remove_uncommitted(path, record)
        array = rows_codec(path, record).open_array("r+")
        array.resize((self.start + n, array.shape[1]))
        self.first_chunk = self.start // rpc
        self._n = n

    def check_rows(self) -> None:
        """Refuse source ids this store already holds and labels outside its classes. The
        commit runs it unless the caller did, e.g. while the workers write chunks. The source is
        read one batch's rows file at a time, and nothing of it is kept: its labels, and its ids
        only when this store already holds rows (the source's own are unique)."""
        if self.checked:
            return
        committed = self.store.committed_id_hashes()
        store_ids = (committed, lambda: self.store.rows(columns=["id"]).column("id"))
        # Without class names any non-negative label is a class, as BatchWriter accepts them.
        n_classes = len(read_classes(self.store.path))
        top = n_classes - 1 if n_classes else np.iinfo(np.int32).max
        columns = ["label", "id"] if len(committed) else ["label"]
        for batch in self.batches:
            table = read_table(self.source.path / batch["rows_file"], columns=columns)
            if len(committed):
                ids = table.column("id").combine_chunks()
                if first_repeated(ids, id_hashes(ids), [store_ids]) is not None:
                    raise StoreError(f"{self.where}: ids already in the store")
            span = pc.min_max(table.column("label")).as_py()
            if span["min"] is not None and (span["min"] < -1 or span["max"] > top):
                raise StoreError(
                    f"{self.where}: labels span {span['min']} to {span['max']}; "
                    f"expected -1 to {top}"
                )
        self.checked = True

    def _finish(self) -> None:
        """Each source batch's rows file is copied as it is (the metadata of a batch of any
        size never passes through memory), then the record is committed once."""
        self.check_rows()
        record = read_record(self.store.path)
        if read_record(self.source.path).get(ROW_DIGESTS_KEY) == ROW_DIGEST_BYTES:
            # Rows files with short digests, copied as they are: this store holds them now.
            record[ROW_DIGESTS_KEY] = ROW_DIGEST_BYTES
            record["schema_version"] = schema_version(record)
        for batch in self.batches:
            start = self.start + batch["start"]
            rows_file = rows_file_name(start)
            source_file = self.source.path / batch["rows_file"]
            crc = batch.get("crc32c")
            crc = file_crc32c(source_file) if crc is None else crc
            copy_file_atomic(source_file, self.store.path / rows_file)
            _record_batch(record, batch["batch_id"], start, start + batch["stop"] - batch["start"],
                          rows_file, crc)  # fmt: skip
        write_record(self.store.path, record)


def remove_batches(store: WritableStore, batch_ids: Sequence[str]) -> int:
    """Remove the committed batches ``batch_ids``, wherever they are in the store, in one
    commit; returns their rows.

    One atomic rewrite of the commit record, under the writer lock: readers see the store with
    the batches or without them, and a process killed before the commit leaves the old store,
    after it the new one (the files it no longer names are removed by the next writer). A
    removed batch leaves the record's live batches for its ``removed`` list (a tombstone): its
    rows stay in the row chunks, which the readers skip (`storage.layout.live_mask`), so removing
    a batch from a store of 10^7 rows writes one record instead of moving every later row. Rows
    past the last live batch are not kept: the row array shrinks to it, and the record is the
    one the store had before those batches were committed.
    """
    with writer_lock(store.path):
        record = read_record(store.path)
        check_row_ranges(store.path, record)
        ids = [b["batch_id"] for b in record["batches"]]
        unknown = [b for b in batch_ids if b not in ids]
        if unknown:
            raise StoreError(
                f"store {store.path}: no batch {unknown[0]!r}; it has {ids[-10:]} "
                "(see `imgscale info --json`)"
            )
        gone = [b for b in record["batches"] if b["batch_id"] in set(batch_ids)]
        record["batches"] = [b for b in record["batches"] if b["batch_id"] not in set(batch_ids)]
        extent = max((b["stop"] for b in record["batches"]), default=0)
        tombstones = record.get("removed", []) + [
            {
                "batch_id": b["batch_id"],
                "start": b["start"],
                "stop": b["stop"],
                "digest": batch_digest(store.path, b),
                # Its rows file stays, so a model that learned from the batch can subtract its
                # rows exactly (`storage.changes`) until compaction drops them.
                "rows_file": b["rows_file"],
                **({"crc32c": b["crc32c"]} if b.get("crc32c") is not None else {}),
                # Its rows forgotten before, which a model that follows the store never had.
                **{k: b[k] for k in ("forgotten", "forgotten_before") if b.get(k)},
            }
            for b in gone
        ]
        # Rows cut off by the shrink are gone: their tombstones go with them.
        record["removed"] = sorted(
            (r for r in tombstones if r["start"] < extent), key=lambda r: r["start"]
        )
        if not record["removed"]:
            del record["removed"]
        record["schema_version"] = schema_version(record)
        record["committed_rows"] = extent
        write_record(store.path, record)
        remove_uncommitted(store.path, record)
    return sum(b["stop"] - b["start"] for b in gone)


def write_row_chunk(path: Path, chunk_index: int, block: np.ndarray) -> None:
    """Write row chunk ``chunk_index`` (all its rows) of a store a `CopyWriter` holds open.

    Runs on a worker: only this chunk's file is written, after the same per-row checks as
    ``BatchWriter.write`` (uint8 codes of width M for a PQ store, finite float32 rows otherwise).
    """
    record = read_record(path)
    rows = rows_codec(path, record)
    array = rows.open_array("r+")
    rpc = record["rows_per_chunk"]
    first = chunk_index * rpc
    stop = min(first + rpc, array.shape[0])
    where = f"store {path}, chunk {chunk_index} (rows {first}–{stop - 1})"
    block = rows.check_block(block, where, first)
    if len(block) != stop - first or first < record["committed_rows"]:
        raise StoreError(
            f"{where}: {len(block)} rows for a chunk of {stop - first} uncommitted rows; "
            "expected whole chunks past the committed rows (a CopyWriter open on the store)"
        )
    array[first:stop] = block
