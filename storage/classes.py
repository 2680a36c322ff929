"""A store's class table while a batch is written: labels given as names or integers become
integer labels, and the classes the batch introduces are committed with it.

Every store has a class table (``classes.parquet``: label → name). Integer labels on a store whose
names are the numbers "0".."C-1" (or that has no classes yet) name their classes by number, so
``imgscale ingest`` of an integer-labelled file gives classes "0".."C-1"; such a batch must give
every class it introduces at least one row, so a typo like a label of 10⁹ is refused instead of
creating a billion empty classes. String labels (a parquet string column, an npz string array) are
class names: known names keep their label, new names are appended in the order they first appear.

Names are compared and stored in Unicode normal form C, so the composed and decomposed spellings
of one name ("café" typed on two systems) are one class, not two that look the same.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from imgscale.storage.errors import StoreError

UNLABELLED = -1


def same_spelling(name: str) -> str:
    """``name`` in Unicode normal form C: one spelling for names that read the same."""
    return unicodedata.normalize("NFC", name)


def check_class_names(names: Sequence[str], where: str) -> list[str]:
    """``names`` as a list, refused unless they are unique non-empty strings."""
    names = list(names)
    if not all(isinstance(n, str) and n for n in names) or len(set(names)) != len(names):
        raise StoreError(f"{where}: class names must be unique non-empty strings")
    return names


def numbered_names(count: int) -> list[str]:
    """The names integer labels get: "0".."count-1"."""
    return [str(i) for i in range(count)]


class ClassTable:
    """The committed class names plus those the batch being written adds."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(names)
        self._committed = len(self.names)
        self._index: dict[str, int] = {}
        for i, name in enumerate(self.names):  # a store written before NFC keeps its first
            self._index.setdefault(same_spelling(name), i)
        # Integer labels past the table may add numbered classes only to a numbered table.
        self._numbered = self.names == numbered_names(len(self.names))
        self._new_numbers: set[int] = set()

    @property
    def added(self) -> bool:
        return len(self.names) > self._committed or bool(self._new_numbers)

    def encode(self, labels: Any, n: int, where: str, first_row: int) -> np.ndarray:
        """int32 labels for one block (-1 = unlabelled); new names are appended to the table."""
        if labels is None:
            return np.full(n, UNLABELLED, np.int32)
        labels = np.asarray(labels)
        if labels.shape != (n,):
            raise StoreError(
                f"{where}: labels have shape {labels.shape}; expected ({n},), one per row"
            )
        if labels.dtype.kind in "USO":
            return self._encode_names(labels, where, first_row)
        if labels.dtype.kind not in "iu":
            raise StoreError(
                f"{where}: labels have dtype {labels.dtype}; expected integers or class names"
            )
        top = np.iinfo(np.int32).max if self._numbered else len(self.names) - 1
        bad = (labels < UNLABELLED) | (labels > top)
        if bad.any():
            i = int(np.argmax(bad))
            raise StoreError(
                f"{where}: {int(bad.sum())} labels out of range (first {labels[i]} at row "
                f"{first_row + i}); expected -1 (unlabelled) to {top}"
                + ("" if self._numbered else f", the store's classes {self.names[:10]}")
            )
        labels = labels.astype(np.int32)
        if self._numbered:
            new = np.unique(labels[labels >= self._committed])
            self._new_numbers.update(new.tolist())
        return labels

    def _encode_names(self, labels: np.ndarray, where: str, first_row: int) -> np.ndarray:
        values = labels.tolist()
        for i, value in enumerate(values):
            if not isinstance(value, str) or not value:
                raise StoreError(
                    f"{where}: label {value!r} at row {first_row + i}; expected a non-empty "
                    "class name"
                )
        out = np.empty(len(values), np.int32)
        for i, value in enumerate(values):
            name = same_spelling(value)
            index = self._index.get(name)
            if index is None:
                if self._new_numbers:
                    raise StoreError(
                        f"{where}: class name {name!r} at row {first_row + i} in a batch that "
                        "also has integer labels; expected one kind of label per batch"
                    )
                index = self._index[name] = len(self.names)
                self.names.append(name)
            out[i] = index
        return out

    def final_names(self, where: str) -> list[str]:
        """The table to commit with the batch; refuses numbered classes the batch leaves empty."""
        if not self._new_numbers:
            return self.names
        top = max(self._new_numbers)
        empty = top + 1 - self._committed - len(self._new_numbers)
        if empty:
            first = next(c for c in range(self._committed, top) if c not in self._new_numbers)
            raise StoreError(
                f"{where}: label {top} would create {empty} classes without rows (first "
                f"{first}); expected integer labels 0..C-1 with every new class present "
                "(a typo? or name the classes with --class-names FILE)"
            )
        return numbered_names(top + 1)


def read_class_names(path: str | Path) -> list[str]:
    """Class names from a text file, one a line (line i names label i); blank lines at the end
    are ignored, any other blank or repeated name is refused. A UTF-8 byte order mark (as some
    editors write) is not part of the first name, and names are in normal form C."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise StoreError(f"{path}: unreadable ({e}); expected a text file of class names") from e
    while lines and not lines[-1].strip():
        lines.pop()
    names = [same_spelling(line.strip()) for line in lines]
    for i, name in enumerate(names):
        if not name:
            raise StoreError(f"{path}: line {i + 1} is blank; expected one class name a line")
        if names.index(name) != i:
            raise StoreError(
                f"{path}: line {i + 1} repeats {name!r} (line {names.index(name) + 1}); "
                "expected unique class names"
            )
    if not names:
        raise StoreError(f"{path}: no class names; expected one class name a line")
    return names
