"""ANN-benchmark ``.fvecs`` / ``.bvecs``: each row is a little-endian int32 dim, then dim values."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from imgscale.storage.errors import StoreError
from imgscale.storage.formats.base import Block


class _VecsSource:
    """Memory-mapped as a structured array; every row's dim field must equal the first row's."""

    value_dtype: str

    def __init__(self, path: Path, **_keys: str | None) -> None:
        self.path = path
        size = path.stat().st_size
        if size < 4:
            raise StoreError(f"{path}: {size} bytes; expected at least one vector")
        dim = int(np.fromfile(path, "<i4", count=1)[0])
        row_bytes = 4 + dim * np.dtype(self.value_dtype).itemsize
        if dim < 1 or size % row_bytes:
            raise StoreError(
                f"{path}: {size} bytes is not a whole number of rows of dim {dim} "
                f"({row_bytes} bytes each); expected every row to have the first row's dim "
                "(truncated file or mixed dims?)"
            )
        self._dim = dim
        self._rows = np.memmap(
            path, np.dtype([("dim", "<i4"), ("values", self.value_dtype, (dim,))]), mode="r"
        )
        self.shape = (len(self._rows), dim)

    def blocks(self, block_rows: int) -> Iterator[Block]:
        for start in range(0, self.shape[0], block_rows):
            rows = self._rows[start : start + block_rows]
            bad = rows["dim"] != self._dim
            if bad.any():
                i = start + int(np.argmax(bad))
                raise StoreError(
                    f"{self.path}: row {i} has dim field {int(rows['dim'][i - start])}; "
                    f"expected {self._dim} like row 0"
                )
            yield Block(np.array(rows["values"]))

    def close(self) -> None:
        self._rows = None


class FvecsSource(_VecsSource):
    extensions = (".fvecs",)
    value_dtype = "<f4"


class BvecsSource(_VecsSource):
    extensions = (".bvecs",)
    value_dtype = "u1"
