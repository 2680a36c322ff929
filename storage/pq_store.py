"""PQ feature stores: the codec kept beside the codes, and the reader that decodes them.

A PQ store is a feature store (same zarr group, commit record written last, parquet row metadata)
whose record has ``encoding="pq"`` and ``schema_version`` ``PQ_SCHEMA_VERSION``, holding ``codes``
(n x M uint8, row-chunked), ``codebook`` (M x 256 x D/M float32) and optionally ``rotation``
(D x D float32, rotated = x @ rotation). It is created by `storage.create.create_pq_store`.

The codebook and rotation decide every decoded value, so they are read as strictly as the codes:
every chunk must be present (zarr would read a deleted one as zeros, and every row would decode
to zeros) and end in a crc32c, or the store is refused naming the array.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import zarr
from zarr.codecs import Crc32cCodec

from imgscale.storage.chunks import OneChunkReader, unreadable_as_store_error
from imgscale.storage.errors import StoreError
from imgscale.storage.fs import Location, location
from imgscale.storage.layout import (
    CODEBOOK,
    CODES,
    ROTATION,
    codes_chunk_file,
    open_codes_array,
    open_small_array,
    read_record,
    write_record,
    write_small_array,
)
from imgscale.storage.lock import writer_lock
from imgscale.storage.pq_codec import KSUB, PQCodec, check_codec


def pq_record(codec: PQCodec, source: dict[str, Any] | None) -> dict[str, Any]:
    """The ``pq`` entry of a new PQ store's commit record."""
    return {
        "m": codec.m,
        "ksub": KSUB,
        "dsub": codec.dsub,
        "rotation": codec.rotation is not None,
        "source": source or {},
    }


def write_codec(path: Location, codec: PQCodec) -> None:
    """Write the codebook (and rotation) of a new PQ store."""
    write_small_array(path, CODEBOOK, codec.codebook)
    if codec.rotation is not None:
        write_small_array(path, ROTATION, codec.rotation)


def record_pq_statistics(path: Location, **statistics: float) -> None:
    """Add measured figures (e.g. ``mse``, ``relative_mse``) to a PQ store's ``pq`` record.

    Under the writer lock, so a concurrent commit is neither lost nor overwritten.
    """
    with writer_lock(path):
        record = read_record(path)
        pq_params(path, record)
        record["pq"].update({name: float(value) for name, value in statistics.items()})
        write_record(path, record)


def pq_params(path: Location, record: dict[str, Any]) -> dict[str, Any]:
    """The record's ``pq`` entry, checked; StoreError naming the store if missing or malformed."""
    params = record.get("pq")
    ok = (
        isinstance(params, dict)
        and isinstance(params.get("m"), int)
        and params.get("ksub") == KSUB
        and isinstance(params.get("dsub"), int)
        and params["m"] * params["dsub"] == record["dim"]
    )
    if not ok:
        raise StoreError(
            f"store {path}: encoding 'pq' with pq parameters {params!r}; expected "
            f"{{'m': M, 'ksub': {KSUB}, 'dsub': D/M}} with M·dsub = dim {record['dim']}"
        )
    return params


def load_codec(path: Location, record: dict[str, Any]) -> PQCodec:
    """The store's codebook and rotation, checked against its record."""
    params = pq_params(path, record)
    dim = record["dim"]
    codec = PQCodec.__new__(PQCodec)
    codec.codebook = _read_side_array(path, CODEBOOK, (params["m"], KSUB, params["dsub"]))
    codec.rotation = (
        _read_side_array(path, ROTATION, (dim, dim)) if params.get("rotation") else None
    )
    check_codec(codec, dim, f"store {path}", m=params["m"])
    return codec


def _read_side_array(path: Location, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """Float32 array ``name`` (codebook or rotation) of ``shape``, whole, refused unless every
    chunk is present and ends in a crc32c."""
    where = f"store {path}: {path / name}"
    try:
        array = open_small_array(path, name)
        if array.shape != shape or array.dtype != np.float32:
            raise StoreError(
                f"{where} of shape {array.shape} {array.dtype}; expected {shape} float32"
            )
        if not isinstance(array.metadata.codecs[-1], Crc32cCodec):
            raise StoreError(
                f"{where} is not checksummed; expected chunks ending in a crc32c (rewritten by "
                "another tool?)"
            )
        present = array.nchunks_initialized
        if present != array.nchunks:
            raise StoreError(
                f"{where} has {present} of its {array.nchunks} chunks; expected all (a chunk "
                "file was deleted)"
            )
        return array[...]
    except StoreError:
        raise
    except Exception as e:  # zarr raises whatever its codecs raise on damaged bytes
        raise StoreError(
            f"{where} unreadable ({type(e).__name__}: {e}); expected {shape} float32 with intact "
            "checksummed chunks"
        ) from e


def check_codes_array(path: Location, array: zarr.Array, m: int) -> None:
    if array.dtype != np.uint8 or array.ndim != 2 or array.shape[1] != m:
        raise StoreError(
            f"store {path}: {path / CODES} has shape {array.shape} {array.dtype}; expected "
            f"(n, {m}) uint8 codes (a codes array from another codec or a damaged store?)"
        )


class CodesChunkReader(OneChunkReader):
    """Array-like view of the committed rows of a PQ store's codes, one zarr chunk per read.

    Pickles to any worker (path and shape only), like ``storage.chunks.ChunkReader``. With
    ``decode``, reads return float32 rows decoded with the store's codebook (loaded once per
    process that reads), so ``features()`` of a PQ store has the same interface as a raw one.
    """

    _transient = ("_array", "_codec")

    def __init__(
        self, path: Location, record: dict[str, Any], n_rows: int, *, decode: bool = False
    ) -> None:
        self.path = location(path)
        self.record = record
        self.rows_per_chunk = record["rows_per_chunk"]
        self.m = pq_params(self.path, record)["m"]
        self.decode = decode
        self.shape = (n_rows, record["dim"] if decode else self.m)
        self.dtype = np.dtype(np.float32 if decode else np.uint8)
        self._array: Any = None
        self._codec: PQCodec | None = None

    def codec(self) -> PQCodec:
        if self._codec is None:
            self._codec = load_codec(self.path, self.record)
        return self._codec

    def _read_rows(self, index: int, start: int, stop: int) -> np.ndarray:
        codes = self.read_chunk(index, start, stop)
        return self.codec().decode(codes) if self.decode else codes

    def read_chunk(
        self, index: int, start: int | None = None, stop: int | None = None
    ) -> np.ndarray:
        """Codes ``start:stop`` (default: all committed rows) of chunk ``index``, checked."""
        file = codes_chunk_file(self.path, index)
        chunk_start, start, stop, where = self._locate(index, start, stop, file, "codes")
        if self._array is None or self._array.shape[0] < stop:
            try:
                self._array = open_codes_array(self.path)
            except Exception as e:
                raise StoreError(f"{where}: codes array unreadable ({e})") from e
            check_codes_array(self.path, self._array, self.m)
        expected = "an intact checksummed chunk of uint8 codes"
        with unreadable_as_store_error(where, expected):
            return self._read_direct(file, chunk_start, start, stop, self.m, np.uint8)

    def verify(self) -> None:
        self.codec()
        for index in range(math.ceil(self.shape[0] / self.rows_per_chunk)):
            self.read_chunk(index)


def pq_info(path: Location, record: dict[str, Any], bytes_on_disk: int) -> dict[str, Any]:
    """Extra `imgscale info` keys of a PQ store: M, sub-vector size, rotation, compression."""
    params = pq_params(path, record)
    raw_bytes = record["committed_rows"] * record["dim"] * 4
    return {
        "pq_m": params["m"],
        "pq_dsub": params["dsub"],
        "pq_rotation": bool(params.get("rotation")),
        "raw_float32_bytes": raw_bytes,
        "compression_ratio": raw_bytes / bytes_on_disk if bytes_on_disk else 0.0,
        "source": params.get("source", {}),
    }
