"""Independent tasks fanned out over a Dask cluster, their shared arguments sent once.

Work made of independent pieces (paper 004's offline neighbourhood search, whose blocks each
fit instances × K × S local classifiers; a protocol's random trials) goes through a
`imgscale.pipeline.compute.Mapper`. `cluster_mapper` runs each piece as one task: the arguments
every piece shares (training rows, their labels) are scattered once with ``broadcast=True``, so
each worker holds one copy for all its tasks rather than receiving them with every task.
`stream_map` hands out a source's partitions a few at a time (an image ingest); `submit_detached`
hands the cluster one task that outlives the client submitting it (a detached run's driver).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from distributed import Client, as_completed, fire_and_forget

from imgscale.pipeline.compute import Mapper


def cluster_mapper(client: Client) -> Mapper:
    """A `Mapper` running ``fn(*shared, *item)`` for each item as a task on ``client``'s
    cluster. Not hashed: two runs with equal inputs must not share keys."""

    def run(fn: Callable, shared: tuple, items: list) -> list:
        # Nothing to scatter without shared arguments (distributed refuses an empty scatter).
        shared_futures = client.scatter(list(shared), broadcast=True, hash=False) if shared else []
        futures = [client.submit(fn, *shared_futures, *item, pure=False) for item in items]
        return client.gather(futures)

    return run


def stream_map(
    client: Client, fn: Callable, shared: tuple, items: Iterable, *, in_flight: int
) -> Iterator[Any]:
    """``fn(*shared, item)`` for each item as a task on ``client``'s cluster, yielding results as
    tasks finish (in any order), with at most ``in_flight`` tasks submitted at a time: the
    workers hold a bounded number of results, whatever the number of items. On any exception
    (a failed task, Ctrl-C, SIGTERM) the tasks still pending are cancelled."""
    shared_futures = client.scatter(list(shared), broadcast=True, hash=False)
    pending = iter(items)
    running = as_completed()
    live: set = set()

    def submit_next(count: int) -> None:
        for item in itertools.islice(pending, count):
            future = client.submit(fn, *shared_futures, item, pure=False)
            live.add(future)
            running.add(future)

    try:
        submit_next(in_flight)
        for future in running:
            result = future.result()
            live.discard(future)
            future.release()
            submit_next(1)
            yield result
    except BaseException:
        client.cancel(list(live))
        raise


def worker_threads(client: Client) -> int:
    """The threads of ``client``'s workers (at least 1)."""
    return max(1, sum(client.nthreads().values()))


def submit_detached(
    client: Client, fn: Callable, *args: Any, key: str, resource: str | None = None
) -> None:
    """``fn(*args)`` as one task under ``key`` that the scheduler keeps although no client holds
    its future (``fire_and_forget``): on a worker offering one unit of ``resource`` where any
    worker offers it, else on any worker."""
    workers = client.scheduler_info(n_workers=-1)["workers"].values()
    hosted = resource is not None and any((w.get("resources") or {}).get(resource) for w in workers)
    future = client.submit(
        fn, *args, key=key, pure=False, resources={resource: 1} if hosted else None
    )
    fire_and_forget(future)
