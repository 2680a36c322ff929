"""Per-chunk reads of the features array, as small picklable objects dask ships to workers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from storage.chunk_io import direct_checksum, read_chunk_file
from storage.errors import StoreError
from storage.layout import chunk_file, open_features_array


class ChunkReader:
    """Array-like view of the first ``n_rows`` committed rows of a store's features.

    Holds only the store path and shape so it pickles to any worker; zarr is opened lazily in
    the process that reads. Each read must lie inside one zarr chunk (``da.from_array`` with the
    zarr chunking guarantees it), so every task reads exactly one chunk file.
    """

    def __init__(self, path: Path, n_rows: int, dim: int, rows_per_chunk: int) -> None:
        self.path = Path(path)
        self.shape = (n_rows, dim)
        self.rows_per_chunk = rows_per_chunk
        self.dtype = np.dtype(np.float32)
        self.ndim = 2
        self._array: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_array": None}

    def __getitem__(self, key: tuple[slice, slice]) -> np.ndarray:
        rows, cols = key if isinstance(key, tuple) else (key, slice(None))
        start, stop, _ = rows.indices(self.shape[0])
        if stop <= start:
            return np.empty((0, self.shape[1]), np.float32)[:, cols]
        index = start // self.rows_per_chunk
        if (stop - 1) // self.rows_per_chunk != index:
            raise ValueError(f"read of rows {start}–{stop - 1} spans chunks; read one at a time")
        return self.read_chunk(index, start, stop)[:, cols]

    def read_chunk(
        self, index: int, start: int | None = None, stop: int | None = None
    ) -> np.ndarray:
        """Rows ``start:stop`` (default: all committed rows) of chunk ``index``, checked."""
        chunk_start = index * self.rows_per_chunk
        chunk_stop = min(chunk_start + self.rows_per_chunk, self.shape[0])
        start = chunk_start if start is None else start
        stop = chunk_stop if stop is None else stop
        file = chunk_file(self.path, index)
        where = f"store {self.path}: chunk file {file}, rows {chunk_start}–{chunk_stop - 1}"
        # zarr returns the fill value for a missing chunk instead of failing.
        if not file.is_file():
            raise StoreError(f"{where}: missing; expected a chunk of committed rows")
        try:
            if self._array is None or self._array.shape[0] < stop:
                self._array = open_features_array(self.path)
            checksum = direct_checksum(self._array)
            if checksum is None:
                return self._array[start:stop]
            chunk_shape = (self.rows_per_chunk, self.shape[1])
            chunk = read_chunk_file(file, chunk_shape, self.dtype, checksum)
            return chunk[start - chunk_start : stop - chunk_start]
        except Exception as e:
            raise StoreError(
                f"{where}: unreadable ({type(e).__name__}: {e}); expected an intact chunk "
                "(truncated or corrupt file?)"
            ) from e
