"""Results held on the workers that computed them, for work that makes many passes over them.

A vocabulary's fit (each PCA, k-means and EM pass over the local descriptors of a sample) and a
PQ codebook's training (every block of sub-spaces over a sample's signatures) read the same
per-partition results again and again: those stay on the workers as task results, and only each
pass's small per-chunk results reach the client.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from distributed import Client, Future, as_completed

from imgscale.jobs.cluster.fanout import worker_threads


@dataclass
class ClusterChunks:
    """Chunks held on ``client``'s workers, one task result each (``futures``): also the
    `DescriptorChunks` of ``pipeline.describe.vocabulary``."""

    client: Client
    futures: list[Future]

    @classmethod
    def compute(
        cls, client: Client, fn: Callable, shared: tuple, items: Sequence[Any]
    ) -> ClusterChunks:
        """``fn(*shared, item)`` for each item as a task whose result stays on its worker."""
        columns = [[value] * len(items) for value in shared]
        return cls(client, client.map(fn, *columns, items, pure=False))

    def map(self, kernel: Callable, *shared: object) -> list:
        """``[kernel(chunk, *shared) ...]`` as one task per chunk, where the chunk is; the shared
        arguments (centres, a GMM) are sent once to each worker."""
        sent = self.client.scatter(list(shared), broadcast=True, hash=False)
        return self.client.gather(
            [self.client.submit(kernel, chunk, *sent, pure=False) for chunk in self.futures]
        )

    def as_finished(self, kernel: Callable) -> Iterator[Any]:
        """``kernel(chunk)`` of every chunk (a small summary: its length, its counts), each as
        its chunk is computed."""
        summaries = self.client.map(kernel, self.futures, pure=False)
        return (future.result() for future in as_completed(summaries))

    def each_over_all(self, fn: Callable, items: Sequence[tuple]) -> Iterator[tuple[int, Any]]:
        """``(i, fn(chunks, *items[i]))`` for each item as a task reading every chunk (a list,
        in order) from the workers that hold it, in the order the tasks finish."""
        futures = [self.client.submit(fn, self.futures, *item, pure=False) for item in items]
        index = {future.key: i for i, future in enumerate(futures)}
        return ((index[future.key], future.result()) for future in as_completed(futures))

    def threads(self) -> int:
        """The worker threads of the cluster holding the chunks."""
        return worker_threads(self.client)

    def release(self) -> None:
        """Drop the chunks from the workers (and the tasks computing them)."""
        self.client.cancel(self.futures)
