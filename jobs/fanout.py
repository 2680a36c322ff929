"""Independent tasks fanned out over a Dask cluster, their shared arguments sent once.

Work made of independent pieces (paper 004's offline neighbourhood search, whose blocks each
fit instances × K × S local classifiers; a protocol's random trials) goes through a
`imgscale.pipeline.compute.Mapper`. `cluster_mapper` runs each piece as one task: the arguments
every piece shares (training rows, their labels) are scattered once with ``broadcast=True``, so
each worker holds one copy for all its tasks rather than receiving them with every task.
"""

from __future__ import annotations

from collections.abc import Callable

from distributed import Client

from imgscale.pipeline.compute import Mapper


def cluster_mapper(client: Client) -> Mapper:
    """A `Mapper` running ``fn(*shared, *item)`` for each item as a task on ``client``'s
    cluster. Not hashed: two runs with equal inputs must not share keys."""

    def run(fn: Callable, shared: tuple, items: list) -> list:
        shared_futures = client.scatter(list(shared), broadcast=True, hash=False)
        futures = [client.submit(fn, *shared_futures, *item, pure=False) for item in items]
        return client.gather(futures)

    return run
