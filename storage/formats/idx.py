"""MNIST-style IDX files (``*-ubyte``, optionally gzipped): images as flattened rows, or labels."""

from __future__ import annotations

import gzip
import math
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import numpy as np

from imgscale.storage.errors import StoreError
from imgscale.storage.formats.base import Block, read_exact

# IDX type byte -> numpy dtype; multi-byte values are big-endian per the format.
IDX_DTYPES = {0x08: "u1", 0x09: "i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


class IdxSource:
    """IDX header: two zero bytes, a type byte, ndim, then ndim big-endian uint32 sizes.

    Images (e.g. magic 0x00000803, n x rows x cols) become n rows of rows*cols values; a 1-D file
    (0x00000801) is a labels file. Gzipped files are decompressed as a stream.
    """

    extensions = ("ubyte", "ubyte.gz", ".idx", ".idx.gz")

    def __init__(self, path: Path, **_keys: str | None) -> None:
        self.path = path
        with self._open() as stream:
            dims, self._dtype = self._read_header(stream)
        self.shape = (dims[0],) if len(dims) == 1 else (dims[0], math.prod(dims[1:]))

    def _open(self) -> IO[bytes]:
        if self.path.name.endswith(".gz"):
            return gzip.open(self.path, "rb")
        return open(self.path, "rb")

    def _read_header(self, stream: IO[bytes]) -> tuple[tuple[int, ...], np.dtype]:
        try:
            zero, kind, ndim = struct.unpack(">HBB", read_exact(stream, 4, self.path, "magic"))
        except (OSError, EOFError) as e:  # gzip raises these on a non-gzip or damaged file
            raise StoreError(f"{self.path}: unreadable ({e}); expected an IDX file") from e
        if zero != 0 or kind not in IDX_DTYPES or ndim < 1:
            raise StoreError(
                f"{self.path}: magic {zero:04x}{kind:02x}{ndim:02x}; expected an IDX file "
                "(e.g. 00000803 for images, 00000801 for labels)"
            )
        dims = struct.unpack(f">{ndim}I", read_exact(stream, 4 * ndim, self.path, "header"))
        return dims, np.dtype(IDX_DTYPES[kind])

    def blocks(self, block_rows: int) -> Iterator[Block]:
        n = self.shape[0]
        row_values = math.prod(self.shape[1:])
        with self._open() as stream:
            self._read_header(stream)
            for start in range(0, n, block_rows):
                rows = min(block_rows, n - start)
                data = read_exact(
                    stream, rows * row_values * self._dtype.itemsize, self.path, "data"
                )
                yield Block(np.frombuffer(data, self._dtype).reshape(rows, *self.shape[1:]))

    def close(self) -> None:
        """Nothing stays open between ``blocks`` calls."""
