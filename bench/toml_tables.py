"""Tables kept as data rather than Python: a TOML file of arrays of tables (``[[figure]]``, …),
each entry read into the frozen dataclass of its kind.

The documents' choices (:mod:`imgscale.bench.headlines`, :mod:`imgscale.bench.peers`) are lists
of records that people edit often and code reads once; as TOML they are edited without touching
code. A key the dataclass does not know, a missing one or a table of no known kind is refused,
naming the file and the entry, so a typo cannot drop a figure silently.
"""

from __future__ import annotations

import tomllib
from dataclasses import fields
from importlib.resources.abc import Traversable
from pathlib import Path


def read(path: Path | Traversable, kinds: dict[str, type]) -> dict[str, tuple]:
    """Each kind's entries in file order, as instances of ``kinds[kind]`` (arrays become tuples);
    a kind the file does not have is empty."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"{path}: {error}") from None
    unknown = sorted(set(data) - set(kinds))
    if unknown:
        raise ValueError(f"{path}: unknown table {', '.join(unknown)}; known: {', '.join(kinds)}")
    return {
        kind: tuple(_entry(path, kind, n, cls, entry) for n, entry in enumerate(data.get(kind, [])))
        for kind, cls in kinds.items()
    }


def _entry(path: Path | Traversable, kind: str, n: int, cls: type, entry: dict) -> object:
    where = f"{path}: [[{kind}]] number {n + 1}"
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: not a table")
    known = [f.name for f in fields(cls)]
    unknown = sorted(set(entry) - set(known))
    if unknown:
        raise ValueError(f"{where}: unknown key {', '.join(unknown)}; known: {', '.join(known)}")
    try:
        return cls(**{key: _frozen(value) for key, value in entry.items()})
    except TypeError as error:  # a required key is missing
        raise ValueError(f"{where}: {error}") from None


def _frozen(value: object) -> object:
    return tuple(_frozen(v) for v in value) if isinstance(value, list) else value
