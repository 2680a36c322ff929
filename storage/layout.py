"""Where things live inside a store directory, and how the commit record is read and written.

A store is a zarr v3 group directory::

    zarr.json               group metadata; attributes["imgscale"] is the commit record
    features/               n_alloc x D float32 array, chunked by rows only
    rows/{start:012d}.parquet   row metadata, one file per committed batch (with each row's
                            content digest: the first 16 bytes of the sha256 of its image's
                            bytes or of its float32 values)
    rejected/{n:012d}.parquet   images refused by an ingest (key, sha256, reason), one file per
                            commit that refused any; the record lists them
    classes/{C:06d}-{crc:08x}.parquet   label -> class name, a new file whenever classes are
                            added (stores made before had one ``classes.parquet``)
    .lock                   flock target serialising writers

On an object store (an ``s3://`` URL, storage/fs.py) the commit record is instead the
latest of ``commits/{n:012d}.json`` and writers claim the next commit instead of taking the flock
(storage/commit_log.py says how that stays all-or-nothing).

Readers trust only the commit record: rows past ``committed_rows`` and rows files that no batch
names are leftovers of a writer that died and are overwritten or removed by the next writer.
The record's ``batches`` are the live batches, in row order; a removed batch whose rows are still
in the row chunks moves to its ``removed`` list (a tombstone: readers skip those rows). Live
batches and tombstones tile ``[0, committed_rows)``; a store written before any batch but the
last could be removed has no ``removed`` list, and every row is live.
The record holds the crc32c of every parquet file it names (rows, rejects, classes), so a
damaged or missing file is refused by name on read, never read as other labels or no classes.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import google_crc32c
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import zarr
from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec, ZstdCodec

from imgscale.storage.commit_log import read_commit, write_commit
from imgscale.storage.errors import StoreError
from imgscale.storage.fs import (
    Location,
    access_checked,
    is_local,
    put_object,
    read_table,
    table_bytes,
    zarr_target,
)

SCHEMA_VERSION = 1
# Coded stores (PQ the first) carry their own version so an imgscale that predates them (and knows
# only version 1) refuses one with its clear schema message instead of failing on a missing
# features array.
CODED_SCHEMA_VERSION = 2
# A store with tombstones (removed batches whose rows stay in the chunks) is one version later
# than its encoding's, so an imgscale that predates tombstones refuses it by its schema message
# instead of reading the removed rows as live ones.
TOMBSTONES_VERSION_STEP = 1
# A store holding rows files whose digests are short (`ROW_DIGEST_BYTES`) is two versions later
# again, past every version an imgscale that stores full sha256 digests reads (its encoding's,
# with tombstones, and one more for a record that lost them): that imgscale would find none of
# the short digests among its full ones and store again rows the store already holds.
ROW_DIGESTS_VERSION_STEP = 2
# The commit record's mark of such a store: the digest width of the rows files it writes.
ROW_DIGESTS_KEY = "row_digest_bytes"
ATTRS_KEY = "imgscale"
FEATURES = "features"
# Coded stores (storage/row_codecs.py): n x W uint8 codes, beside the arrays their codec names
# (e.g. a product quantizer's centroids and rotation).
CODES = "codes"
ROWS_DIR = "rows"
# The class table of stores made before class tables were versioned and checksummed.
LEGACY_CLASSES_FILE = "classes.parquet"
CLASSES_DIR = "classes"
LOCK_FILE = ".lock"
# zarr's LocalStore writes every key to "<key>.<uuid>.partial" then renames it; a writer killed
# mid-write leaves such files behind, and our own tmp files use the same suffix so one sweep
# cleans both.
PARTIAL_SUFFIX = ".partial"

# Chunk codecs after the bytes serializer. `imgscale bench io` (docs/benchmarks.md) chose the
# default: zstd saves ~8% on float features but caps reads at ~0.5 GB/s, while uncompressed
# chunks are read directly (storage/chunk_io.py) at page-cache speed. crc32c goes last in every
# chain so corruption of the stored bytes fails loudly instead of decoding to wrong numbers.
CODECS = {
    "none": (Crc32cCodec(),),
    "zstd": (ZstdCodec(level=1), Crc32cCodec()),
    "lz4": (BloscCodec(cname="lz4", clevel=5, shuffle="shuffle"), Crc32cCodec()),
}
DEFAULT_CODEC = "none"
COMPRESSORS = CODECS[DEFAULT_CODEC]
CHUNK_BYTES = 64 * 2**20
# write_empty_chunks=False (zarr's default) would skip or delete a chunk that equals the fill
# value, and a missing chunk is exactly what the readers treat as damage.
ARRAY_CONFIG = {"write_empty_chunks": True}

ROWS_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("label", pa.int32()),
        ("split", pa.string()),
        ("batch_id", pa.string()),
    ]
)
# Rows made from images (storage/images) carry a digest of the image's bytes, and rows given as
# vectors one of their float32 values, so the same content under another name or in another split
# is recognised (`FeatureStore.content_hashes`). The digest is the first 16 bytes of the sha256:
# two of 10^9 rows share one with odds of about 10^-21 (n^2 / 2^129), and a row of a PQ store of
# M = 112 code bytes carries 16 bytes of digest, not 32 (stores written before keep 32, and are
# read as their first 16: `short_digests`).
SHA256 = "sha256"
ROW_DIGEST_BYTES = 16
FULL_DIGEST_BYTES = 32
IMAGE_ROWS_SCHEMA = ROWS_SCHEMA.append(pa.field(SHA256, pa.binary(ROW_DIGEST_BYTES)))
# Parquet settings of rows files: ids of one batch share long prefixes (delta-encoded), the split
# and batch id take a value or two (dictionary, run-length), digests are random bytes (plain).
ROWS_PARQUET_OPTIONS: dict[str, Any] = {
    "compression": "zstd",
    "use_dictionary": ["label", "split", "batch_id"],
    "column_encoding": {"id": "DELTA_BYTE_ARRAY", SHA256: "PLAIN"},
}
REJECTED_DIR = "rejected"
REJECTED_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        (SHA256, pa.binary(FULL_DIGEST_BYTES)),
        ("reason", pa.string()),
        ("split", pa.string()),
    ]
)
CLASSES_SCHEMA = pa.schema([("label", pa.int32()), ("name", pa.string())])


def default_rows_per_chunk(dim: int) -> int:
    """Rows in a ~64 MiB float32 chunk: big enough that dask's per-task overhead is noise."""
    return max(1, CHUNK_BYTES // (4 * dim))


# A store of images grows from a few rows, a commit at a time, and zarr writes every chunk whole:
# its chunks hold about this many bytes, so that 300 rows take a megabyte, not 64, and a commit
# rewrites at most one such chunk besides its own rows; and at least this many rows (a partition
# of images), so that a wide store's chunks stay few.
IMAGE_CHUNK_BYTES = 2**20
IMAGE_CHUNK_MIN_ROWS = 256


def row_digest(sha256: bytes) -> bytes:
    """The digest a row carries of content whose sha256 is ``sha256``."""
    return sha256[:ROW_DIGEST_BYTES]


def short_digests(column: pa.Array | pa.ChunkedArray) -> pa.FixedSizeBinaryArray:
    """A rows file's digests as rows carry them now: the first 16 bytes of the 32-byte sha256
    a store written before short digests holds."""
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    width = column.type.byte_width
    if width == ROW_DIGEST_BYTES:
        return column
    values = np.frombuffer(column.buffers()[1], np.uint8)[column.offset * width :]
    values = values[: len(column) * width].reshape(-1, width)[:, :ROW_DIGEST_BYTES]
    return pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(ROW_DIGEST_BYTES), len(column), [None, pa.py_buffer(values.tobytes())]
    )


def image_rows_per_chunk(dim: int) -> int:
    """Rows a chunk of a store of ``dim``-D float32 image descriptors holds."""
    rows = max(IMAGE_CHUNK_MIN_ROWS, IMAGE_CHUNK_BYTES // (4 * dim))
    return min(rows, default_rows_per_chunk(dim))


def rows_file_name(start: int) -> str:
    return f"{ROWS_DIR}/{start:012d}.parquet"


def rejected_file_name(commit: int) -> str:
    return f"{REJECTED_DIR}/{commit:012d}.parquet"


def chunk_file(path: Location, chunk_index: int) -> Location:
    """File holding row-chunk ``chunk_index`` (default v3 chunk key encoding, one column chunk)."""
    return path / FEATURES / "c" / str(chunk_index) / "0"


def create_features_array(
    path: Location, dim: int, rows_per_chunk: int, codec: str = DEFAULT_CODEC
) -> None:
    if codec not in CODECS:
        raise StoreError(f"store {path}: codec {codec!r}; expected one of {sorted(CODECS)}")
    # NaN, not 0: any read of a never-written row would poison results visibly.
    _create_row_array(path, FEATURES, dim, rows_per_chunk, "float32", CODECS[codec], float("nan"))


def open_features_array(path: Location, mode: str = "r") -> zarr.Array:
    return zarr.open_array(**zarr_target(path / FEATURES), mode=mode, config=ARRAY_CONFIG)


def codes_chunk_file(path: Location, chunk_index: int) -> Location:
    """File holding row-chunk ``chunk_index`` of a PQ store's codes."""
    return path / CODES / "c" / str(chunk_index) / "0"


def create_codes_array(path: Location, m: int, rows_per_chunk: int) -> None:
    """The n x M uint8 codes of a PQ store: row-chunked like features, same codecs.

    Uncompressed + crc32c like features: zstd-1 and blosc-lz4 saved no bytes at all on M = 64
    codes (size ratio 1.000: PQ codes are near-uniform bytes) while slowing every read
    (``imgscale bench io``, docs/benchmarks.md), and uncompressed chunks take the direct reader.
    """
    _create_row_array(path, CODES, m, rows_per_chunk, "uint8", COMPRESSORS, 0)


def _create_row_array(
    path: Location,
    name: str,
    width: int,
    rows_per_chunk: int,
    dtype: str,
    compressors: Any,
    fill_value: Any,
) -> None:
    """An empty (0, width) array that grows by rows, one chunk file per row chunk."""
    zarr.create_array(
        **zarr_target(path),
        name=name,
        shape=(0, width),
        chunks=(rows_per_chunk, width),
        dtype=dtype,
        serializer=BytesCodec(),
        compressors=compressors,
        fill_value=fill_value,
        chunk_key_encoding={"name": "default", "separator": "/"},
        config=ARRAY_CONFIG,
    )


def open_codes_array(path: Location, mode: str = "r") -> zarr.Array:
    return zarr.open_array(**zarr_target(path / CODES), mode=mode, config=ARRAY_CONFIG)


def write_small_array(path: Location, name: str, values: np.ndarray) -> None:
    """A small array of a codec (e.g. centroids) written whole as one checksummed chunk."""
    array = zarr.create_array(
        **zarr_target(path),
        name=name,
        shape=values.shape,
        chunks=values.shape,
        dtype=values.dtype,
        serializer=BytesCodec(),
        compressors=COMPRESSORS,
        config=ARRAY_CONFIG,
    )
    array[...] = values


def open_small_array(path: Location, name: str) -> zarr.Array:
    return zarr.open_array(**zarr_target(path / name), mode="r")


def read_record(path: Location) -> dict[str, Any]:
    """The commit record, read straight from disk so commits by other processes are seen.

    zarr.json is replaced atomically by zarr's LocalStore, so this sees one commit or the next;
    on an object store, the latest of ``commits/`` is read (storage/commit_log.py), and a
    refusal of access names the store, the endpoint and the credentials' source.
    """
    with access_checked(path):
        return _read_record(path)


def _read_record(path: Location) -> dict[str, Any]:
    meta_file = path / "zarr.json"
    if not path.exists():
        raise StoreError(f"store {path}: does not exist; expected an imgscale feature store")
    if not is_local(path):
        record = read_commit(path)
        meta_file = path / "commits"
    else:
        try:
            meta = json.loads(meta_file.read_bytes())
        except FileNotFoundError:
            raise StoreError(
                f"store {path}: no zarr.json; expected an imgscale feature store (zarr v3 group)"
            ) from None
        except ValueError as e:
            raise StoreError(f"{meta_file}: not valid JSON ({e})") from e
        record = meta.get("attributes", {}).get(ATTRS_KEY) if isinstance(meta, dict) else None
    if not isinstance(record, dict):
        raise StoreError(
            f"{meta_file}: no '{ATTRS_KEY}' attributes; expected an imgscale feature store"
        )
    found = record.get("schema_version")
    expected = schema_version(record)
    # A record that lost its tombstones keeps its version: the row ranges then say what is wrong.
    if found != expected and not (
        found == expected + TOMBSTONES_VERSION_STEP and ("removed" in record or "forgets" in record)
    ):
        raise StoreError(
            f"{meta_file}: schema_version {found!r}, expected {expected}; "
            "this imgscale cannot read that store"
        )
    return record


def schema_version(record: dict[str, Any]) -> int:
    """The schema version a commit record must carry: its encoding's, two later once rows files
    with short digests are committed (`ROW_DIGESTS_VERSION_STEP`), one later with tombstones
    (removed batches, or forgotten rows of live batches: `storage.forget`)."""
    base = SCHEMA_VERSION if record.get("encoding", "raw") == "raw" else CODED_SCHEMA_VERSION
    if record.get(ROW_DIGESTS_KEY) == ROW_DIGEST_BYTES:
        base += ROW_DIGESTS_VERSION_STEP
    forgotten = any(b.get("forgotten") for b in record["batches"])
    return base + (TOMBSTONES_VERSION_STEP if record.get("removed") or forgotten else 0)


def write_record(path: Location, record: dict[str, Any]) -> None:
    """The commit: one atomic write of the group's zarr.json (LocalStore: tmp file + rename), or
    on an object store one create-only PUT of the next ``commits/`` record."""
    if not is_local(path):
        write_commit(path, record)
        return
    group = zarr.open_group(store=str(path), mode="r+")
    group.update_attributes({ATTRS_KEY: record})


def tmp_path_for(target: Path) -> Path:
    return target.with_name(f"{target.name}.{uuid.uuid4().hex}{PARTIAL_SUFFIX}")


def copy_file_atomic(source: Location, target: Location) -> None:
    """Copy a file (local or remote, either side) so a reader or a crash sees the old target
    or the new one, never half; a local-to-local copy streams, whatever the file's size."""
    if not is_local(target):
        put_object(target, source.read_bytes())
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_path_for(target)
    try:
        if is_local(source):
            shutil.copyfile(source, tmp)
        else:
            tmp.write_bytes(source.read_bytes())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_table_atomic(table: pa.Table, target: Location, **options: Any) -> int:
    """Write a parquet file so a reader or a crash sees the old file or the new one, never half
    (an object store's PUT is atomic by itself); returns the crc32c of its bytes. ``options``
    as `pyarrow.parquet.write_table`'s."""
    data = table_bytes(table, **options)
    if not is_local(target):
        put_object(target, data)
        return google_crc32c.value(data)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_path_for(target)
    try:
        tmp.write_bytes(data)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return google_crc32c.value(data)


def file_crc32c(file: Location) -> int:
    return google_crc32c.value(file.read_bytes())


def check_row_ranges(path: Location, record: dict[str, Any]) -> None:
    """StoreError unless the live batches and the tombstones of ``record`` tile
    ``[0, committed_rows)``, each row once: a record whose counts were edited or damaged would
    otherwise pair row metadata with other rows' features."""
    ranges = [(b["start"], b["stop"], f"batch {b['batch_id']!r}") for b in record["batches"]]
    ranges += [
        (r["start"], r["stop"], f"removed batch {r['batch_id']!r}")
        for r in record.get("removed", [])
    ]
    expected = 0
    for start, stop, name in sorted(ranges):
        if start != expected or stop <= start:
            where = f"rows {start}–{stop - 1}" if stop > start else f"no rows (start {start})"
            raise StoreError(
                f"store {path}: zarr.json gives {name} {where} where row {expected} was expected "
                "next; the store's commit record is damaged"
            )
        expected = stop
    if expected != record["committed_rows"]:
        raise StoreError(
            f"store {path}: zarr.json says {record['committed_rows']} committed rows but its "
            f"batches hold {expected}; the store's commit record is damaged"
        )


def live_mask(record: dict[str, Any]) -> np.ndarray | None:
    """Which of the ``committed_rows`` rows are live (not of a removed batch, not forgotten:
    `storage.forget`), or None when all are (a store from which no batch was removed, or only
    trailing ones, and no row forgotten)."""
    n = record["committed_rows"]
    forgotten = any(b.get("forgotten") for b in record["batches"])
    if not forgotten and sum(b["stop"] - b["start"] for b in record["batches"]) == n:
        return None
    mask = np.zeros(n, dtype=bool)
    for batch in record["batches"]:
        mask[batch["start"] : batch["stop"]] = True
        mask[batch["start"] + np.asarray(batch.get("forgotten", []), dtype=np.int64)] = False
    return mask


def batch_digest(path: Location, batch: dict[str, Any]) -> str:
    """A committed batch's content digest: the crc32c of its rows file (ids, labels, splits and,
    for rows ingested from files or images, each row's sha256), as 8 hex digits. A rows file is
    never rewritten, so the digest names this commit of the batch: the same batch id ingested
    again with other rows has another. A batch committed before rows files were checksummed has
    its file's checksum computed here. A batch that compaction rewrote keeps the digest it was
    committed with (``digest``): its rows are those rows still (`storage.compact`)."""
    if "digest" in batch:
        return batch["digest"]
    crc = batch.get("crc32c")
    if crc is None:
        try:
            crc = file_crc32c(path / batch["rows_file"])
        except FileNotFoundError:
            raise StoreError(
                f"store {path}: rows file {path / batch['rows_file']} of batch "
                f"{batch['batch_id']!r} is missing; the store is damaged"
            ) from None
    return f"{crc:08x}"


def read_checked_table(file: Location, crc32c: int | None, where: str, **options: Any) -> pa.Table:
    """A parquet file the commit record names, checked against the record's crc32c (None: a
    file written before checksums were kept); ``options`` as `pyarrow.parquet.read_table`'s."""
    try:
        data = file.read_bytes()
    except FileNotFoundError:
        raise StoreError(f"{where}: {file} is missing; the store is damaged") from None
    if crc32c is not None and google_crc32c.value(data) != crc32c:
        raise StoreError(f"{where}: {file} fails its crc32c checksum; the store is damaged")
    return pq.read_table(io.BytesIO(data), **options)


def classes_file(path: Location, record: dict[str, Any]) -> Location:
    """The class table file ``record`` names (``classes.parquet`` in a store made before class
    tables were versioned)."""
    entry = record.get("classes")
    return path / (entry["file"] if entry is not None else LEGACY_CLASSES_FILE)


def read_classes(path: Location, record: dict[str, Any] | None = None) -> list[str]:
    """The class names, from the class table ``record`` (default: the committed one) names."""
    record = read_record(path) if record is None else record
    entry = record.get("classes")
    file = classes_file(path, record)
    if entry is not None:
        table = read_checked_table(file, entry["crc32c"], f"store {path}: class table")
    else:
        if not file.exists():
            return []
        table = read_table(file)
    table = table.sort_by("label")
    labels = table.column("label").to_pylist()
    if labels != list(range(len(labels))):
        raise StoreError(f"{file}: labels {labels[:10]}…, expected 0..{len(labels) - 1} in order")
    return table.column("name").to_pylist()


def write_classes(path: Location, names: list[str], record: dict[str, Any]) -> None:
    """Write a class table of ``names`` as a new file and name it in ``record`` (committed by
    the caller's `write_record`): a file is never rewritten, so a reader holding the previous
    record still reads the table it names."""
    table = pa.table(
        {"label": pa.array(range(len(names)), pa.int32()), "name": pa.array(names, pa.string())},
        schema=CLASSES_SCHEMA,
    )
    data_crc = google_crc32c.value(table_bytes(table))
    file = f"{CLASSES_DIR}/{len(names):06d}-{data_crc:08x}.parquet"
    crc = write_table_atomic(table, path / file)
    record["classes"] = {"file": file, "crc32c": crc}
