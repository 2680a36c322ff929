"""The one door through which pipeline code reaches the cluster: it materialises dask results,
hands out independent tasks, and asks the cluster for its threads or to hold an array.

The jobs layer installs a hook (e.g. one that shows progress on a distributed client) with
`use_compute`; without a hook, `dask.compute` runs on the current scheduler. Independent tasks
(offline neighbourhood fits, a protocol's random trials) go through a `Mapper`: `run_in_process`
runs them here, the jobs layer's ``cluster_mapper`` as tasks on a Dask cluster. `current_client`
is the distributed client, if any, that these run on; `cluster_threads` and `on_every_worker`
ask it, and fall back to this process without one. `compute_as_completed` hands out the results
of many tasks as each finishes (cancelled, and waited for, if the caller fails).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import dask
import numpy as np

Mapper = Callable[[Callable, tuple, list], list]
"""``mapper(fn, shared, items)`` returns ``[fn(*shared, *item) for item in items]``, in order."""

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


def run_in_process(fn: Callable, shared: tuple, items: list) -> list:
    """The in-process `Mapper`: ``[fn(*shared, *item) for item in items]``."""
    return [fn(*shared, *item) for item in items]


def current_client() -> Any:
    """The distributed client dask work runs on in this context, or None (local schedulers)."""
    try:
        from distributed import default_client

        return default_client()
    except (ImportError, ValueError):
        return None


def cluster_threads() -> int:
    """Threads of the current distributed client's workers (without one, this machine's cores)."""
    client = current_client()
    return sum(client.nthreads().values()) if client is not None else os.cpu_count() or 1


# Numpy arrays above this size go to the workers once (`on_every_worker`) rather than into a
# graph, which the scheduler holds and forwards (distributed warns from 10 MB).
SCATTER_BYTES = 2**20


def shared_arguments(values: tuple) -> Any:
    """``values`` as one graph key that every task of a lazy map reads (a model's fitted
    arrays): numpy arrays above `SCATTER_BYTES` sent to every worker of the current client once
    instead of embedded in the graph (a kNN's reference rows)."""
    if current_client() is not None:
        values = tuple(
            on_every_worker(v) if isinstance(v, np.ndarray) and v.nbytes > SCATTER_BYTES else v
            for v in values
        )
    return dask.delayed(values, pure=True)


def on_every_worker(a: np.ndarray) -> Any:
    """``a`` sent to every worker of the current client once, as a future a graph may name in
    place of the array; None without a distributed client.

    Under a fresh key: with hash=True a second pass re-scattering the same array races the
    release of the first pass's future, whose tasks then fail with "lost dependencies". On every
    worker: a copy on one worker only would draw every task reading it to that worker.
    """
    client = current_client()
    return None if client is None else client.scatter(a, hash=False, broadcast=True)


@contextmanager
def compute_as_completed(
    tasks: Sequence[Any], *, priority: Sequence[int] | None = None, window: int = 8
) -> Iterator[Iterator[Any]]:
    """The results of the dask ``tasks``, each as it is computed, in the order they finish:
    for a caller that handles each as it comes (its progress, running sums) and holds none.

    On the current distributed client (`current_client`) every task is submitted on entry, at
    its ``priority`` (higher first; default all equal), so the caller's own work inside the
    block overlaps them. If the block raises (a failed task, Ctrl-C, SIGTERM), the tasks not yet
    started never start, and the exit returns only once no task is running: a running task may
    be writing a file the caller is about to remove. Without a client, ``window`` tasks at a
    time run on threads in this process, and the exit waits for those running.
    """
    client = current_client()
    if client is None:
        with ThreadPoolExecutor(window) as pool:
            yield _in_windows(tasks, pool, window)
        return
    from distributed import as_completed

    levels = [0] * len(tasks) if priority is None else list(priority)
    futures = []
    for level in sorted(set(levels), reverse=True):
        group = [
            task for task, task_level in zip(tasks, levels, strict=True) if task_level == level
        ]
        futures += client.compute(group, priority=level)
    try:
        yield (future.result() for future in as_completed(futures))
    except BaseException:
        client.cancel(futures)
        _wait_until_released(client, {future.key for future in futures})
        raise


def _in_windows(tasks: Sequence[Any], pool: ThreadPoolExecutor, window: int) -> Iterator[Any]:
    for start in range(0, len(tasks), window):
        yield from dask.compute(*tasks[start : start + window], scheduler="threads", pool=pool)


def _wait_until_released(client: Any, keys: set, poll_seconds: float = 0.1) -> None:
    """Return once no worker holds any of ``keys``: a cancelled task that was already running
    stays known to its worker until it has finished."""
    while True:
        held = client.run(_task_keys)
        if not any(keys.intersection(worker_keys) for worker_keys in held.values()):
            return
        time.sleep(poll_seconds)


def _task_keys(dask_worker: Any) -> list:
    return list(dask_worker.state.tasks)
