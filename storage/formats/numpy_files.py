"""``.npy`` (memory-mapped) and ``.npz`` (members streamed out of the zip) sources."""

from __future__ import annotations

import math
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import numpy as np
from numpy.lib import format as npformat

from imgscale.storage.errors import StoreError
from imgscale.storage.formats.base import Block, read_exact, resolve_keys


class NpySource:
    """A 2-D (features) or 1-D (labels) ``.npy`` file, memory-mapped so it may exceed RAM."""

    extensions = (".npy",)

    def __init__(self, path: Path, **_keys: str | None) -> None:
        self.path = path
        with open(path, "rb") as f:
            magic = f.read(len(npformat.MAGIC_PREFIX))
        if magic != npformat.MAGIC_PREFIX:
            raise StoreError(
                f"{path}: starts with {magic!r}, not the .npy magic {npformat.MAGIC_PREFIX!r}; "
                "expected a .npy file written by numpy.save"
            )
        try:
            # Never allow_pickle: loading must not execute code from the file.
            self._array = np.load(path, mmap_mode="r", allow_pickle=False)
        except ValueError as e:
            raise StoreError(
                f"{path}: not a numeric .npy array ({e}); expected numbers, not objects"
            ) from e
        if self._array.ndim not in (1, 2):
            raise StoreError(f"{path}: array of shape {self._array.shape}; expected 1-D or 2-D")
        self.shape = self._array.shape

    def blocks(self, block_rows: int) -> Iterator[Block]:
        for start in range(0, self.shape[0], block_rows):
            yield Block(np.asarray(self._array[start : start + block_rows]))

    def close(self) -> None:
        # np.load's memmap holds the file open until the array is released.
        self._array = None


class NpzSource:
    """Named arrays in an ``.npz`` (savez or savez_compressed), streamed member by member.

    ``x_key`` defaults to "X" or else the only 2-D member; labels come from ``y_key`` (default
    "y" if present) and ids from ``ids_key`` (default "ids" if present).

    Without labels, a member left unused that holds one value per row is refused unless
    ``unlabelled`` says the rows have none: it is far more often labels under another name
    (``labels=y``) than data to drop, and ingesting those rows unlabelled would make the next
    ingest, with the right key, add them all a second time.
    """

    extensions = (".npz",)

    def __init__(
        self,
        path: Path,
        x_key: str | None = None,
        y_key: str | None = None,
        ids_key: str | None = None,
        *,
        unlabelled: bool = False,
        **_keys: str | None,
    ) -> None:
        self.path = path
        try:
            self._zip = zipfile.ZipFile(path)
        except (OSError, zipfile.BadZipFile) as e:
            raise StoreError(f"{path}: not a readable .npz ({e})") from e
        self._members = {n[: -len(".npy")]: n for n in self._zip.namelist() if n.endswith(".npy")}
        headers = {key: self._header(key) for key in self._members}
        x_key = x_key or self._default_x(headers)
        y_key, ids_key = resolve_keys(
            path, sorted(headers), x_key, y_key, ids_key, ("y", "ids"), "array"
        )
        self.shape = headers[x_key][0]
        if len(self.shape) not in (1, 2):
            raise StoreError(f"{path}: {x_key!r} has shape {self.shape}; expected 2-D features")
        for key in (y_key, ids_key):
            if key is not None and headers[key][0] != self.shape[:1]:
                raise StoreError(
                    f"{path}: {key!r} has shape {headers[key][0]}; expected ({self.shape[0]},)"
                )
        self._check_labels(headers, x_key, y_key, ids_key, unlabelled)
        self._keys = (x_key, y_key, ids_key)

    def _check_labels(
        self,
        headers: dict[str, tuple],
        x_key: str,
        y_key: str | None,
        ids_key: str | None,
        unlabelled: bool,
    ) -> None:
        """StoreError if ``unlabelled`` contradicts a labels member, or if there are no labels
        and ``unlabelled`` is not said while an unused member has one value per row."""
        if unlabelled:
            if y_key is not None:
                raise StoreError(
                    f"{self.path}: labels {y_key!r} found, but the rows were said to be "
                    "unlabelled; expected one or the other"
                )
            return
        if y_key is not None:
            return
        per_row = [
            key
            for key, (shape, _) in sorted(headers.items())
            if key not in (x_key, ids_key) and tuple(shape) == tuple(self.shape[:1])
        ]
        if per_row:
            raise StoreError(
                f"{self.path}: no labels array 'y', but {per_row} hold one value per row; "
                f"expected labels named: --y-key {per_row[0]} (y_key), or rows said to be "
                "unlabelled: --unlabelled (unlabelled=True)"
            )

    def _default_x(self, headers: dict[str, tuple]) -> str:
        if "X" in headers:
            return "X"
        two_d = [k for k, (shape, _) in headers.items() if len(shape) == 2]
        if len(two_d) != 1:
            raise StoreError(
                f"{self.path}: cannot tell which array holds the features among {sorted(headers)}; "
                "expected one named 'X' or exactly one 2-D array (or pass x_key)"
            )
        return two_d[0]

    def _header(self, key: str, stream: IO[bytes] | None = None) -> tuple:
        """(shape, dtype) of a member, leaving ``stream`` positioned at the first data byte."""
        own = stream is None
        stream = self._zip.open(self._members[key]) if own else stream
        try:
            version = npformat.read_magic(stream)
            if version == (1, 0):
                shape, fortran, dtype = npformat.read_array_header_1_0(stream)
            elif version == (2, 0):
                shape, fortran, dtype = npformat.read_array_header_2_0(stream)
            else:
                raise StoreError(
                    f"{self.path}: member {key!r} uses .npy format {version}; expected 1.0 or 2.0"
                )
        except ValueError as e:
            raise StoreError(f"{self.path}: member {key!r} is not a valid .npy ({e})") from e
        finally:
            if own:
                stream.close()
        if dtype.hasobject:
            raise StoreError(
                f"{self.path}: member {key!r} has object dtype; expected numeric or fixed-width "
                "string arrays (object arrays would need pickle)"
            )
        if fortran and len(shape) > 1:
            raise StoreError(
                f"{self.path}: member {key!r} is Fortran-ordered; rows cannot be streamed, "
                "expected C order"
            )
        return shape, dtype

    def blocks(self, block_rows: int) -> Iterator[Block]:
        streams = {}
        try:
            for key in self._keys:
                if key is not None:
                    stream = self._zip.open(self._members[key])
                    shape, dtype = self._header(key, stream)
                    streams[key] = (stream, dtype, shape[1:])
            n = self.shape[0]
            for start in range(0, n, block_rows):
                rows = min(block_rows, n - start)
                x, y, ids = (self._read(streams, key, rows) for key in self._keys)
                yield Block(x, y, ids)
        finally:
            for stream, _, _ in streams.values():
                stream.close()

    def _read(self, streams: dict, key: str | None, rows: int) -> np.ndarray | None:
        if key is None:
            return None
        stream, dtype, row_shape = streams[key]
        nbytes = rows * math.prod(row_shape) * dtype.itemsize
        data = read_exact(stream, nbytes, self.path, f"member {key!r}")
        return np.frombuffer(data, dtype).reshape(rows, *row_shape)

    def close(self) -> None:
        self._zip.close()
