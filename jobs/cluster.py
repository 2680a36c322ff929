"""Connect to a Dask cluster, or start a LocalCluster sized to this machine for one command."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator

import psutil
from distributed import Client, LocalCluster, progress, wait

from imgscale.pipeline._compute import use_compute

SCHEDULER_ENV = "DASK_SCHEDULER_ADDRESS"
PROGRESS_AFTER_SECONDS = 2.0


@contextlib.contextmanager
def connect(
    scheduler: str | None = None, *, quiet: bool = False, n_workers: int | None = None
) -> Iterator[Client]:
    """Yield a client for ``scheduler`` (or ``$DASK_SCHEDULER_ADDRESS``), else a new LocalCluster
    of ``n_workers`` single-threaded workers (default: one per core).

    While the client is open, every ``pipeline`` computation runs on it and shows a progress bar
    on stderr once it has taken longer than a couple of seconds.
    """
    address = scheduler or os.environ.get(SCHEDULER_ENV)
    with contextlib.ExitStack() as stack:
        if address:
            client = stack.enter_context(Client(address, timeout="30s"))
        else:
            cluster = stack.enter_context(_local_cluster(n_workers))
            client = stack.enter_context(Client(cluster))
        if not quiet:
            workers = len(client.scheduler_info(n_workers=-1)["workers"])
            origin = "connected to" if address else "started a LocalCluster at"
            print(
                f"dask: {origin} {client.scheduler.address}, {workers} workers, "
                f"dashboard {client.dashboard_link}",
                file=sys.stderr,
            )
        stack.enter_context(use_compute(lambda *c: _compute_with_progress(client, c, quiet)))
        yield client


def _local_cluster(n_workers: int | None) -> LocalCluster:
    """Single-threaded worker processes, one per core by default: tasks are BLAS or IO bound."""
    n_workers = n_workers or psutil.cpu_count(logical=False) or os.cpu_count() or 1
    memory = psutil.virtual_memory().total
    return LocalCluster(
        n_workers=n_workers,
        threads_per_worker=1,
        memory_limit=int(0.8 * memory / n_workers),
        dashboard_address=":0",
        silence_logs=logging.ERROR,
    )


def _compute_with_progress(client: Client, collections: tuple, quiet: bool) -> tuple:
    futures = client.compute(list(collections))
    try:
        # A redrawn bar is for people watching a terminal; in a log file it is thousands of lines.
        if not quiet and sys.stderr.isatty():
            try:
                wait(futures, timeout=PROGRESS_AFTER_SECONDS)
            except TimeoutError:
                # distributed draws its text bar on stdout; stdout is reserved for --json output.
                with contextlib.redirect_stdout(sys.stderr):
                    progress(futures)
                    print()
        return tuple(client.gather(futures))
    except BaseException:
        # Ctrl-C, SIGTERM (jobs/runs.py) or a failed task: a shared cluster must not go on
        # computing what nobody will gather.
        client.cancel(futures)
        raise
