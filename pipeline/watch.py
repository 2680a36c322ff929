"""Watching a long fit from outside it: a caller sees each event the fit reports in its context.

An SGD fit of thousands of iterations, or a vocabulary of a hundred EM passes, runs for an hour;
the jobs layer draws a progress line and tells the run ledger from these events. The watcher is a
context variable, so a fit run outside any watching context reports to nobody, and fits in other
threads are not confused with this one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Generic, TypeVar

Event = TypeVar("Event")


class Watch(Generic[Event]):
    """Events of one kind (a `Validation`, a `FitPass`), reported to the watcher set in the
    current context."""

    def __init__(self, name: str) -> None:
        self._watcher: ContextVar[Callable[[Event], None] | None] = ContextVar(name, default=None)

    @contextmanager
    def watching(self, watcher: Callable[[Event], None]) -> Iterator[None]:
        """Call ``watcher`` with every event reported in this context."""
        token = self._watcher.set(watcher)
        try:
            yield
        finally:
            self._watcher.reset(token)

    def report(self, event: Event) -> None:
        """Hand ``event`` to the watcher, if one is set."""
        watcher = self._watcher.get()
        if watcher is not None:
            watcher(event)
