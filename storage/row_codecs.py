"""How a store keeps its rows: float32 as given (``raw``), or the codes of a codec kept beside them.

`FeatureStore` and the writers ask `rows_codec` for the store's `StoredRows` and call its verbs
(open the row array, check a block, read chunks, describe, verify) without branching on the
encoding, as a zarr array never branches on its codecs. A coded store (``encoding`` other than
``raw``) holds uint8 codes, n × W, row-chunked like features, the codec's parameters in the
record's entry named after the encoding, and its arrays (e.g. a product quantizer's centroids)
beside the codes.

A codec is math and lives outside this layer (product quantization: `imgscale.pipeline.pq.PQCodec`);
it is found by its encoding's name in the ``imgscale.codecs`` entry-point group (pyproject.toml),
as zarr finds its codecs, and used only through `RowCodec`, the protocol below. A package outside
imgscale adds a codec by declaring such an entry point; no file here changes.

A codec's arrays decide every decoded value, so they are read as strictly as the codes: every
chunk must be present (zarr would read a deleted one as zeros, and every row would decode to
zeros) and end in a crc32c, or the store is refused naming the array.
"""

from __future__ import annotations

import contextlib
import functools
import math
from abc import ABC, abstractmethod
from collections.abc import Iterator
from importlib.metadata import entry_points
from typing import Any, ClassVar, Protocol, TypeAlias

import numpy as np
from zarr.codecs import Crc32cCodec

from imgscale.storage.chunks import ChunkReader, OneChunkReader, unreadable_as_store_error
from imgscale.storage.errors import StoreError
from imgscale.storage.fs import Location, location
from imgscale.storage.layout import (
    CODES,
    codes_chunk_file,
    create_codes_array,
    open_codes_array,
    open_features_array,
    open_small_array,
    read_record,
    write_record,
    write_small_array,
)
from imgscale.storage.lock import writer_lock
from imgscale.storage.validate import as_codes, as_features

CODECS = "imgscale.codecs"
RAW = "raw"

# What a store's record holds (JSON): a codec's parameters and what `imgscale info` shows of them.
JSON: TypeAlias = "str | int | float | bool | list[JSON] | dict[str, JSON] | None"
Params: TypeAlias = "dict[str, JSON]"


class RowCodec(Protocol):
    """What a store needs of a codec, and what a classifier may ask of it.

    Rows of dimension `dim` are kept as `code_width` uint8 codes each. The store records
    `encoding` (the codec's ``imgscale.codecs`` entry-point name), the JSON parameters `stored`
    returns and the float32 arrays `stored_arrays` returns; `from_stored` makes the codec again
    from them, after `stored_layout` has told the store which arrays of which shapes to read.
    Every decoded value a store returns is `decode` of its codes.

    Classifiers need the statistics of the rows the codes decode to (class sums and counts, the
    feature sum). A codec that can compute them on the codes offers
    ``row_stats(codes, y_index, n_classes)`` (the pipeline layer's `CodedRows` protocol,
    pipeline/coded_rows.py); any other codec's codes are decoded one block at a time.
    """

    encoding: ClassVar[str]

    @property
    def dim(self) -> int:
        """Values of a decoded row."""
        ...

    @property
    def code_width(self) -> int:
        """uint8 codes a row is kept as."""
        ...

    def encode(self, X: np.ndarray) -> np.ndarray:
        """(n, `code_width`) uint8 codes of float32 rows ``X`` (n, `dim`)."""
        ...

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """(n, `dim`) float32 rows that (n, `code_width`) uint8 ``codes`` stand for."""
        ...

    def check(self, dim: int) -> None:
        """ValueError unless the codec is sound and decodes rows of dimension ``dim``."""
        ...

    def stored(self) -> Params:
        """The parameters a store records beside the codes."""
        ...

    def stored_arrays(self) -> dict[str, np.ndarray]:
        """The float32 arrays a store keeps beside the codes, by name."""
        ...

    @staticmethod
    def stored_layout(params: JSON, dim: int) -> tuple[int, dict[str, tuple[int, ...]]]:
        """(`code_width`, the shape of each stored array) of a store whose record holds
        ``params`` and ``dim``; ValueError if ``params`` do not describe such a codec."""
        ...

    @staticmethod
    def describe(params: Params) -> Params:
        """`imgscale info` keys of a store of ``params``, prefixed by the encoding."""
        ...

    @classmethod
    def from_stored(cls, params: Params, arrays: dict[str, np.ndarray]) -> RowCodec:
        """The codec a store kept (`stored`, `stored_arrays`); ValueError if unsound."""
        ...


@functools.cache
def codec_class(encoding: str) -> type[RowCodec]:
    """The codec class registered for ``encoding`` (entry point group ``imgscale.codecs``);
    LookupError if none is, StoreError if it cannot be imported."""
    found = list(entry_points(group=CODECS, name=encoding))
    if not found:
        raise LookupError(encoding)
    try:
        return found[0].load()
    except (ImportError, AttributeError) as e:
        raise StoreError(
            f"encoding {encoding!r}: its codec {found[0].value} cannot be imported ({e}); "
            "expected an installed codec (reinstall the package that declares it)"
        ) from e


def encodings() -> tuple[str, ...]:
    """``raw`` and every registered codec's encoding."""
    return (RAW, *sorted(ep.name for ep in entry_points(group=CODECS)))


def rows_codec(path: Location, record: dict[str, Any]) -> StoredRows:
    """How the store at ``path`` with commit ``record`` keeps its rows; StoreError for an unknown
    encoding or malformed codec parameters."""
    encoding = record["encoding"]
    if encoding == RAW:
        return RawRows(path, record)
    try:
        cls = codec_class(encoding)
    except LookupError:
        raise StoreError(
            f"store {path}: encoding {encoding!r}; expected one of {encodings()}"
        ) from None
    return CodedRows(path, record, cls)


def new_coded_store(path: Location, codec: RowCodec, rows_per_chunk: int) -> None:
    """Write the codes array and the codec's arrays of a new coded store at ``path``."""
    create_codes_array(path, codec.code_width, rows_per_chunk)
    for name, values in codec.stored_arrays().items():
        write_small_array(path, name, values)


def coded_record(path: Location, codec: RowCodec, source: Params | None) -> dict[str, Any]:
    """The encoding entries of a new coded store's record; StoreError if ``codec`` is unsound."""
    with codec_errors(path):
        codec.check(codec.dim)
    return {
        "encoding": codec.encoding,
        codec.encoding: {**codec.stored(), "source": source or {}},
    }


def record_codec_statistics(path: Location, **statistics: float) -> None:
    """Add measured figures (e.g. ``mse``, ``relative_mse``) to a coded store's codec entry.

    Under the writer lock, so a concurrent commit is neither lost nor overwritten.
    """
    with writer_lock(path):
        record = read_record(path)
        rows = rows_codec(path, record)
        rows.codec_entry().update({name: float(value) for name, value in statistics.items()})
        write_record(path, record)


@contextlib.contextmanager
def codec_errors(path: Location) -> Iterator[None]:
    """Re-raise a codec's ValueError as a StoreError naming the store."""
    try:
        yield
    except StoreError:
        raise
    except ValueError as e:
        raise StoreError(f"store {path}: {e}") from e


class StoredRows(ABC):
    """How a store keeps its rows: a row array `width` values of `dtype` wide, and the codec
    that decodes them (`codec`: None when they are kept as float32 rows).

    `reader` reads float32 rows whatever the encoding, `stored_reader` the rows as kept; the
    store's reads, writes and checks go through these verbs alone, so no caller asks which of
    the two kinds, `RawRows` or `CodedRows`, a store has.
    """

    encoding: str
    width: int
    dtype: np.dtype
    # The prefix of a dask array of the rows as kept (`FeatureStore.stored_rows`).
    kept_as: ClassVar[str]

    def __init__(self, path: Location, record: dict[str, Any]) -> None:
        self.path = location(path)
        self.encoding = record["encoding"]
        self.dim = record["dim"]
        self.rows_per_chunk = record["rows_per_chunk"]

    @abstractmethod
    def open_array(self, mode: str = "r") -> Any:
        """The zarr row array."""

    @abstractmethod
    def check_block(self, block: Any, where: str, first: int) -> np.ndarray:
        """``block`` as the array stores it, or StoreError saying why not."""

    @abstractmethod
    def reader(self, n_rows: int) -> OneChunkReader:
        """Float32 rows of the first ``n_rows`` rows, one chunk a read."""

    @abstractmethod
    def stored_reader(self, n_rows: int) -> OneChunkReader:
        """The first ``n_rows`` rows as the array keeps them, one chunk a read."""

    @abstractmethod
    def codes_reader(self, n_rows: int) -> OneChunkReader:
        """The first ``n_rows`` rows' codes; StoreError for rows kept as float32."""

    @abstractmethod
    def codec(self) -> RowCodec | None:
        """The codec that decodes the rows as kept, or None (they are float32 rows)."""

    @abstractmethod
    def codec_entry(self) -> Params:
        """The record's entry of the codec's parameters; StoreError without a codec."""

    @abstractmethod
    def info(self, committed_rows: int, bytes_on_disk: int) -> Params:
        """Extra `imgscale info` keys."""

    def check_width(self) -> None:
        """StoreError unless the row array is as wide as the record says: one of the two was
        edited or damaged, and reading on would report every chunk as truncated."""
        try:
            columns = self.open_array().shape[1]
        except Exception:  # a missing or unreadable array: the reads report it, naming the file
            return
        if columns != self.width:
            raise StoreError(
                f"store {self.path}: its record says rows are {self.width} values wide but its "
                f"row array has {columns} columns; the store's metadata is damaged"
            )

    def verify(self, n_rows: int) -> None:
        """Check the codec's arrays, then read and checksum every chunk of the first ``n_rows``
        rows as kept."""
        self.codec()
        reader = self.stored_reader(n_rows)
        for index in range(math.ceil(n_rows / self.rows_per_chunk)):
            reader.read_chunk(index)


class RawRows(StoredRows):
    """Rows kept as given: finite float32, D wide."""

    kept_as = "features"

    def __init__(self, path: Location, record: dict[str, Any]) -> None:
        super().__init__(path, record)
        self.width = self.dim
        self.dtype = np.dtype(np.float32)

    def open_array(self, mode: str = "r") -> Any:
        return open_features_array(self.path, mode)

    def check_block(self, block: Any, where: str, first: int) -> np.ndarray:
        return as_features(block, self.dim, where, first)

    def reader(self, n_rows: int) -> ChunkReader:
        return ChunkReader(self.path, n_rows, self.dim, self.rows_per_chunk)

    def stored_reader(self, n_rows: int) -> ChunkReader:
        return self.reader(n_rows)

    def codes_reader(self, n_rows: int) -> OneChunkReader:
        raise StoreError(f"store {self.path}: encoding {self.encoding!r} has no codes")

    def codec(self) -> None:
        return None

    def codec_entry(self) -> Params:
        raise StoreError(f"store {self.path}: encoding {self.encoding!r} has no codec")

    def info(self, committed_rows: int, bytes_on_disk: int) -> Params:
        return {}


class CodedRows(StoredRows):
    """Rows kept as uint8 codes of a codec whose parameters and arrays the store holds."""

    kept_as = "codes"

    def __init__(self, path: Location, record: dict[str, Any], cls: type[RowCodec]) -> None:
        super().__init__(path, record)
        self.cls = cls
        self.dtype = np.dtype(np.uint8)
        self.params = record.get(self.encoding)
        with codec_errors(self.path):
            self.width, self.shapes = cls.stored_layout(self.params, self.dim)

    def open_array(self, mode: str = "r") -> Any:
        return open_codes_array(self.path, mode)

    def check_block(self, block: Any, where: str, first: int) -> np.ndarray:
        return as_codes(block, self.width, where)

    def reader(self, n_rows: int) -> CodesChunkReader:
        """Float32 rows the first ``n_rows`` rows' codes decode to, one chunk a read."""
        return CodesChunkReader(self, n_rows, decode=True)

    def stored_reader(self, n_rows: int) -> CodesChunkReader:
        return self.codes_reader(n_rows)

    def codes_reader(self, n_rows: int) -> CodesChunkReader:
        """The first ``n_rows`` rows' uint8 codes, one chunk a read."""
        return CodesChunkReader(self, n_rows)

    def codec(self) -> RowCodec:
        """The store's codec, its arrays read whole and checked against the record."""
        arrays = {name: self._read_array(name, shape) for name, shape in self.shapes.items()}
        with codec_errors(self.path):
            return self.cls.from_stored(self.params, arrays)

    def codec_entry(self) -> Params:
        """The record's entry of the codec's parameters (and figures measured of it)."""
        return self.params

    def info(self, committed_rows: int, bytes_on_disk: int) -> Params:
        """Extra `imgscale info` keys: the codec's own, raw size and compression, source."""
        raw_bytes = committed_rows * self.dim * 4
        return {
            **self.cls.describe(self.params),
            "raw_float32_bytes": raw_bytes,
            "compression_ratio": raw_bytes / bytes_on_disk if bytes_on_disk else 0.0,
            "source": self.params.get("source", {}),
        }

    def _read_array(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """Float32 array ``name`` of ``shape``, whole, refused unless every chunk is present and
        ends in a crc32c."""
        path = self.path
        where = f"store {path}: {path / name}"
        try:
            array = open_small_array(path, name)
            if array.shape != shape or array.dtype != np.float32:
                raise StoreError(
                    f"{where} of shape {array.shape} {array.dtype}; expected {shape} float32"
                )
            if not isinstance(array.metadata.codecs[-1], Crc32cCodec):
                raise StoreError(
                    f"{where} is not checksummed; expected chunks ending in a crc32c (rewritten "
                    "by another tool?)"
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
                f"{where} unreadable ({type(e).__name__}: {e}); expected {shape} float32 with "
                "intact checksummed chunks"
            ) from e


class CodesChunkReader(OneChunkReader):
    """Array-like view of the committed rows of a coded store, one zarr chunk per read.

    Pickles to any worker (path, record and the codec's class), like
    ``storage.chunks.ChunkReader``. With ``decode``, reads return float32 rows decoded by the
    store's codec (loaded once per process that reads), so ``features()`` of a coded store has
    the same interface as a raw one.
    """

    _transient = ("_array", "_codec")

    def __init__(self, rows: CodedRows, n_rows: int, *, decode: bool = False) -> None:
        self.rows = rows
        self.path = rows.path
        self.rows_per_chunk = rows.rows_per_chunk
        self.width = rows.width
        self.decode = decode
        self.shape = (n_rows, rows.dim if decode else rows.width)
        self.dtype = np.dtype(np.float32 if decode else np.uint8)
        self._array: Any = None
        self._codec: RowCodec | None = None

    def codec(self) -> RowCodec:
        if self._codec is None:
            self._codec = self.rows.codec()
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
            self._check_array()
        expected = "an intact checksummed chunk of uint8 codes"
        with unreadable_as_store_error(where, expected):
            return self._read_direct(file, chunk_start, start, stop, self.width, np.uint8)

    def _check_array(self) -> None:
        array = self._array
        if array.dtype != np.uint8 or array.ndim != 2 or array.shape[1] != self.width:
            raise StoreError(
                f"store {self.path}: {self.path / CODES} has shape {array.shape} "
                f"{array.dtype}; expected (n, {self.width}) uint8 codes (a codes array from "
                "another codec or a damaged store?)"
            )
