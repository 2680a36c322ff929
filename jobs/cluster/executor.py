"""The `imgscale.pipeline.compute.Executor` of a distributed client: what pipeline code runs on
while a command holds a cluster (`connect` installs it).

Each computation shows a progress bar on stderr once it has taken longer than a couple of
seconds, raises `ClusterError` if the scheduler is lost, and is cancelled on the cluster when the
caller fails or is interrupted: a shared cluster must not go on computing what nobody will
gather. Large arrays go to every worker once; results of many tasks come back as each finishes.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import CancelledError
from typing import Any

import numpy as np
from distributed import Client, as_completed, progress, wait
from threadpoolctl import threadpool_limits

from imgscale.jobs.cluster.fanout import cluster_mapper

PROGRESS_AFTER_SECONDS = 2.0


class ClusterError(RuntimeError):
    """The cluster cannot be reached, was lost mid-job, or cannot see the job's files."""


class ClusterExecutor:
    """Pipeline work on ``client``'s cluster; ``quiet`` draws no progress bar. ``address``
    names the scheduler in errors (default: the client's)."""

    def __init__(self, client: Client, *, quiet: bool = True, address: str | None = None) -> None:
        self.client, self.quiet = client, quiet
        self.address = address or client.scheduler.address
        self.in_process = self.address.startswith("inproc://")

    def compute(self, collections: Sequence[Any]) -> tuple:
        if self.in_process:
            # The tasks already occupy every core: one BLAS thread each while they run (2-3x
            # faster Gram passes than BLAS threads on top of them), all of them again for the
            # solve after. (numpy's and SciPy's OpenBLAS; an OpenMP build, faiss's, sets threads
            # per thread.)
            with threadpool_limits(limits=1):
                return self._compute(collections)
        return self._compute(collections)

    def _compute(self, collections: Sequence[Any]) -> tuple:
        client = self.client
        if client.status != "running":
            raise lost(self.address)
        futures = client.compute(list(collections))
        try:
            # A redrawn bar is for people watching a terminal; in a log file it is thousands of
            # lines.
            if not self.quiet and sys.stderr.isatty():
                try:
                    wait(futures, timeout=PROGRESS_AFTER_SECONDS)
                except TimeoutError:
                    # distributed draws its text bar on stdout; stdout is reserved for --json.
                    with contextlib.redirect_stdout(sys.stderr):
                        progress(futures)
                        print()
            return tuple(client.gather(futures))
        except BaseException as exc:
            if isinstance(exc, CancelledError) and client.status != "running":
                # The client cancelled every future the moment it lost the scheduler.
                raise lost(self.address) from exc
            # Ctrl-C, SIGTERM (jobs/runs.py) or a failed task: a shared cluster must not go on
            # computing what nobody will gather.
            client.cancel(futures)
            raise

    def threads(self) -> int:
        return sum(self.client.nthreads().values())

    def on_every_worker(self, a: np.ndarray) -> Any:
        """Under a fresh key: with hash=True a second pass re-scattering the same array races
        the release of the first pass's future, whose tasks then fail with "lost dependencies".
        On every worker: a copy on one worker only would draw every task reading it there."""
        return self.client.scatter(a, hash=False, broadcast=True)

    @contextlib.contextmanager
    def as_completed(self, tasks: Sequence[Any], priority: Sequence[int]) -> Iterator[Iterator]:
        """Every task submitted on entry, higher ``priority`` first; if the block raises, the
        tasks not started never start, and the exit waits until none is running."""
        client = self.client
        futures = []
        for level in sorted(set(priority), reverse=True):
            group = [task for task, at in zip(tasks, priority, strict=True) if at == level]
            futures += client.compute(group, priority=level)
        try:
            yield (future.result() for future in as_completed(futures))
        except BaseException:
            client.cancel(futures)
            _wait_until_released(client, {future.key for future in futures})
            raise

    def map(self, fn: Callable, shared: tuple, items: list) -> list:
        return cluster_mapper(self.client)(fn, shared, items)


def lost(address: str) -> ClusterError:
    return ClusterError(f"lost the scheduler at {address} mid-job; nothing was written")


def _wait_until_released(client: Client, keys: set, poll_seconds: float = 0.1) -> None:
    """Return once no worker holds any of ``keys``: a cancelled task that was already running
    stays known to its worker until it has finished."""
    while True:
        held = client.run(_task_keys)
        if not any(keys.intersection(worker_keys) for worker_keys in held.values()):
            return
        time.sleep(poll_seconds)


def _task_keys(dask_worker: Any) -> list:
    return list(dask_worker.state.tasks)
