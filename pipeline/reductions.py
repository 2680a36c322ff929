"""Row reductions shared by every estimator whose fit is a sum over rows.

Per-chunk numpy kernels (`chunk_row_stats`) are separate from the wiring (`reduce_rows`), which
applies any kernel to aligned row blocks and tree-sums the results: numpy input is one kernel call,
a row-chunked dask array is one task per block plus a tree of adds, so no n-sized array and no
gather of all blocks ever reaches one place.
"""

from __future__ import annotations

import collections
import functools
import itertools
import operator
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import dask
import dask.array as da
import numba
import numpy as np
from dask._task_spec import convert_legacy_graph  # dask.task_spec does not offer it (2026.8)
from dask.delayed import Delayed
from dask.task_spec import Alias, DataNode, List, Task, TaskRef
from toolz import partition_all

from imgscale.pipeline.compute import SCATTER_BYTES, cluster_threads, compute, on_every_worker
from imgscale.pipeline.gram import add_gram

# numpy arrays larger than this (e.g. labels) are scattered to the workers, not put in the graph:
# the threshold of `compute.shared_arguments`.
_SCATTER_BYTES = SCATTER_BYTES
# RowStats partials larger than this run one chain per thread instead of two (`stats_chains`).
_LARGE_PARTIAL_BYTES = 64 * 2**20
_TASKS_PER_THREAD = 8


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

    def __sub__(self, other: RowStats) -> RowStats:
        """The statistics of these rows without ``other``'s, a subset of them (rows removed
        from a store: `imgscale update`)."""
        return self + RowStats(
            n_rows=-other.n_rows,
            feature_sum=-other.feature_sum,
            class_sums=-other.class_sums,
            class_counts=-other.class_counts,
            gram=None if other.gram is None else -other.gram,
        )


@numba.njit(cache=True, nogil=True)
def _accumulate_sums(X, y_index, feature_sum, class_sums, class_counts):  # pragma: no cover
    """Row sums in float64 over all rows and per class over labelled rows, in one sweep of X.

    A compiled loop reads each float32 row once and adds it in float64 where it belongs, with
    no float64 copy of the chunk and no one-hot matrix.
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


KernelFn = TypeVar("KernelFn", bound=Callable[..., Any])


def accumulating(kernel: KernelFn) -> KernelFn:
    """Declare that `kernel` extends a run's partial result in place.

    `reduce_rows` then calls it as ``kernel(*row_blocks, *args, row_start=r, into=partial)``
    (``into`` is None on a run's first block) and keeps what it returns as the run's partial.
    Other kernels are called without ``into`` and their results are added with ``+``.
    """
    kernel.accumulates_into = True
    return kernel


@accumulating
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
    chunk_sum = np.zeros(n_features)
    _accumulate_sums(X, y_index, chunk_sum, stats.class_sums, stats.class_counts)
    # NaN and inf propagate into the sum, so one check of D values guards the whole chunk.
    if not np.isfinite(chunk_sum).all():
        bad_rows = np.flatnonzero(~np.isfinite(X).all(axis=1)) + row_start
        raise ValueError(f"non-finite feature values in rows {bad_rows[:10].tolist()}")
    stats.feature_sum += chunk_sum
    if gram:
        labelled = y_index >= 0
        if labelled.all():
            add_gram(stats.gram, X, gram_precision, row_sum=chunk_sum)
        else:
            add_gram(stats.gram, X[labelled], gram_precision)
    return stats


def _sum(*parts: Any) -> Any:
    return functools.reduce(operator.add, parts)


def reduce_rows(
    kernel: Callable[..., Any],
    arrays: Sequence[Any],
    *args: Any,
    split_every: int = 8,
    chains: int | None = None,
    blocks_per_task: int | str = 1,
) -> Any:
    """Sum of ``kernel(*row_blocks, *args, row_start=r)`` over aligned row blocks of `arrays`.

    All numpy: returns the value of one kernel call. Any dask: returns a lazy `Delayed`; materialise
    it with `pipeline.compute.compute`. Kernel results must support ``+``.

    The blocks are dealt into `chains` interleaved runs (run c takes blocks c, c + chains, …), so
    runs get alike blocks even where a split's rows bunch in part of the store. Within a run each
    block's step extends the run's partial result, so there are `chains` partials, not one per
    block, and they are tree-summed (`split_every` per add). A kernel declared `accumulating`
    extends the previous partial in place (``into`` is None for a run's first block): with many
    classes a fresh partial per block plus its add would cost far more than the kernel itself; by
    default such kernels run two chains per thread of the current cluster. Other kernels default
    to one run per task (no task waiting for another) and their partials are added with ``+``.

    One task does `blocks_per_task` successive steps of a run, each with its block's own tasks (a
    store read, an embedding) inlined, so a block is read, transformed and reduced in one go and
    never held in worker memory between tasks. ``"auto"`` groups as many blocks as leave every
    thread `_TASKS_PER_THREAD` tasks: for light kernels (class sums, histograms, a read-only
    pass), where a block takes little time next to a task's scheduler round trip and the client
    and scheduler CPU it costs on the cores the workers use. Heavy kernels (a Gram of embedded
    rows) keep one block a task: larger tasks only coarsen the end of the pass.
    """
    n_rows = {len(a) for a in arrays}
    if len(n_rows) != 1:
        raise ValueError(f"arrays have different row counts: {sorted(n_rows)}")
    if blocks_per_task != "auto" and not (isinstance(blocks_per_task, int) and blocks_per_task > 0):
        raise ValueError(f'blocks_per_task must be a positive int or "auto": {blocks_per_task!r}')
    if not any(isinstance(a, da.Array) for a in arrays):
        return kernel(*arrays, *args, row_start=0)
    graph, blocks, starts = _block_graph(arrays)
    shared = List(*(_shared(a, graph) for a in args))
    accumulates = getattr(kernel, "accumulates_into", False)
    if blocks_per_task == "auto":
        blocks_per_task = max(1, len(starts) // (_TASKS_PER_THREAD * _threads()))
    if chains is None:
        chains = _default_chains() if accumulates else -(-len(starts) // blocks_per_task)
    chains = min(len(starts), chains)
    runs = [np.arange(c, len(starts), chains) for c in range(chains)]
    # Fresh keys for every call: an identical earlier pass whose result the cluster has not yet
    # released would otherwise be returned without reading anything (timed repeats read 50 GB/s).
    name = f"reduce-{getattr(kernel, '__name__', 'kernel')}-{uuid.uuid4().hex}"
    partials, tasks = [], set()
    for run in runs:
        partial = None
        for n, i in enumerate(run.tolist(), 1):
            key = (name, i)
            graph[key] = Task(
                key, _extend, kernel, accumulates, partial, blocks[i], shared, starts[i]
            )
            partial = TaskRef(key)
            if n % blocks_per_task == 0 or n == len(run):
                tasks.add(key)
        partials.append(partial)
    total = _tree_sum(graph, partials, split_every, name)
    consumers = collections.Counter(k for node in graph.values() for k in node.dependencies)
    for key in tasks:
        graph[key] = _absorb(graph[key], graph, consumers, tasks)
    return Delayed(total.key, graph)


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


def _block_graph(arrays: Sequence[Any]) -> tuple[dict, list[List], list[int]]:
    """(graph, per-block references to every array's rows, first row of each block) on the row
    chunks of the first dask array. Dask arrays bring their optimised graph (a store read is one
    task per block); numpy arrays are sliced per block from one shared copy (`_shared`)."""
    row_chunks = next(a for a in arrays if isinstance(a, da.Array)).chunks[0]
    bounds = np.cumsum([0, *row_chunks]).tolist()
    graph: dict = {}
    columns = []
    for a in arrays:
        if isinstance(a, da.Array):
            a = a.rechunk((row_chunks, *((s,) for s in a.shape[1:])))
            keys = list(dask.core.flatten(a.__dask_keys__()))
            graph.update(convert_legacy_graph(dict(a.__dask_optimize__(a.__dask_graph__(), keys))))
            columns.append([TaskRef(k) for k in keys])
            continue
        source, name = _shared(np.asarray(a), graph), f"rows-{uuid.uuid4().hex}"
        for i, rows in enumerate(itertools.pairwise(bounds)):
            graph[name, i] = Task((name, i), operator.getitem, source, slice(*rows))
        columns.append([TaskRef((name, i)) for i in range(len(row_chunks))])
    return graph, [List(*refs) for refs in zip(*columns, strict=True)], bounds[:-1]


def _shared(arg: Any, graph: dict) -> Any:
    """A kernel argument as every task sees it: numpy arrays once in the graph, or on the workers
    when large (1M int64 labels are 8 MB of graph the scheduler has to hold and forward; it
    warns from 10 MB); dask collections by reference to their graph's result;
    anything else as is."""
    if dask.is_dask_collection(arg):
        value = dask.delayed(arg)
        graph.update(convert_legacy_graph(dict(value.__dask_graph__())))
        return TaskRef(value.key)
    if not isinstance(arg, np.ndarray):
        return arg
    if arg.nbytes > _SCATTER_BYTES:
        future = on_every_worker(arg)
        if future is not None:
            return future
    key = f"array-{uuid.uuid4().hex}"
    graph[key] = DataNode(key, arg)
    return TaskRef(key)


def _tree_sum(graph: dict, parts: list, split_every: int, name: str) -> TaskRef:
    """A reference to the sum of `parts`, added `split_every` at a time in new `graph` tasks."""
    level = 0
    while len(parts) > 1:
        level += 1
        summed = []
        for j, group in enumerate(partition_all(split_every, parts)):
            key = (f"{name}-sum-{level}", j)
            graph[key] = Task(key, _sum, *group)
            summed.append(TaskRef(key))
        parts = summed
    return parts[0]


def _absorb(node: Task, graph: dict, consumers: collections.Counter, keep: set) -> Task:
    """`node` with each dependency only it needs (outside `keep`) taken out of `graph` and
    nested in it, recursively: a task's earlier steps, its blocks' reads, slices and embeddings.
    Data already in cluster memory (persisted arrays, scattered inputs) is not in the graph and
    stays a reference; a task two others need is left alone rather than computed twice.
    Module-level, not a closure: a recursive closure is a reference cycle that would hold the
    graph (and its scattered futures) until the next garbage collection.
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


def _threads() -> int:
    """Threads the pass's tasks share (`compute.cluster_threads`)."""
    return cluster_threads()


def _default_chains() -> int:
    """Two runs per thread: while one run's step waits for its scheduler round trip, the other
    run's step keeps the thread busy."""
    return 2 * _threads()


def stats_chains(n_features: int, n_classes: int, *, gram: bool) -> int:
    """`reduce_rows` chains for RowStats partials of this shape: the default two per thread,
    or one per thread with a Gram or when a partial (float64 class sums, Gram, feature sum)
    passes `_LARGE_PARTIAL_BYTES`.

    Large partials are zeroed, moved and added, so fewer of them shorten the pass (``imgscale
    bench pq``, class means at many classes). A Gram step is long, so a second chain hides no
    round trip, and with two per thread dask runs some chains ahead of others: the last chain's
    remaining steps, each waiting for the one before, run on one worker while the other idles
    (``imgscale bench embed`` measures the workers' finishing times).
    """
    partial_bytes = 8 * n_features * (n_classes + (n_features if gram else 0) + 1)
    return _threads() if gram or partial_bytes > _LARGE_PARTIAL_BYTES else _default_chains()


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

    `chains` is `reduce_rows`' (default: `stats_chains`, by the size of the partials); without
    a Gram the kernel is light and tasks take several blocks (`reduce_rows`' "auto").
    """
    lazy = lazy_row_stats(
        X, y_index, n_classes, gram=gram, gram_precision=gram_precision, chains=chains
    )
    return compute(lazy)[0]


def lazy_row_stats(
    X: Any,
    y_index: Any,
    n_classes: int,
    *,
    gram: bool,
    gram_precision: str = "float64",
    chains: int | None = None,
) -> Any:
    """`row_stats` before its pass runs: a `Delayed` RowStats for dask `X`, so that several
    passes run in one graph (one `pipeline.compute.compute` of them all); for numpy `X`, the
    RowStats itself."""
    if chains is None:
        chains = stats_chains(X.shape[1], n_classes, gram=gram)
    return reduce_rows(
        chunk_row_stats,
        [X, y_index],
        n_classes,
        gram,
        gram_precision,
        chains=chains,
        blocks_per_task=1 if gram else "auto",
    )
