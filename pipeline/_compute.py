"""The one door through which pipeline code materialises dask results.

The jobs layer installs a hook (e.g. one that shows progress on a distributed client) with
`use_compute`; without a hook, `dask.compute` runs on the current scheduler.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import dask

compute_hook: ContextVar[Callable[..., tuple] | None] = ContextVar("compute_hook", default=None)


@contextmanager
def use_compute(fn: Callable[..., tuple]) -> Iterator[None]:
    """Route every `compute` call in this context through ``fn(*collections) -> tuple``."""
    token = compute_hook.set(fn)
    try:
        yield
    finally:
        compute_hook.reset(token)


def compute(*collections: Any) -> tuple:
    """Like `dask.compute`, through the hook; returns numpy inputs untouched (no hook call)."""
    if not any(dask.is_dask_collection(c) for c in collections):
        return collections
    hook = compute_hook.get()
    if hook is None:
        return dask.compute(*collections)
    return tuple(hook(*collections))
