"""Readers of the files of vectors a store is given, a block of rows at a time, chosen by file
name ending."""

from __future__ import annotations

from pathlib import Path

from imgscale.storage.errors import StoreError
from imgscale.storage.formats.base import Block, Source
from imgscale.storage.formats.idx import IdxSource
from imgscale.storage.formats.numpy_files import NpySource, NpzSource
from imgscale.storage.formats.parquet import ParquetSource
from imgscale.storage.formats.vecs import BvecsSource, FvecsSource

FORMATS = {
    "npy": NpySource,
    "npz": NpzSource,
    "parquet": ParquetSource,
    "idx": IdxSource,
    "fvecs": FvecsSource,
    "bvecs": BvecsSource,
}


def format_of(path: Path) -> str:
    """Format name for ``path`` by its ending; StoreError listing the supported endings."""
    name = path.name.lower()
    for fmt, reader in FORMATS.items():
        if name.endswith(reader.extensions):
            return fmt
    supported = ", ".join(f"{fmt} ({' '.join(r.extensions)})" for fmt, r in FORMATS.items())
    raise StoreError(f"{path}: unknown file type; supported formats: {supported}")


def open_source(path: Path, **keys: str | bool | None) -> Source:
    """The reader of ``path``'s format; ``keys`` (x_key, y_key, ids_key, unlabelled) go to it."""
    return FORMATS[format_of(path)](path, **keys)


__all__ = ["FORMATS", "Block", "Source", "format_of", "open_source"]
