"""Row reductions shared by every estimator whose fit is a sum over rows.

Per-chunk numpy kernels (`chunk_row_stats`) are separate from the wiring (`reduce_rows`), which
applies any kernel to aligned row blocks and tree-sums the results: numpy input is one kernel call,
a row-chunked dask array is one task per block plus a tree of adds, so no n-sized array and no
gather of all blocks ever reaches one place.
"""

from __future__ import annotations

import collections
import functools
import inspect
import itertools
import operator
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import dask
import dask.array as da
import numba
import numpy as np
from dask._task_spec import Alias, Task, convert_legacy_graph
from dask.delayed import Delayed
from toolz import partition_all

from pipeline._compute import compute
from pipeline.gram import add_gram

# numpy arrays larger than this (e.g. labels) are scattered to the workers, not put in the graph.
_SCATTER_BYTES = 2**20
# RowStats partials larger than this run one chain per thread instead of two (`stats_chains`).
_LARGE_PARTIAL_BYTES = 64 * 2**20


@dataclass
class RowStats:
    """Sufficient statistics of a set of rows, additive over disjoint sets of rows.

    `feature_sum` counts all rows (labelled or not: the centering mean of paper 000 §3.3);
    `gram`, `class_sums` and `class_counts` count labelled rows only. `gram` is uncentred and is
    None when not requested.
    """

    n_rows: int
    feature_sum: np.ndarray
    class_sums: np.ndarray
    class_counts: np.ndarray
    gram: np.ndarray | None = None

    @property
    def n_labelled(self) -> int:
        return int(self.class_counts.sum())

    @property
    def labelled_sum(self) -> np.ndarray:
        return self.class_sums.sum(axis=0)

    @classmethod
    def zeros(cls, n_features: int, n_classes: int, *, gram: bool) -> RowStats:
        return cls(
            n_rows=0,
            feature_sum=np.zeros(n_features),
            class_sums=np.zeros((n_classes, n_features)),
            class_counts=np.zeros(n_classes, dtype=np.int64),
            gram=np.zeros((n_features, n_features)) if gram else None,
        )

    def with_n_classes(self, n_classes: int) -> RowStats:
        """Append empty classes at the end (new classes never renumber existing ones)."""
        extra = n_classes - len(self.class_counts)
        if extra < 0:
            raise ValueError(f"cannot shrink {len(self.class_counts)} classes to {n_classes}")
        if extra == 0:
            return self
        return RowStats(
            n_rows=self.n_rows,
            feature_sum=self.feature_sum,
            class_sums=np.vstack([self.class_sums, np.zeros((extra, self.class_sums.shape[1]))]),
            class_counts=np.concatenate([self.class_counts, np.zeros(extra, dtype=np.int64)]),
            gram=self.gram,
        )

    def __add__(self, other: RowStats) -> RowStats:
        if (self.gram is None) != (other.gram is None):
            raise ValueError("cannot add RowStats with and without a Gram matrix")
        n_classes = max(len(self.class_counts), len(other.class_counts))
        a, b = self.with_n_classes(n_classes), other.with_n_classes(n_classes)
        return RowStats(
            n_rows=a.n_rows + b.n_rows,
            feature_sum=a.feature_sum + b.feature_sum,
            class_sums=a.class_sums + b.class_sums,
            class_counts=a.class_counts + b.class_counts,
            gram=None if a.gram is None else a.gram + b.gram,
        )


@numba.njit(cache=True, nogil=True)
def _accumulate_sums(X, y_index, feature_sum, class_sums, class_counts):  # pragma: no cover
    """Row sums in float64 over all rows and per class over labelled rows, in one sweep of X.

    A compiled loop reads each float32 row once (~4–6M rows/s at D = 512 on one core); the
    scipy one-hot product it replaced needed a float64 copy first and ran at ~0.7M rows/s.
    """
    for i in range(X.shape[0]):
        c = y_index[i]
        if c >= 0:
            class_counts[c] += 1
            for j in range(X.shape[1]):
                v = np.float64(X[i, j])
                feature_sum[j] += v
                class_sums[c, j] += v
        else:
            for j in range(X.shape[1]):
                feature_sum[j] += X[i, j]


def check_class_index(y_index: np.ndarray, n: int, n_classes: int, row_start: int) -> None:
    """Raise unless `y_index` holds one class index in [-1, n_classes) for each of a chunk's n
    rows; the message names the chunk's rows (from `row_start`)."""
    if y_index.shape != (n,):
        raise ValueError(f"rows {row_start}..{row_start + n}: {y_index.shape} labels for {n} rows")
    if n and (y_index.min() < -1 or y_index.max() >= n_classes):
        bad = y_index[(y_index < -1) | (y_index >= n_classes)][0]
        raise ValueError(
            f"rows {row_start}..{row_start + n}: class index {bad} outside [-1, {n_classes})"
        )


def chunk_row_stats(
    X: np.ndarray,
    y_index: np.ndarray,
    n_classes: int,
    gram: bool,
    gram_precision: str = "float64",
    row_start: int = 0,
    into: RowStats | None = None,
) -> RowStats:
    """RowStats of one chunk, added in place to `into` if given (`reduce_rows` runs); rows with
    ``y_index == -1`` count only towards `feature_sum`. The Gram's products are in
    `gram_precision` (`pipeline.gram.add_gram`)."""
    n, n_features = X.shape
    y_index = np.asarray(y_index, dtype=np.int64)
    check_class_index(y_index, n, n_classes, row_start)
    stats = RowStats.zeros(n_features, n_classes, gram=gram) if into is None else into
    if stats.class_sums.shape != (n_classes, n_features) or (stats.gram is None) == gram:
        raise ValueError("chunk_row_stats: `into` holds statistics of another shape")
    stats.n_rows += n
    X = np.ascontiguousarray(X)
    _accumulate_sums(X, y_index, stats.feature_sum, stats.class_sums, stats.class_counts)
    # NaN and inf propagate into the sum, so one check of D values guards the whole chunk.
    if not np.isfinite(stats.feature_sum).all():
        bad_rows = np.flatnonzero(~np.isfinite(X).all(axis=1)) + row_start
        raise ValueError(f"non-finite feature values in rows {bad_rows[:10].tolist()}")
    if gram:
        labelled = y_index >= 0
        add_gram(stats.gram, X if labelled.all() else X[labelled], gram_precision)
    return stats


def _sum(*parts: Any) -> Any:
    return functools.reduce(operator.add, parts)


def _tree_sum(parts: list, split_every: int) -> Any:
    while len(parts) > 1:
        parts = [
            dask.delayed(_sum, pure=True)(*group) if len(group) > 1 else group[0]
            for group in partition_all(split_every, parts)
        ]
    return parts[0]


def _aligned_blocks(arrays: Sequence[Any]) -> tuple[list[list], list[int]]:
    """Delayed row blocks of every array, on the row chunks of the first dask array."""
    row_chunks = next(a for a in arrays if isinstance(a, da.Array)).chunks[0]
    bounds = np.cumsum([0, *row_chunks]).tolist()
    client = _client()
    blocks = []
    for a in arrays:
        full_width = tuple((s,) for s in a.shape[1:])
        if isinstance(a, da.Array):
            a = a.rechunk((row_chunks, *full_width))
        elif client is not None and np.asarray(a).nbytes > _SCATTER_BYTES:
            take = dask.delayed(operator.getitem, pure=True)
            future = _on_workers(np.asarray(a), client)
            blocks.append([take(future, slice(*b)) for b in itertools.pairwise(bounds)])
            continue
        else:
            a = da.from_array(np.asarray(a), chunks=(row_chunks, *full_width))
        blocks.append(list(a.to_delayed().ravel()))
    return blocks, bounds[:-1]


def _shared(arg: Any, client: Any) -> Any:
    """A kernel argument as every task sees it: numpy arrays once in the graph, or on the workers
    when large; anything else as is."""
    if not isinstance(arg, np.ndarray):
        return arg
    if client is not None and arg.nbytes > _SCATTER_BYTES:
        return _on_workers(arg, client)
    return dask.delayed(arg, pure=True)


def _on_workers(a: np.ndarray, client: Any) -> Any:
    """`a` sent to every worker once instead of embedded in the graph (1M int64 labels are 8 MB
    of graph the scheduler has to hold and forward; distributed warns from 10 MB).

    Under a fresh key: with hash=True a second pass re-scattering the same array races the
    release of the first pass's future, whose tasks then fail with "lost dependencies". On every
    worker: a copy on one worker only would draw every task reading it (and every chain's partial)
    to that worker.
    """
    return client.scatter(a, hash=False, broadcast=True)


def reduce_rows(
    kernel: Callable[..., Any],
    arrays: Sequence[Any],
    *args: Any,
    split_every: int = 8,
    chains: int | None = None,
) -> Any:
    """Sum of ``kernel(*row_blocks, *args, row_start=r)`` over aligned row blocks of `arrays`.

    All numpy: returns the value of one kernel call. Any dask: returns a lazy `Delayed`; materialise
    it with `pipeline._compute.compute`. Kernel results must support ``+``.

    The blocks are split into `chains` runs of consecutive blocks. Within a run each block's task
    extends the run's partial result, so there are `chains` partials, not one per block, and they
    are tree-summed (`split_every` per add). A kernel with an ``into`` parameter accumulates into
    the previous partial in place (``into`` is None for a run's first block): at 10,000 classes a
    fresh 41 MB partial per block plus its add cost 10× the kernel itself; by default such kernels
    run two chains per thread of the current cluster. Other kernels default to one run per block
    (independent tasks, no step waiting for the previous one) and their partials are added with
    ``+``.

    Each block's own task (a store read, an embedding) is inlined into the step that consumes it:
    one task per block reads, transforms and reduces it, so a block costs one scheduler round
    trip and is never held in worker memory between two tasks.
    """
    n_rows = {len(a) for a in arrays}
    if len(n_rows) != 1:
        raise ValueError(f"arrays have different row counts: {sorted(n_rows)}")
    if not any(isinstance(a, da.Array) for a in arrays):
        return kernel(*arrays, *args, row_start=0)
    blocks, starts = _aligned_blocks(arrays)
    client = _client()
    shared = [_shared(a, client) for a in args]
    accumulates = "into" in inspect.signature(kernel).parameters
    # Fresh keys for every call: an identical earlier pass whose result the cluster has not yet
    # released would otherwise be returned without reading anything (timed repeats read 50 GB/s).
    step = dask.delayed(_extend, pure=False)
    if chains is None:
        chains = _default_chains() if accumulates else len(starts)
    runs = np.array_split(np.arange(len(starts)), min(len(starts), chains))
    partials, steps = [], set()
    for run in runs:
        partial = None
        for i in run.tolist():
            row_blocks = [b[i] for b in blocks]
            partial = step(kernel, accumulates, partial, row_blocks, shared, starts[i])
            steps.add(partial.key)
        partials.append(partial)
    total = _tree_sum(partials, split_every)
    return _inline_blocks(total, steps)


def _extend(
    kernel: Callable[..., Any],
    accumulates: bool,
    partial: Any,
    row_blocks: list,
    args: list,
    row_start: int,
) -> Any:
    """`partial` extended by one block: in place when the kernel accumulates."""
    if accumulates:
        return kernel(*row_blocks, *args, row_start=row_start, into=partial)
    result = kernel(*row_blocks, *args, row_start=row_start)
    return result if partial is None else partial + result


def _inline_blocks(total: Delayed, steps: set) -> Delayed:
    """`total` with the tasks that only a step needs (its block's read, slice, embedding, …)
    moved into that step, recursively, so one task reads, transforms and reduces a block.

    Data already in cluster memory (persisted arrays, scattered inputs) is not in the graph and
    stays a reference; a task two others need is left alone rather than computed twice; a step's
    previous partial (another step) is never absorbed.
    """
    graph = convert_legacy_graph(dict(total.__dask_graph__()))
    consumers = collections.Counter(k for node in graph.values() for k in node.dependencies)
    for key in steps:
        graph[key] = _absorb(graph[key], graph, consumers, steps)
    return Delayed(total.key, graph)


def _absorb(node: Task, graph: dict, consumers: collections.Counter, keep: set) -> Task:
    """`node` with each dependency only it needs (outside `keep`) taken out of `graph` and
    nested in it, recursively. Module-level, not a closure: a recursive closure is a reference
    cycle that would hold the graph (and its scattered futures) until the next garbage collection.
    """
    inline = {}
    for key in node.dependencies - keep:
        chain, dependency = [key], graph.get(key)
        # dask array optimisation names a block's fused task by an alias of the block's key.
        while isinstance(dependency, Alias) and consumers[dependency.target] == 1:
            chain.append(dependency.target)
            dependency = graph.get(dependency.target)
        if isinstance(dependency, Task) and consumers[key] == 1:
            for link in chain:
                del graph[link]
            inline[key] = _absorb(dependency, graph, consumers, keep)
    return node.substitute(inline) if inline else node


def _client() -> Any:
    """The current distributed client, or None (local schedulers)."""
    try:
        from distributed import default_client

        return default_client()
    except (ImportError, ValueError):
        return None


def _threads() -> int:
    """Threads of the current distributed client (else local cores)."""
    client = _client()
    return sum(client.nthreads().values()) if client is not None else os.cpu_count() or 1


def _default_chains() -> int:
    """Two runs per thread: while one run's step waits for its scheduler round trip, the other
    run's step keeps the thread busy."""
    return 2 * _threads()


def stats_chains(n_features: int, n_classes: int, *, gram: bool) -> int:
    """`reduce_rows` chains for RowStats partials of this shape: the default two per thread,
    one when a partial (float64 class sums, Gram, feature sum) passes `_LARGE_PARTIAL_BYTES`,
    since each is zeroed, moved and added. At 10,000 classes and D = 4096 (328 MB partials) one
    per thread took class means from codes from 6.1 to 4.1 s and from floats from 5.4 to 4.2 s
    (200,000 rows, bench pq); at D = 512 (41 MB) the difference was within noise."""
    partial_bytes = 8 * n_features * (n_classes + (n_features if gram else 0) + 1)
    return _threads() if partial_bytes > _LARGE_PARTIAL_BYTES else _default_chains()


def row_stats(
    X: Any,
    y_index: Any,
    n_classes: int,
    *,
    gram: bool,
    gram_precision: str = "float64",
    chains: int | None = None,
) -> RowStats:
    """RowStats of numpy or row-chunked dask `X` in one pass; `y_index` in [-1, n_classes).

    `chains` is `reduce_rows`' (default: `stats_chains`, by the size of the partials).
    """
    if chains is None:
        chains = stats_chains(X.shape[1], n_classes, gram=gram)
    partial = reduce_rows(
        chunk_row_stats, [X, y_index], n_classes, gram, gram_precision, chains=chains
    )
    return compute(partial)[0]
