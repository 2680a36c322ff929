"""Per-chunk reads of the features array, as small picklable objects dask ships to workers."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from imgscale.storage.chunk_io import direct_checksum, read_chunk_file
from imgscale.storage.errors import StoreError
from imgscale.storage.fs import Location, location
from imgscale.storage.layout import chunk_file, open_features_array


class OneChunkReader:
    """What a per-chunk reader shares: one-chunk reads by slice, the checked chunk file, the
    direct checksummed read, and pickling without the open zarr array.

    A subclass sets ``path``, ``shape``, ``rows_per_chunk``, ``dtype`` and ``_array`` (None until
    opened) and implements ``read_chunk``; ``_transient`` names the attributes left unpickled.
    """

    ndim = 2
    _transient: tuple[str, ...] = ("_array",)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, **dict.fromkeys(self._transient)}

    def __getitem__(self, key: Any) -> np.ndarray:
        rows, cols = key if isinstance(key, tuple) else (key, slice(None))
        start, stop, _ = rows.indices(self.shape[0])
        if stop <= start:
            return np.empty((0, self.shape[1]), self.dtype)[:, cols]
        index = start // self.rows_per_chunk
        if (stop - 1) // self.rows_per_chunk != index:
            raise ValueError(f"read of rows {start}–{stop - 1} spans chunks; read one at a time")
        return self._read_rows(index, start, stop)[:, cols]

    def _read_rows(self, index: int, start: int, stop: int) -> np.ndarray:
        return self.read_chunk(index, start, stop)

    def _locate(
        self, index: int, start: int | None, stop: int | None, file: Location, what: str
    ) -> tuple[int, int, int, str]:
        """(chunk_start, start, stop, where) of a read of chunk ``index``, whose ``file`` must
        exist (zarr returns the fill value for a missing chunk instead of failing)."""
        chunk_start = index * self.rows_per_chunk
        chunk_stop = min(chunk_start + self.rows_per_chunk, self.shape[0])
        start = chunk_start if start is None else start
        stop = chunk_stop if stop is None else stop
        where = f"store {self.path}: chunk file {file}, rows {chunk_start}–{chunk_stop - 1}"
        if not file.is_file():
            raise StoreError(f"{where}: missing; expected a chunk of committed {what}")
        return chunk_start, start, stop, where

    def _read_direct(
        self, file: Location, chunk_start: int, start: int, stop: int, width: int, dtype: Any
    ) -> np.ndarray:
        """Rows ``start:stop`` of the open array, read from ``file`` directly (storage/chunk_io.py)
        when the codec allows it."""
        checksum = direct_checksum(self._array)
        if checksum is None:
            return self._array[start:stop]
        chunk = read_chunk_file(file, (self.rows_per_chunk, width), dtype, checksum)
        return chunk[start - chunk_start : stop - chunk_start]


@contextmanager
def unreadable_as_store_error(where: str, expected: str) -> Iterator[None]:
    """Re-raise any failure to read a chunk as a StoreError naming it and what was expected."""
    try:
        yield
    except Exception as e:
        raise StoreError(
            f"{where}: unreadable ({type(e).__name__}: {e}); expected {expected} "
            "(truncated or corrupt file?)"
        ) from e


class ChunkReader(OneChunkReader):
    """Array-like view of the first ``n_rows`` committed rows of a store's features.

    Holds only the store path and shape so it pickles to any worker; zarr is opened lazily in
    the process that reads. Each read must lie inside one zarr chunk (``da.from_array`` with the
    zarr chunking guarantees it), so every task reads exactly one chunk file.
    """

    def __init__(self, path: Location, n_rows: int, dim: int, rows_per_chunk: int) -> None:
        self.path = location(path)
        self.shape = (n_rows, dim)
        self.rows_per_chunk = rows_per_chunk
        self.dtype = np.dtype(np.float32)
        self._array: Any = None

    def read_chunk(
        self, index: int, start: int | None = None, stop: int | None = None
    ) -> np.ndarray:
        """Rows ``start:stop`` (default: all committed rows) of chunk ``index``, checked."""
        file = chunk_file(self.path, index)
        chunk_start, start, stop, where = self._locate(index, start, stop, file, "rows")
        with unreadable_as_store_error(where, "an intact chunk"):
            if self._array is None or self._array.shape[0] < stop:
                self._array = open_features_array(self.path)
            return self._read_direct(file, chunk_start, start, stop, self.shape[1], self.dtype)


class SplitRows:
    """Array-like view of the rows of a per-chunk ``reader`` where ``mask``: chunk b of the view
    holds the selected rows of the reader's chunk b (so chunks stay aligned with the store's;
    some are shorter, some empty).

    A read copies only the rows it asks for, from one chunk: a piece cut from a chunk (an
    embedding's) takes its own rows, and an empty chunk reads nothing. A filter task after each
    read copied every selected row of the chunk, and each piece repeated it. Pickles with the
    reader and the mask, packed to one bit a row (it travels in the graph: 1.25 MB for 10⁷ rows).
    """

    ndim = 2

    def __init__(self, reader: OneChunkReader, mask: np.ndarray) -> None:
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != (reader.shape[0],):
            raise ValueError(f"mask of shape {mask.shape} for {reader.shape[0]} rows")
        self.reader = reader
        self._packed_mask = np.packbits(mask)
        firsts = np.arange(0, len(mask), reader.rows_per_chunk)
        counts = np.add.reduceat(mask, firsts, dtype=np.int64) if len(mask) else firsts
        self.row_chunks = tuple(int(c) for c in counts)
        self._bounds = np.concatenate([[0], np.cumsum(counts)])
        self.shape = (int(self._bounds[-1]), reader.shape[1])
        self.dtype = reader.dtype

    def __getitem__(self, key: Any) -> np.ndarray:
        rows, cols = key if isinstance(key, tuple) else (key, slice(None))
        start, stop, _ = rows.indices(self.shape[0])
        if stop <= start:
            return np.empty((0, self.shape[1]), self.dtype)[:, cols]
        # The last chunk starting at or before `start`: empty chunks share its bound.
        index = int(np.searchsorted(self._bounds, start, side="right")) - 1
        if stop > self._bounds[index + 1]:
            raise ValueError(f"read of rows {start}–{stop - 1} spans chunks; read one at a time")
        chunk_start = index * self.reader.rows_per_chunk
        in_chunk = self._chunk_mask(chunk_start)
        offset = self._bounds[index]
        rows = np.flatnonzero(in_chunk)[start - offset : stop - offset]
        return _rows_in_one_chunk(self.reader, chunk_start + rows, cols)

    def _chunk_mask(self, chunk_start: int) -> np.ndarray:
        """The mask over the reader's chunk that starts at row ``chunk_start``."""
        first_byte = chunk_start // 8
        stop_byte = -(-(chunk_start + self.reader.rows_per_chunk) // 8)
        bits = np.unpackbits(self._packed_mask[first_byte:stop_byte])
        offset = chunk_start - 8 * first_byte
        return bits[offset : offset + self.reader.rows_per_chunk].view(bool)


class RowsAt:
    """Array-like view of the rows of a per-chunk ``reader`` at sorted ``positions``, chunked
    like `SplitRows` (chunk b of the view holds the positions in the reader's chunk b), built
    and pickled from the positions alone: its cost follows the rows asked for, where a
    `SplitRows` mask is one bit for every row of the store. For the few rows of a change
    (`FeatureStore.features_at`)."""

    ndim = 2

    def __init__(self, reader: OneChunkReader, positions: np.ndarray) -> None:
        positions = np.asarray(positions, dtype=np.int64)
        if len(positions) and (np.diff(positions) <= 0).any():
            raise ValueError("positions must be sorted and distinct")
        self.reader = reader
        self.positions = positions
        n_chunks = -(-reader.shape[0] // reader.rows_per_chunk)
        counts = np.bincount(positions // reader.rows_per_chunk, minlength=n_chunks)
        self.row_chunks = tuple(int(c) for c in counts)
        self.shape = (len(positions), reader.shape[1])
        self.dtype = reader.dtype

    def __getitem__(self, key: Any) -> np.ndarray:
        rows, cols = key if isinstance(key, tuple) else (key, slice(None))
        start, stop, _ = rows.indices(self.shape[0])
        if stop <= start:
            return np.empty((0, self.shape[1]), self.dtype)[:, cols]
        wanted = self.positions[start:stop]
        if wanted[0] // self.reader.rows_per_chunk != wanted[-1] // self.reader.rows_per_chunk:
            raise ValueError(f"read of rows {start}–{stop - 1} spans chunks; read one at a time")
        return _rows_in_one_chunk(self.reader, wanted, cols)


def _rows_in_one_chunk(reader: OneChunkReader, positions: np.ndarray, cols: Any) -> np.ndarray:
    """The rows of ``reader`` at sorted ``positions`` within one chunk: one read from the first
    to the last, which is the answer itself when they are consecutive."""
    first, last = int(positions[0]), int(positions[-1])
    block = reader[first : last + 1]
    if last - first + 1 == len(positions):
        return block[:, cols]
    return block[positions - first][:, cols]
