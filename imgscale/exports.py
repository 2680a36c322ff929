"""Lazy exports for a package ``__init__`` (PEP 562), shared by the layers that use them.

A package lists each name it exports beside the module defining it; the module is imported when
the name is first used, so a command pays only for the modules it touches (``imgscale --help``
imports neither zarr nor scikit-learn). A package may declare its exports as explicit imports
under ``if TYPE_CHECKING:``, which static readers follow and which `declared_exports` reads
back, so the names are written once.
"""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def lazy_exports(
    package: str, exports: dict[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``, whose ``exports`` map each name to the
    submodule (relative to ``package``) that defines it."""

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{exports[name]}"), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *exports})

    return __getattr__, __dir__


def declared_exports(package: str, init_file: str) -> dict[str, str]:
    """Each name the ``if TYPE_CHECKING:`` block of ``package``'s ``__init__`` (at
    ``init_file``) imports from one of its submodules, mapped to that submodule (relative to
    ``package``), for `lazy_exports`."""
    tree = ast.parse(Path(init_file).read_text(encoding="utf-8"), init_file)
    exports = {}
    for node in tree.body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for statement in node.body:
                if not isinstance(statement, ast.ImportFrom) or statement.module is None:
                    continue
                prefix = f"{package}."
                if statement.level or not statement.module.startswith(prefix):
                    raise ImportError(
                        f"{init_file}: export from {statement.module!r}; expected an absolute "
                        f"import from a submodule of {package}"
                    )
                for alias in statement.names:
                    exports[alias.asname or alias.name] = statement.module[len(prefix) :]
    return exports
