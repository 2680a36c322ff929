"""Paper 004's offline neighbourhood search fanned out over a Dask cluster.

`PredictedNeighbourhoodClassifier.fit` hands its blocks of training instances (each block fits
instances × K × S local classifiers) to a mapper. `scattering_mapper` runs each block as one
task: the arguments every block shares (the M training rows, their labels, the distance rows)
are scattered once with ``broadcast=True``, so each worker holds one copy for all its tasks
rather than receiving them with every task. Queries need no mapper: a dask array of queries is
scored block by block with `map_blocks` (the model's arrays are one shared key), and a numpy
query is answered in-process.
"""

from __future__ import annotations

from collections.abc import Callable

from distributed import Client


def scattering_mapper(client: Client) -> Callable[[Callable, tuple, list], list]:
    """A mapper running ``fn(*shared, *block)`` for each block as a task on `client`."""

    def run(fn: Callable, shared: tuple, blocks: list) -> list:
        shared_futures = client.scatter(list(shared), broadcast=True, hash=False)
        futures = [client.submit(fn, *shared_futures, *block, pure=False) for block in blocks]
        return client.gather(futures)

    return run
