"""FeatureStore: create, open and read an imgscale feature store (see storage/layout.py)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from imgscale.storage.chunks import RowsAt, SplitRows
from imgscale.storage.classes import check_class_names
from imgscale.storage.errors import StoreError
from imgscale.storage.forget import (
    forget_rows,
    forgotten_count,
    forgotten_offsets,
    live_offsets,
    live_rows,
)
from imgscale.storage.fs import (
    Location,
    absolute,
    location,
    read_parquet_schema,
    tree_bytes,
)
from imgscale.storage.ids import HashRuns, id_hashes
from imgscale.storage.layout import (
    FULL_DIGEST_BYTES,
    IMAGE_ROWS_SCHEMA,
    REJECTED_SCHEMA,
    ROWS_DIR,
    ROWS_SCHEMA,
    SCHEMA_VERSION,
    SHA256,
    batch_digest,
    check_row_ranges,
    classes_file,
    live_mask,
    read_checked_table,
    read_classes,
    read_record,
    short_digests,
    write_classes,
    write_record,
)
from imgscale.storage.lock import writer_lock
from imgscale.storage.row_codecs import RowCodec, record_codec_statistics, rows_codec
from imgscale.storage.writer import BatchWriter, remove_batches

if TYPE_CHECKING:
    import dask.array as da

# The digest column of rows files written before digests were cut to `ROW_DIGEST_BYTES`.
FULL_SHA256 = pa.binary(FULL_DIGEST_BYTES)
# Row metadata columns kept dictionary-encoded in memory (few distinct values).
_DICTIONARY = ("split", "batch_id")

__all__ = ["SCHEMA_VERSION", "FeatureStore", "open_store"]


class FeatureStore:
    """An open feature store. Cheap to construct; every read re-reads the commit record so rows
    committed by other processes appear, and rows being written never do.

    Every read sees the live rows only, in row order: the rows of a removed batch (kept in the
    row chunks, `remove_batch`) are skipped by the features, codes and metadata reads alike, so
    row i of each is the same row.
    """

    def __init__(self, path: str | Path | Location) -> None:
        self.path = location(path)
        record = read_record(self.path)
        self.dim: int = record["dim"]
        self.rows_per_chunk: int = record["rows_per_chunk"]
        # How the rows are kept (storage/row_codecs.py): checked here, so a store of an unknown
        # encoding or with malformed codec parameters is refused when opened.
        rows = rows_codec(self.path, record)
        rows.check_width()
        self.encoding: str = rows.encoding
        # Committed rows files never change, so their columns are cached by (file, column), and
        # the hashes of the ids of the files read so far grow with each new batch. A file is
        # known by its name and checksum: a batch committed at the rows of a removed last batch
        # has that batch's file name.
        self._rows_cache: dict[tuple[Any, str], pa.ChunkedArray] = {}
        self._file_columns: dict[Any, list[str]] = {}
        self._id_hashes = HashRuns()
        self._ids_files: set[Any] = set()

    def __repr__(self) -> str:
        return f"FeatureStore({str(self.path)!r}, rows={self.committed_rows}, dim={self.dim})"

    @property
    def committed_rows(self) -> int:
        """Rows of the live batches (a removed batch's rows and forgotten rows are not counted)."""
        return sum(live_rows(b) for b in self._record()["batches"])

    def _record(self) -> dict[str, Any]:
        """The commit record, its row ranges checked (`storage.layout.check_row_ranges`)."""
        record = read_record(self.path)
        check_row_ranges(self.path, record)
        return record

    @property
    def created(self) -> dict[str, Any]:
        """Provenance of the store's creation (time, imgscale version, host, ...)."""
        return read_record(self.path)["created"]

    @property
    def descriptor(self) -> dict[str, Any] | None:
        """What computed the rows of a store made from images (the descriptors' names and
        parameters), or None for a store of given vectors."""
        return read_record(self.path).get("descriptor")

    @property
    def class_names(self) -> list[str]:
        return read_classes(self.path)

    def set_class_names(self, names: Sequence[str]) -> None:
        """Extend the class list; existing names keep their labels so committed rows stay valid.

        ``names`` must agree with the existing names on their common prefix; a shorter list
        changes nothing.
        """
        names = check_class_names(names, f"store {self.path}")
        with writer_lock(self.path):
            record = read_record(self.path)
            old = read_classes(self.path, record)
            common = min(len(old), len(names))
            if names[:common] != old[:common]:
                raise StoreError(
                    f"store {self.path}: class names {names[:common]} would relabel rows; "
                    f"expected the existing names {old} first, new names after"
                )
            if len(names) > len(old):
                write_classes(self.path, names, record)
                write_record(self.path, record)

    def has_batch(self, batch_id: str) -> bool:
        return any(b["batch_id"] == batch_id for b in read_record(self.path)["batches"])

    def batches(self) -> list[dict[str, Any]]:
        """The live batches in row order: ``batch_id``, ``rows`` (live ones), ``digest`` (the
        content digest of this commit of the batch, `storage.layout.batch_digest`) and
        ``forgotten`` (how many of its rows were forgotten so far), so a model or an embedded
        store can record which batches it was made from and tell later which of them were
        removed, committed again with other rows, or lost rows since."""
        return [
            {
                "batch_id": b["batch_id"],
                "rows": live_rows(b),
                "digest": batch_digest(self.path, b),
                "forgotten": forgotten_count(b),
            }
            for b in self._record()["batches"]
        ]

    def remove_batch(self, batch_id: str) -> int:
        """Remove committed batch ``batch_id``, any of them (crash-safe, one commit); returns its
        rows. Every read after it sees the other batches' rows only."""
        return self.remove_batches([batch_id])

    def remove_batches(self, batch_ids: Sequence[str]) -> int:
        """Remove the committed batches ``batch_ids`` in one commit; returns their rows."""
        removed = remove_batches(self, batch_ids)
        self._rows_cache.clear()
        self._id_hashes = HashRuns()
        self._ids_files.clear()
        return removed

    def forget(
        self, ids: Sequence[str] = (), *, sha256: Sequence[str] = (), reason: str = ""
    ) -> int:
        """Forget single rows by id or content digest in one commit (`storage.forget`); returns
        their count. Every read after it skips them."""
        return forget_rows(self, ids, sha256=sha256, reason=reason)

    def split_counts(self) -> dict[str, int]:
        """Rows per split name, in order of first appearance."""
        splits = self._rows(self._record(), None, ["split"]).column("split")
        return {s["values"]: s["counts"] for s in splits.value_counts().to_pylist()}

    def require_split(self, split: str | None) -> None:
        """StoreError naming the available splits unless ``split`` (if given) has rows."""
        if split is None:
            return
        counts = self.split_counts()
        if split not in counts:
            raise StoreError(
                f"store {self.path}: no split {split!r}; it has "
                + (", ".join(f"{name!r} ({n} rows)" for name, n in counts.items()) or "no rows")
            )

    def writer(self, batch_id: str) -> BatchWriter:
        """Context manager streaming one batch in many blocks; commits once at a clean exit."""
        return BatchWriter(self, batch_id)

    def append(
        self, batch_id: str, X: Any, labels: Any = None, ids: Any = None, split: Any = "train"
    ) -> int:
        """Append one batch; returns rows committed (0 if ``batch_id`` was already committed)."""
        with self.writer(batch_id) as w:
            n = w.write(X, labels, ids, split)
        return n

    # -- reading --------------------------------------------------------------------------

    def features(self, split: str | None = None, where: np.ndarray | None = None) -> da.Array:
        """Committed rows as a float32 dask array, one task per zarr chunk, full width.

        With ``split``, only that split's rows; ``where``, a boolean mask over those rows (over
        all rows without ``split``), keeps a subset of them. Chunks stay aligned to the zarr
        chunks (some become shorter or empty), and a chunk reads only the rows it keeps.
        """
        record = self._record()
        reader = rows_codec(self.path, record).reader(record["committed_rows"])
        return self._dask_rows("imgscale-features-", reader, record, split, where)

    def codes(self, split: str | None = None) -> da.Array:
        """A coded store's committed codes as a uint8 (n, W) dask array, chunked like
        `features`; StoreError for a raw store.

        For the paths that never decode (class means from gathered centroids, ADC search).
        """
        record = self._record()
        reader = rows_codec(self.path, record).codes_reader(record["committed_rows"])
        return self._dask_rows("imgscale-codes-", reader, record, split)

    def stored_rows(self, split: str | None = None) -> da.Array:
        """Committed rows as the store keeps them, chunked like `features`: a raw store's
        float32 rows (`features` itself), a coded store's codes, which `codec` decodes.

        For classifiers that compute on codes what they would on the decoded rows (class sums),
        read without asking the store's encoding.
        """
        record = self._record()
        rows = rows_codec(self.path, record)
        reader = rows.stored_reader(record["committed_rows"])
        return self._dask_rows(f"imgscale-{rows.kept_as}-", reader, record, split)

    def features_at(self, positions: np.ndarray) -> da.Array:
        """Rows at ``positions`` of the row array (sorted; live, forgotten or of a removed
        batch: `storage.changes`), one dask chunk per zarr chunk that holds any of them: the
        graph and the pass over it grow with the rows asked for, not with the store."""
        record = self._record()
        reader = rows_codec(self.path, record).reader(record["committed_rows"])
        return self._rows_at("imgscale-features-", reader, record, positions)

    def codes_at(self, positions: np.ndarray) -> da.Array:
        """A coded store's codes at ``positions`` of the row array (see `features_at`)."""
        record = self._record()
        reader = rows_codec(self.path, record).codes_reader(record["committed_rows"])
        return self._rows_at("imgscale-codes-", reader, record, positions)

    def stored_rows_at(self, positions: np.ndarray) -> da.Array:
        """The rows as kept (`stored_rows`) at ``positions`` of the row array (see
        `features_at`)."""
        record = self._record()
        rows = rows_codec(self.path, record)
        reader = rows.stored_reader(record["committed_rows"])
        return self._rows_at(f"imgscale-{rows.kept_as}-", reader, record, positions)

    def _dask_rows(
        self,
        prefix: str,
        reader: Any,
        record: dict[str, Any],
        split: str | None,
        where: np.ndarray | None = None,
    ) -> da.Array:
        """One task per zarr chunk of ``reader``, of the chunk's live rows kept by ``split`` and
        ``where`` (`SplitRows`: chunks stay aligned to the zarr chunks, some shorter or empty)."""
        # Imported here: commands that only describe a store (`imgscale info`) never need dask.
        import dask.array as da
        from dask.base import tokenize

        # Which commits of which batches these rows are: the same row count after a batch was
        # removed and another committed in its place is other rows.
        batches = [(b["batch_id"], b["rows_file"], b.get("crc32c")) for b in record["batches"]]
        n, width = reader.shape
        row_chunks = self.rows_per_chunk
        live = live_mask(record)
        mask = None  # over the live rows
        if split is not None:
            # Compared by arrow: a numpy object array of 1M split names took 0.1 s more.
            in_split = pc.equal(self._rows(record, None, ["split"]).column("split"), split)
            mask = pc.fill_null(in_split, False).to_numpy(zero_copy_only=False)
        if where is not None:
            n_live = n if live is None else int(live.sum())
            mask = _subset(np.ones(n_live, dtype=bool) if mask is None else mask, where, self.path)
        if live is not None:
            mask = live if mask is None else _subset(live, mask, self.path)
        if mask is not None:
            reader = SplitRows(reader, mask)
            row_chunks = reader.row_chunks
        return da.from_array(
            reader,
            chunks=(row_chunks, width),
            name=prefix + tokenize(str(absolute(self.path)), n, record["created"], mask, batches),
            asarray=False,
            fancy=False,
            meta=np.empty((0, width), reader.dtype),
        )

    def _rows_at(
        self, prefix: str, reader: Any, record: dict[str, Any], at: np.ndarray
    ) -> da.Array:
        """The rows of ``reader`` at positions ``at``: one task per chunk that holds any, the
        graph and its tasks made from the positions alone (`RowsAt`)."""
        import dask.array as da
        from dask.base import tokenize

        # As `_dask_rows`: which commits of which batches these positions are rows of.
        batches = [(b["batch_id"], b["rows_file"], b.get("crc32c")) for b in record["batches"]]
        n, width = reader.shape
        at = np.asarray(at, dtype=np.int64)
        if len(at) and (at.min() < 0 or at.max() >= n):
            raise StoreError(
                f"store {self.path}: rows {at.min()}–{at.max()} asked for, but the row array "
                f"holds {n} rows (rows dropped since they were listed)"
            )
        view = RowsAt(reader, at)
        rows = da.from_array(
            view,
            chunks=(view.row_chunks, width),
            name=prefix + tokenize(str(absolute(self.path)), n, record["created"], at, batches),
            asarray=False,
            fancy=False,
            meta=np.empty((0, width), reader.dtype),
        )
        holding = [b for b, count in enumerate(view.row_chunks) if count] or [0]
        return rows.blocks[holding]

    @property
    def codec(self) -> RowCodec | None:
        """The `RowCodec` that decodes a coded store's codes, its arrays checked against the
        store; None for a raw store, whose rows are kept as float32."""
        return rows_codec(self.path, read_record(self.path)).codec()

    def record_pq_statistics(self, **statistics: float) -> None:
        """Keep measured figures of a coded store's codec (e.g. ``mse``, ``relative_mse``)."""
        record_codec_statistics(self.path, **statistics)

    def rows(self, split: str | None = None, columns: Sequence[str] | None = None) -> pa.Table:
        """Committed row metadata in row order: the columns of the rows schema (id, label, split,
        batch_id), or only ``columns`` (``sha256`` too, on a store made from images); with
        ``split``, only that split's rows."""
        names = list(columns or ROWS_SCHEMA.names)
        schema = pa.schema([IMAGE_ROWS_SCHEMA.field(name) for name in names])
        return self._rows(self._record(), split, names).cast(schema)

    def labels(self, split: str | None = None) -> np.ndarray:
        table = self._rows(self._record(), split, ["label"])
        return table.column("label").to_numpy().astype(np.int32, copy=False)

    def ids(self, split: str | None = None) -> np.ndarray:
        table = self._rows(self._record(), split, ["id"])
        return table.column("id").to_numpy(zero_copy_only=False)

    def splits(self, split: str | None = None) -> np.ndarray:
        table = self._rows(self._record(), split, ["split"])
        return table.column("split").to_numpy(zero_copy_only=False)

    def committed_id_hashes(self) -> HashRuns:
        """Hashes of the ids of all committed rows (`storage.ids`); after the first call, only
        new batches' ids are read. The ids themselves are not kept."""
        record = self._record()
        keys = {_ids_key(batch) for batch in record["batches"]}
        if self._ids_files - keys:  # a batch removed, or rows forgotten, since: hash again
            self._id_hashes = HashRuns()
            self._ids_files.clear()
        for batch in record["batches"]:
            if _ids_key(batch) not in self._ids_files:
                ids = self._read_batch_rows(record, batch, ["id"]).column("id")
                kept = live_offsets(batch)
                self._id_hashes.add(id_hashes(ids if kept is None else ids.take(kept)))
                self._ids_files.add(_ids_key(batch))
        return self._id_hashes

    def has_ids(self, ids: Sequence[str]) -> np.ndarray:
        """Whether each of ``ids`` is the id of a committed row (by hash, confirmed exactly)."""
        ids = pa.array(list(ids), pa.string())
        found = self.committed_id_hashes().contains(id_hashes(ids))
        if found.any():
            committed = self.rows(columns=["id"]).column("id")
            found = pc.is_in(ids, value_set=committed).to_numpy(zero_copy_only=False)
        return np.asarray(found, dtype=bool)

    def content_hashes(self, batch_ids: Collection[str] | None = None) -> pa.Table:
        """``id``, ``split`` and ``sha256`` of the committed rows that carry a content digest
        (the image's bytes for rows made from images, the row's float32 values for rows given as
        vectors), each the first 16 bytes of that sha256 (`layout.row_digest`), whichever width
        its rows file holds; rows of batches committed without digests are left out. With
        ``batch_ids``, those live batches' rows alone, read without being cached: a lookup in a
        few batches holds no more than them."""
        columns = ["id", "split", SHA256]
        record = self._record()
        tables = []
        for batch in record["batches"]:
            if batch_ids is not None and batch["batch_id"] not in batch_ids:
                continue
            if SHA256 not in self._rows_file_columns(batch):
                continue
            if batch_ids is None:
                tables.append(self._batch_rows(record, batch, columns))
            else:
                table, kept = self._read_batch_rows(record, batch, columns), live_offsets(batch)
                tables.append(table if kept is None else table.take(kept))
        if not tables:
            return pa.schema([IMAGE_ROWS_SCHEMA.field(c) for c in columns]).empty_table()
        return pa.concat_tables(tables)

    def _rows_file_columns(self, batch: dict[str, Any]) -> list[str]:
        key = _file_key(batch)
        if key not in self._file_columns:
            self._file_columns[key] = read_parquet_schema(self.path / batch["rows_file"]).names
        return self._file_columns[key]

    def rejected(self) -> pa.Table:
        """Images an ingest refused and no later ingest committed: key, sha256, reason and
        split of the latest refusal of each key, in the order they were refused."""
        record = read_record(self.path)
        entries = record.get("rejected", [])
        files = [
            read_checked_table(self.path / r["file"], r.get("crc32c"), f"store {self.path}")
            for r in entries
        ]
        if not files:
            return REJECTED_SCHEMA.empty_table()
        table = pa.concat_tables(files)
        # Rows committed when each refusal was (0 in stores older than the entry's "rows").
        rows_then = np.repeat([r.get("rows", 0) for r in entries], [f.num_rows for f in files])
        keys = table.column("key").to_numpy(zero_copy_only=False)
        # The latest refusal of each key, unless the key has since been committed as a row.
        _, last = np.unique(keys[::-1], return_index=True)
        keep = np.sort(len(keys) - 1 - last)
        table = table.take(pa.array(keep))
        # Where each live row's batch starts, to tell a commit after the refusal from its own.
        batches = record["batches"]
        batch_start = np.repeat([b["start"] for b in batches], [live_rows(b) for b in batches])
        ids = self._rows(record, None, ["id"]).column("id")
        row = pc.index_in(table.column("key"), value_set=ids).to_numpy(zero_copy_only=False)
        held = ~np.isnan(row.astype(float))
        since = np.zeros(len(row), bool)
        since[held] = batch_start[row[held].astype(np.int64)] >= rows_then[keep][held]
        return table.filter(pa.array(~since))

    def _rows(
        self, record: dict[str, Any], split: str | None, columns: Sequence[str] | None = None
    ) -> pa.Table:
        """Row metadata as stored in memory: ``split`` and ``batch_id`` dictionary-encoded."""
        names = list(columns or ROWS_SCHEMA.names)
        read = names if split is None or "split" in names else [*names, "split"]
        tables = [self._batch_rows(record, b, read) for b in record["batches"]]
        if not tables:
            return pa.schema([ROWS_SCHEMA.field(name) for name in names]).empty_table()
        table = pa.concat_tables(tables)
        if split is not None:
            table = table.filter(pc.fill_null(pc.equal(table.column("split"), split), False))
        return table.select(names)

    def _batch_rows(
        self, record: dict[str, Any], batch: dict[str, Any], columns: Sequence[str]
    ) -> pa.Table:
        """One batch's metadata ``columns`` of its live rows, each column read once and cached.

        A pass needs labels and splits; ids (a string per row) are most of a large store's
        metadata and are read only when asked for. ``split`` and ``batch_id`` take few distinct
        values, so they are kept dictionary-encoded: an int32 a row, not a string. The cache
        holds the whole file's columns; forgotten rows are left out on the way out.
        """
        key = _file_key(batch)
        missing = [c for c in columns if (key, c) not in self._rows_cache]
        if missing:
            table = self._read_batch_rows(record, batch, missing)
            for column in missing:
                self._rows_cache[(key, column)] = table.column(column)
        table = pa.table({c: self._rows_cache[(key, c)] for c in columns})
        kept = live_offsets(batch)
        return table if kept is None else table.take(kept)

    def _read_batch_rows(
        self, record: dict[str, Any], batch: dict[str, Any], columns: Sequence[str]
    ) -> pa.Table:
        """One batch's metadata ``columns`` read from its rows file and checked (not cached):
        its row count against the record, its column types, and its labels against the class
        table (a label past the table would be read as no class, or as another class)."""
        file = self.path / batch["rows_file"]
        where = f"store {self.path}: rows file {file} for rows {batch['start']}–{batch['stop'] - 1}"
        expected = batch["stop"] - batch["start"]
        try:
            table = read_checked_table(
                file,
                batch.get("crc32c"),
                where,
                columns=list(columns),
                read_dictionary=[c for c in columns if c in _DICTIONARY],
            )
        except (OSError, pa.ArrowException) as e:
            raise StoreError(
                f"{where} unreadable ({e}); expected {expected} rows of metadata"
            ) from e
        if table.num_rows != expected:
            raise StoreError(f"{where} has {table.num_rows} rows; expected {expected}")
        for column in columns:
            stored = table.schema.field(column).type
            value_type = stored.value_type if pa.types.is_dictionary(stored) else stored
            expected_type = IMAGE_ROWS_SCHEMA.field(column).type
            older = column == SHA256 and value_type == FULL_SHA256
            if value_type != expected_type and not older:
                raise StoreError(
                    f"{where}: column {column!r} is {value_type}; expected {expected_type}"
                )
        if SHA256 in columns:
            table = table.set_column(
                table.column_names.index(SHA256), SHA256, short_digests(table.column(SHA256))
            )
        if "label" in columns:
            _check_labels(self.path, record, table.column("label"), where)
        return table

    # -- inspection -----------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """Summary for `imgscale info`: flat, JSON-ready, keys stable."""
        record = self._record()
        names = self.class_names
        rows = self._rows(record, None, ["label", "split"])
        labels = rows.column("label").to_numpy()
        values, counts = np.unique(labels, return_counts=True)
        label_counts = {
            _label_key(int(v), names): int(c) for v, c in zip(values, counts, strict=True)
        }
        removed = record.get("removed", [])
        forgotten = sum(len(forgotten_offsets(b)) for b in record["batches"])
        summary = {
            "rows": rows.num_rows,
            "dim": record["dim"],
            "encoding": record["encoding"],
            "classes": names or [int(v) for v in values if v >= 0],
            "label_counts": label_counts,
            "bytes_on_disk": tree_bytes(self.path),
            # Ids, labels, splits, batch ids and content digests: the rows files' bytes a row.
            "metadata_bytes_per_row": _metadata_bytes_per_row(self.path, record),
            "rows_per_chunk": record["rows_per_chunk"],
            "schema_version": record["schema_version"],
            "splits": self.split_counts(),
            "batches": _batches(record, rows),
            # Removed batches whose rows are still in the row chunks (skipped by every read).
            "removed_batches": [r["batch_id"] for r in removed],
            "removed_rows_on_disk": sum(r["stop"] - r["start"] for r in removed),
            # Forgotten rows of live batches, skipped by every read, whose bytes stay in the row
            # chunks until `imgscale compact`.
            "forgotten_rows": forgotten,
            "forgotten_bytes_on_disk": forgotten * _row_bytes(self.path, record),
            "rejected": self.rejected().num_rows if record.get("rejected") else 0,
        }
        if record.get("descriptor") is not None:
            summary["descriptor"] = record["descriptor"]
        rows = rows_codec(self.path, record)
        summary.update(rows.info(summary["rows"], summary["bytes_on_disk"]))
        return summary

    def verify(self) -> None:
        """Read and checksum every committed chunk and rows file; StoreError on the first fault."""
        record = self._record()
        n = record["committed_rows"]
        self._rows_cache.clear()
        self._id_hashes = HashRuns()
        self._ids_files.clear()
        self._rows(record, None)  # every column of every rows file, read and checked
        rows_codec(self.path, record).verify(n)


def _batches(record: dict[str, Any], rows: pa.Table) -> list[dict[str, Any]]:
    """Each live batch: its id, rows and split (splits joined by "," if it has several)."""
    out = []
    offset = 0  # of the batch among the live rows
    for batch in record["batches"]:
        splits = rows.column("split").slice(offset, live_rows(batch))
        offset += live_rows(batch)
        names = pc.unique(splits).to_pylist()
        out.append(
            {
                "batch_id": batch["batch_id"],
                "rows": live_rows(batch),
                "split": ",".join(names),
            }
        )
    return out


def _metadata_bytes_per_row(path: Location, record: dict[str, Any]) -> float:
    """Bytes on disk of the rows files, over the rows they describe (those of removed batches
    and forgotten rows included: their metadata stays until `imgscale compact`)."""
    n = record["committed_rows"]
    rows_dir = path / ROWS_DIR
    return round(tree_bytes(rows_dir) / n, 2) if n and rows_dir.exists() else 0.0


def _label_key(label: int, names: list[str]) -> str:
    # Keys are strings so the dict is the same before and after a JSON round trip.
    if label == -1:
        return "unlabelled"
    return names[label] if label < len(names) else str(label)


def _file_key(batch: dict[str, Any]) -> tuple[str, int | None]:
    """A committed rows file: its name and checksum (None for a file from before checksums)."""
    return batch["rows_file"], batch.get("crc32c")


def _ids_key(batch: dict[str, Any]) -> tuple[str, int | None, int]:
    """A committed rows file and how many of its rows are forgotten: its live ids."""
    return *_file_key(batch), len(forgotten_offsets(batch))


def _row_bytes(path: Location, record: dict[str, Any]) -> int:
    """Bytes one row takes in the row chunks (uncompressed)."""
    array = rows_codec(path, record).open_array()
    return array.dtype.itemsize * array.shape[1]


def _check_labels(
    path: Location, record: dict[str, Any], labels: pa.ChunkedArray, where: str
) -> None:
    """StoreError unless ``labels`` are -1 (unlabelled) or a class of the store's class table
    (any non-negative label in a store without one)."""
    span = pc.min_max(labels).as_py()
    if span["min"] is None:
        return
    names = read_classes(path, record)
    top = len(names) - 1 if names else np.iinfo(np.int32).max
    if span["min"] < -1 or span["max"] > top:
        bad = span["max"] if span["max"] > top else span["min"]
        table = classes_file(path, record)
        raise StoreError(
            f"{where}: label {bad}, but the class table {table} names {len(names)} classes "
            f"(labels -1 to {top}); the store is damaged"
        )


def open_store(path: str | Path | Location) -> FeatureStore:
    """Open an existing store; StoreError if missing, not a store, or of another schema version."""
    return FeatureStore(path)


def _subset(mask: np.ndarray, where: Any, path: Location) -> np.ndarray:
    """A copy of `mask` with its True rows narrowed to those where `where` (one value per True
    row)."""
    where = np.asarray(where)
    if where.dtype != bool or where.shape != (int(mask.sum()),):
        raise StoreError(
            f"store {path}: `where` must be one boolean per selected row ({int(mask.sum())}), "
            f"got {where.dtype} of shape {where.shape}"
        )
    narrowed = mask.copy()
    narrowed[mask] = where
    return narrowed
