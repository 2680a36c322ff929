"""The one door through which pipeline code reaches the cluster it runs on: an `Executor`.

The math layer needs little of a cluster: to materialise dask results (`compute`), to know how
many threads share its tasks (`cluster_threads`), to send a large array to every worker once so
that a graph can name it (`on_every_worker`, `shared_arguments`), to hand out the results of many
tasks as each finishes and cancel those left if the caller fails (`compute_as_completed`), and to
run independent pieces of work (offline neighbourhood fits, a protocol's random trials) through a
`Mapper`. The jobs layer installs the executor of its cluster with `use_executor`; without one,
`InProcess` runs everything on dask's current scheduler and this process's threads. Nothing here
knows what kind of cluster an executor drives.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import Any, Protocol

import dask
import numpy as np

Mapper = Callable[[Callable, tuple, list], list]
"""``mapper(fn, shared, items)`` returns ``[fn(*shared, *item) for item in items]``, in order."""


class Executor(Protocol):
    """What pipeline code asks of the cluster its dask work runs on."""

    def compute(self, collections: Sequence[Any]) -> tuple:
        """The dask ``collections`` computed, as `dask.compute` returns them."""

    def threads(self) -> int:
        """Threads the tasks share."""

    def on_every_worker(self, a: np.ndarray) -> Any:
        """``a`` held by every worker once, as something a graph may name in place of the array;
        None where the array is better embedded in the graph (no workers apart)."""

    def as_completed(
        self, tasks: Sequence[Any], priority: Sequence[int]
    ) -> AbstractContextManager[Iterator[Any]]:
        """The results of the dask ``tasks`` in the order they finish (`compute_as_completed`)."""

    def map(self, fn: Callable, shared: tuple, items: list) -> list:
        """The `Mapper` of this executor's cluster."""


def run_in_process(fn: Callable, shared: tuple, items: list) -> list:
    """The in-process `Mapper`: ``[fn(*shared, *item) for item in items]``."""
    return [fn(*shared, *item) for item in items]


class InProcess:
    """The `Executor` without a cluster: dask's current scheduler, this machine's cores, and
    ``window`` tasks at a time on threads for `compute_as_completed`."""

    def __init__(self, window: int = 8) -> None:
        self.window = window

    def compute(self, collections: Sequence[Any]) -> tuple:
        return dask.compute(*collections)

    def threads(self) -> int:
        return os.cpu_count() or 1

    def on_every_worker(self, a: np.ndarray) -> None:
        return None

    @contextmanager
    def as_completed(self, tasks: Sequence[Any], priority: Sequence[int]) -> Iterator[Iterator]:
        """The exit waits for the tasks running."""
        with ThreadPoolExecutor(self.window) as pool:
            yield _in_windows(tasks, pool, self.window)

    def map(self, fn: Callable, shared: tuple, items: list) -> list:
        return run_in_process(fn, shared, items)


def _in_windows(tasks: Sequence[Any], pool: ThreadPoolExecutor, window: int) -> Iterator[Any]:
    for start in range(0, len(tasks), window):
        yield from dask.compute(*tasks[start : start + window], scheduler="threads", pool=pool)


IN_PROCESS = InProcess()
installed_executor: ContextVar[Executor | None] = ContextVar("installed_executor", default=None)


@contextmanager
def use_executor(executor: Executor) -> Iterator[None]:
    """Run every pipeline computation in this context on ``executor``."""
    token = installed_executor.set(executor)
    try:
        yield
    finally:
        installed_executor.reset(token)


def current_executor() -> Executor:
    """The executor installed in this context (`use_executor`), else `IN_PROCESS`."""
    return installed_executor.get() or IN_PROCESS


def compute(*collections: Any) -> tuple:
    """Like `dask.compute`, on the current executor; returns numpy inputs untouched."""
    if not any(dask.is_dask_collection(c) for c in collections):
        return collections
    return tuple(current_executor().compute(collections))


def gather_rows(X: Any, index: np.ndarray) -> np.ndarray:
    """Rows ``index`` (sorted) of numpy or row-chunked dask `X`, as numpy in X's dtype.

    On dask input, one task per chunk holding any of the rows reads it and keeps only those
    rows, so only the selection reaches the client. Not ``X[index]`` nor per-chunk fancy
    indexing: dask's take over all chunks holds more on the workers, and per-chunk indexing
    makes several tasks a chunk.
    """
    import dask.array as da  # here: jobs reach the cluster through this module, most without it

    if not isinstance(X, da.Array):
        return np.asarray(X)[index]
    bounds = np.cumsum((0, *X.chunks[0]))
    cuts = np.searchsorted(index, bounds)  # index[cuts[b]:cuts[b + 1]] falls in chunk b
    blocks = [b for b in range(X.numblocks[0]) if cuts[b + 1] > cuts[b]]
    if not blocks:
        return np.empty((0, *X.shape[1:]), X.dtype)
    local = [index[cuts[b] : cuts[b + 1]] - bounds[b] for b in blocks]
    rows = X.blocks[blocks].map_blocks(
        _rows_of_block,
        # One shared key, sent once to each worker: embedded, every task would carry all the
        # indices (a 131,072-row SGD pool is 1 MB of them).
        dask.delayed(local, pure=True),
        chunks=(tuple(map(len, local)), *X.chunks[1:]),
        dtype=X.dtype,
        meta=X._meta,
    )
    return compute(rows)[0]


def _rows_of_block(block: np.ndarray, local: list, block_id: tuple = (0,)) -> np.ndarray:
    """The rows `local[b]` of block b (`map_blocks` passes its `block_id`)."""
    return block[local[block_id[0]]]


def cluster_threads() -> int:
    """Threads the current executor's tasks share (without a cluster, this machine's cores)."""
    return current_executor().threads()


# Numpy arrays above this size go to the workers once (`on_every_worker`) rather than into a
# graph, which the scheduler holds and forwards (it warns from 10 MB).
SCATTER_BYTES = 2**20


def shared_arguments(values: tuple) -> Any:
    """``values`` as one graph key that every task of a lazy map reads (a model's fitted
    arrays): numpy arrays above `SCATTER_BYTES` sent to every worker of the current executor
    once instead of embedded in the graph (a kNN's reference rows)."""
    executor = current_executor()
    sent = []
    for v in values:
        held = None
        if isinstance(v, np.ndarray) and v.nbytes > SCATTER_BYTES:
            held = executor.on_every_worker(v)
        sent.append(v if held is None else held)
    return dask.delayed(tuple(sent), pure=True)


def on_every_worker(a: np.ndarray) -> Any:
    """``a`` sent to every worker of the current executor once, as something a graph may name
    in place of the array; None without workers apart (`Executor.on_every_worker`)."""
    return current_executor().on_every_worker(a)


def compute_as_completed(
    tasks: Sequence[Any], *, priority: Sequence[int] | None = None
) -> AbstractContextManager[Iterator[Any]]:
    """The results of the dask ``tasks``, each as it is computed, in the order they finish:
    for a caller that handles each as it comes (its progress, running sums) and holds none.

    On a cluster every task is submitted on entry, at its ``priority`` (higher first; default
    all equal), so the caller's own work inside the block overlaps them. If the block raises (a
    failed task, Ctrl-C, SIGTERM), the tasks not yet started never start, and the exit returns
    only once no task is running: a running task may be writing a file the caller is about to
    remove. Without a cluster, a few tasks at a time run on threads in this process, and the
    exit waits for those running.
    """
    levels = [0] * len(tasks) if priority is None else list(priority)
    return current_executor().as_completed(tasks, levels)
