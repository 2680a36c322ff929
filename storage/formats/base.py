"""What every ingest format reader provides: a shape known up front and row blocks on demand."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

import numpy as np

from imgscale.storage.errors import StoreError


@dataclass
class Block:
    """Consecutive rows of a source: features (or, for a labels file, 1-D values) and extras."""

    X: np.ndarray
    labels: np.ndarray | None = None
    ids: np.ndarray | None = None


class Source(Protocol):
    """An open source file. ``shape`` is (n, dim) for features or (n,) for a labels-only file.

    ``blocks`` streams rows so a file larger than memory can be ingested.
    """

    path: Path
    shape: tuple[int, ...]

    def blocks(self, block_rows: int) -> Iterator[Block]: ...

    def close(self) -> None: ...


def read_exact(stream: IO[bytes], nbytes: int, path: Path, what: str) -> bytes:
    """Read exactly ``nbytes`` from a (possibly decompressing) stream, or fail naming the file."""
    parts = []
    remaining = nbytes
    while remaining:
        part = stream.read(remaining)
        if not part:
            raise StoreError(f"{path}: ended early in {what}; expected {remaining} more bytes")
        parts.append(part)
        remaining -= len(part)
    return b"".join(parts)


def resolve_keys(
    path: Path,
    names: list[str],
    x_key: str,
    y_key: str | None,
    ids_key: str | None,
    defaults: tuple[str, str],
    what: str,
) -> tuple[str | None, str | None]:
    """``y_key`` and ``ids_key``, each defaulting to its name in ``defaults`` when the file has
    it; raises unless ``x_key`` and the keys given are among ``names`` (the file's ``what``s)."""
    y_default, ids_default = defaults
    if y_key is None and y_default in names:
        y_key = y_default
    if ids_key is None and ids_default in names:
        ids_key = ids_default
    for key in (x_key, y_key, ids_key):
        if key is not None and key not in names:
            raise StoreError(f"{path}: no {what} {key!r}; has {names}")
    return y_key, ids_key
