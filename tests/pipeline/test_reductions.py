"""pipeline.reductions: RowStats kernels against numpy brute force, and the tree-sum wiring."""

import itertools
import weakref

import dask
import dask.array as da
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from imgscale.jobs.cluster import ClusterExecutor
from imgscale.pipeline import gram as gram_module
from imgscale.pipeline import reductions
from imgscale.pipeline.compute import compute, use_executor
from imgscale.pipeline.reductions import RowStats, chunk_row_stats, reduce_rows, row_stats
from tests.pipeline.conftest import N_CLASSES, as_dask


def brute_force_stats(X, y):
    X64 = X.astype(np.float64)
    labelled = y >= 0
    return RowStats(
        n_rows=len(X),
        feature_sum=X64.sum(axis=0),
        class_sums=np.stack([X64[y == c].sum(axis=0) for c in range(N_CLASSES)]),
        class_counts=np.bincount(y[labelled], minlength=N_CLASSES),
        gram=X64[labelled].T @ X64[labelled],
    )


def assert_stats_close(a, b):
    assert a.n_rows == b.n_rows
    np.testing.assert_array_equal(a.class_counts, b.class_counts)
    for name in ("feature_sum", "class_sums", "gram"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), rtol=1e-12, atol=1e-9)


def test_row_stats_of_numpy_equal_brute_force_sums(data):
    X, y = data
    assert_stats_close(row_stats(X, y, N_CLASSES, gram=True), brute_force_stats(X, y))


@pytest.mark.parametrize("all_labelled", [True, False], ids=["labelled", "with-unlabelled"])
def test_float32_gram_row_stats_equal_brute_force_sums(data, all_labelled):
    """The float32 Gram reuses the chunk's row sums when every row is labelled."""
    X, y = data
    if all_labelled:
        X, y = X[y >= 0], y[y >= 0]
    stats = chunk_row_stats(X, y, N_CLASSES, True, "float32")
    expected = brute_force_stats(X, y)
    np.testing.assert_allclose(stats.feature_sum, expected.feature_sum, rtol=1e-12)
    np.testing.assert_allclose(stats.gram, expected.gram, rtol=1e-5, atol=1e-5 * len(X))


def test_unlabelled_rows_count_only_towards_feature_sum(data):
    X, y = data
    stats = row_stats(X, y, N_CLASSES, gram=False)
    assert stats.n_labelled == (y >= 0).sum()
    np.testing.assert_allclose(stats.labelled_sum, X[y >= 0].sum(axis=0, dtype=np.float64))
    np.testing.assert_allclose(stats.feature_sum, X.sum(axis=0, dtype=np.float64))
    assert stats.gram is None


def test_row_stats_of_dask_equal_numpy(data):
    X, y = data
    assert_stats_close(
        row_stats(as_dask(X), as_dask(y), N_CLASSES, gram=True),
        row_stats(X, y, N_CLASSES, gram=True),
    )


def test_chunk_row_stats_do_not_depend_on_the_sub_block_size(data, monkeypatch):
    X, y = data
    whole = chunk_row_stats(X, y, N_CLASSES, True)
    monkeypatch.setattr(gram_module, "_SUB_ROWS", 7)
    assert_stats_close(chunk_row_stats(X, y, N_CLASSES, True), whole)


@settings(max_examples=25, deadline=None)
@given(cuts=st.lists(st.integers(1, 419), max_size=6, unique=True))
def test_row_stats_are_invariant_to_row_chunking(cuts):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(420, 6)).astype(np.float32)
    y = rng.integers(-1, N_CLASSES, 420)
    bounds = [0, *sorted(cuts), 420]
    chunks = tuple(b - a for a, b in itertools.pairwise(bounds))
    chunked = row_stats(da.from_array(X, chunks=(chunks, 6)), y, N_CLASSES, gram=True)
    assert_stats_close(chunked, row_stats(X, y, N_CLASSES, gram=True))


def test_reduce_rows_sums_blocks_in_a_tree_of_bounded_fan_in(data):
    X, y = data
    lazy = reduce_rows(
        chunk_row_stats, [as_dask(X, rows=10), y], N_CLASSES, False, split_every=3, chains=42
    )
    graph = dict(lazy.__dask_graph__())
    fan_in = [len(dask.core.get_dependencies(graph, key)) for key in graph]
    assert len(graph) > 42 and max(fan_in) <= 3


@pytest.mark.parametrize("chains", [1, 3, 42, 100])
def test_chained_runs_accumulating_in_place_equal_brute_force(data, chains):
    X, y = data
    lazy = reduce_rows(chunk_row_stats, [as_dask(X, rows=10), y], N_CLASSES, True, chains=chains)
    assert_stats_close(compute(lazy)[0], brute_force_stats(X, y))


def test_chained_runs_of_a_kernel_without_into_add_its_results(data):
    X, _ = data

    def column_sums(block, row_start):
        return block.sum(axis=0, dtype=np.float64)

    lazy = reduce_rows(column_sums, [as_dask(X, rows=10)], chains=4)
    np.testing.assert_allclose(compute(lazy)[0], X.sum(axis=0, dtype=np.float64), rtol=1e-12)


def test_only_a_kernel_declared_accumulating_is_given_the_partial(data):
    """The call convention is declared (`accumulating`), not read off the parameter names."""
    X, _ = data
    calls = {"declared": [], "undeclared": []}

    def column_sums(kind):
        def kernel(block, row_start, into=None):
            calls[kind].append(into is not None)
            sums = block.sum(axis=0, dtype=np.float64)
            return sums if into is None else into + sums

        return kernel

    declared = reductions.accumulating(column_sums("declared"))
    expected = X.sum(axis=0, dtype=np.float64)
    for kernel in (declared, column_sums("undeclared")):
        lazy = reduce_rows(kernel, [as_dask(X, rows=10)], chains=2)
        result = dask.compute(lazy, scheduler="sync")[0]
        np.testing.assert_allclose(result, expected, rtol=1e-12)
    n_blocks = -(-len(X) // 10)
    assert calls["undeclared"] == [False] * n_blocks
    assert sorted(calls["declared"]) == [False] * 2 + [True] * (n_blocks - 2)


def reduction_tasks(graph):
    """Keys of a reduce_rows graph's own tasks: its steps, then its adds."""
    ours = [key for key in graph if isinstance(key, tuple) and key[0].startswith("reduce-")]
    adds = [key for key in ours if "-sum-" in key[0]]
    return [key for key in ours if key not in adds], adds


def test_chained_runs_leave_one_partial_per_run(data):
    X, y = data
    lazy = reduce_rows(
        chunk_row_stats, [as_dask(X, rows=10), y], N_CLASSES, False, chains=5, blocks_per_task=1
    )
    graph = dict(lazy.__dask_graph__())
    steps, _ = reduction_tasks(graph)
    # 42 blocks in 5 runs: the 5 run ends feed the adds, every other step feeds the next step.
    run_ends = [
        key for key in steps if not any(key in dask.core.get_dependencies(graph, k) for k in steps)
    ]
    assert len(steps) == 42 and len(run_ends) == 5
    # Runs are interleaved: the step of block i extends the partial of block i - 5.
    for name, i in steps:
        assert dask.core.get_dependencies(graph, (name, i)) & set(steps) == (
            {(name, i - 5)} if i >= 5 else set()
        )


def test_each_block_is_read_and_reduced_in_the_one_task_that_consumes_it(data):
    """A block's own tasks (here a read and a map_blocks) are inlined into its chain step: the
    graph holds one task per block plus the shared source and the adds, and the sum is exact."""
    X, y = data
    doubled = as_dask(X, rows=10) * 2  # 42 blocks
    lazy = reduce_rows(chunk_row_stats, [doubled, y], N_CLASSES, True, chains=5, blocks_per_task=1)
    graph = dict(lazy.__dask_graph__())
    names = {key[0] for key in graph if isinstance(key, tuple)}
    steps, _ = reduction_tasks(graph)
    assert len(steps) == 42 and doubled.name not in names
    assert_stats_close(compute(lazy)[0], brute_force_stats(2 * X, y))


def test_a_task_reads_and_reduces_several_blocks_in_turn(data):
    """With blocks_per_task=4, each task runs 4 consecutive steps of its run (the last task of a
    run fewer), each with its block's read inlined: 3 runs of 14 blocks are 3 × 4 tasks. The
    sums are exact."""
    X, y = data
    doubled = as_dask(X, rows=10) * 2  # 42 blocks
    lazy = reduce_rows(chunk_row_stats, [doubled, y], N_CLASSES, True, chains=3, blocks_per_task=4)
    steps, _ = reduction_tasks(dict(lazy.__dask_graph__()))
    assert len(steps) == 12
    assert_stats_close(compute(lazy)[0], brute_force_stats(2 * X, y))


class Block(np.ndarray):
    """A block whose making and release are counted in `alive`."""

    alive = 0

    @classmethod
    def of(cls, a):
        block = np.array(a).view(cls)
        cls.alive += 1
        weakref.finalize(block, cls._released)
        return block

    @classmethod
    def _released(cls):
        cls.alive -= 1


def test_a_task_holds_one_block_at_a_time(data):
    """Steps nested in one task run in turn: each block is released before the next is made."""
    X, y = data
    seen = []

    def count_live(block, y_block, row_start):
        seen.append(Block.alive)
        return np.asarray(block).sum(dtype=np.float64)

    blocks = as_dask(X, rows=10).map_blocks(Block.of, meta=np.empty((0, X.shape[1]), X.dtype))
    lazy = reduce_rows(count_live, [blocks, y], blocks_per_task=42)
    with dask.config.set(scheduler="sync"):
        total = compute(lazy)[0]
    assert seen == [1] * 42
    np.testing.assert_allclose(total, X.sum(dtype=np.float64), rtol=1e-12)


def test_auto_leaves_each_thread_a_few_tasks_and_one_block_a_task_is_the_default(data, monkeypatch):
    X, _ = data
    monkeypatch.setattr(reductions, "_threads", lambda: 2)
    blocks = as_dask(X, rows=2)  # 210 blocks

    def column_sums(block, row_start):
        return block.sum(axis=0, dtype=np.float64)

    per_task = max(1, 210 // (reductions._TASKS_PER_THREAD * 2))
    auto = reduce_rows(column_sums, [blocks], blocks_per_task="auto")
    steps, _ = reduction_tasks(dict(auto.__dask_graph__()))
    assert len(steps) == -(-210 // per_task) < 210
    steps, _ = reduction_tasks(dict(reduce_rows(column_sums, [blocks]).__dask_graph__()))
    assert len(steps) == 210
    np.testing.assert_allclose(compute(auto)[0], X.sum(axis=0, dtype=np.float64), rtol=1e-12)


@pytest.mark.parametrize("bad", [0, -1, 2.0, "all"])
def test_blocks_per_task_must_be_positive_or_auto(data, bad):
    X, _ = data
    with pytest.raises(ValueError, match="blocks_per_task"):
        reduce_rows(lambda block, row_start: block.sum(), [as_dask(X)], blocks_per_task=bad)


def test_independent_blocks_are_grouped_into_tasks_and_summed(data):
    """A kernel without `into`: 42 blocks, 5 per task → 9 tasks, tree-summed exactly."""
    X, _ = data

    def column_sums(block, row_start):
        return block.sum(axis=0, dtype=np.float64)

    lazy = reduce_rows(column_sums, [as_dask(X, rows=10)], blocks_per_task=5, split_every=4)
    steps, adds = reduction_tasks(dict(lazy.__dask_graph__()))
    assert len(steps) == 9 and len(adds) == 3 + 1
    np.testing.assert_allclose(compute(lazy)[0], X.sum(axis=0, dtype=np.float64), rtol=1e-12)


def test_blocks_already_in_memory_stay_references(data):
    X, y = data
    with dask.config.set(scheduler="sync"):
        persisted = (as_dask(X, rows=10) * 2).persist()
        lazy = reduce_rows(chunk_row_stats, [persisted, y], N_CLASSES, True, chains=3)
        assert_stats_close(compute(lazy)[0], brute_force_stats(2 * X, y))


def test_chunk_row_stats_into_adds_to_the_given_statistics(data):
    X, y = data
    stats = chunk_row_stats(X[:200], y[:200], N_CLASSES, True)
    same = chunk_row_stats(X[200:], y[200:], N_CLASSES, True, row_start=200, into=stats)
    assert same is stats
    assert_stats_close(stats, brute_force_stats(X, y))
    with pytest.raises(ValueError, match="another shape"):
        chunk_row_stats(X, y, N_CLASSES + 1, True, into=stats)


def test_row_stats_reject_non_finite_rows_naming_them(data):
    X, y = data
    X = X.copy()
    X[150, 2] = np.nan
    with pytest.raises(ValueError, match=r"rows \[150\]"):
        row_stats(as_dask(X), y, N_CLASSES, gram=False)


def test_row_stats_reject_class_indices_out_of_range(data):
    X, y = data
    with pytest.raises(ValueError, match="outside"):
        row_stats(X, np.where(y == 4, 5, y), N_CLASSES, gram=False)


def test_adding_row_stats_appends_classes_of_the_shorter_one(data):
    X, y = data
    y = y.copy()
    head = y[:100]
    head[head >= 3] = -1  # the first 100 rows only know classes 0..2
    few = row_stats(X[:100], y[:100], 3, gram=True)
    rest = row_stats(X[100:], y[100:], N_CLASSES, gram=True)
    assert_stats_close(few + rest, brute_force_stats(X, y))


def test_large_numpy_inputs_go_to_the_workers_not_into_the_graph(monkeypatch):
    """On a distributed client, numpy labels above `_SCATTER_BYTES` are scattered once and each
    task slices its rows: the graph shrinks by the labels' size; the result equals numpy's."""
    import cloudpickle
    from distributed import Client

    rng = np.random.default_rng(2)
    X = rng.normal(size=(2000, 4)).astype(np.float32)
    y = rng.integers(-1, N_CLASSES, 2000)
    X_dask = da.from_array(X, chunks=(256, 4))
    with (
        Client(processes=False, n_workers=1, threads_per_worker=2, dashboard_address=None) as c,
        use_executor(ClusterExecutor(c)),
    ):
        sizes = {}
        for limit in (10**9, 100):
            monkeypatch.setattr(reductions, "_SCATTER_BYTES", limit)
            lazy = reduce_rows(chunk_row_stats, [X_dask, y], N_CLASSES, True)
            sizes[limit] = len(cloudpickle.dumps(dict(lazy.__dask_graph__())))
            assert_stats_close(lazy.compute(), chunk_row_stats(X, y, N_CLASSES, True))
    assert sizes[10**9] - sizes[100] > 0.75 * y.nbytes  # without scattering: ~0


def test_repeated_passes_over_scattered_labels_all_complete(monkeypatch):
    """Each pass scatters its labels under a fresh key: re-scattering under the same key raced the
    release of the previous pass's future, and the pass failed with "lost dependencies"."""
    from distributed import Client, LocalCluster

    monkeypatch.setattr(reductions, "_SCATTER_BYTES", 100)
    rng = np.random.default_rng(3)
    X = rng.normal(size=(4000, 4)).astype(np.float32)
    y = rng.integers(-1, N_CLASSES, 4000)
    expected = chunk_row_stats(X, y, N_CLASSES, False)
    with (
        LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=None) as cluster,
        Client(cluster) as client,
        use_executor(ClusterExecutor(client)),
    ):
        for _ in range(6):
            got = row_stats(da.from_array(X, chunks=(500, 4)), y, N_CLASSES, gram=False)
            np.testing.assert_array_equal(got.class_counts, expected.class_counts)


def test_large_numpy_kernel_arguments_go_to_the_workers_not_into_the_graph(monkeypatch):
    import cloudpickle
    from distributed import Client

    rng = np.random.default_rng(4)
    X = rng.normal(size=(1000, 6)).astype(np.float32)
    weights = rng.normal(size=(6, 500))

    def projected_sum(block, w, row_start):
        return (block @ w).sum(axis=0)

    with (
        Client(processes=False, n_workers=1, threads_per_worker=2, dashboard_address=None) as c,
        use_executor(ClusterExecutor(c)),
    ):
        sizes = {}
        for limit in (10**9, 100):
            monkeypatch.setattr(reductions, "_SCATTER_BYTES", limit)
            lazy = reduce_rows(projected_sum, [da.from_array(X, chunks=(100, 6))], weights)
            sizes[limit] = len(cloudpickle.dumps(dict(lazy.__dask_graph__())))
            np.testing.assert_allclose(compute(lazy)[0], (X @ weights).sum(axis=0), rtol=1e-5)
    assert sizes[10**9] - sizes[100] > 0.9 * weights.nbytes


def test_a_finished_pass_leaves_nothing_on_the_workers(monkeypatch):
    """Scattered labels are released when the pass returns, not at the next garbage collection
    (a reference cycle in the graph rewriting held them: one per pass, for ever without gc)."""
    import gc
    import time

    from distributed import Client

    monkeypatch.setattr(reductions, "_SCATTER_BYTES", 100)
    rng = np.random.default_rng(5)
    X = rng.normal(size=(2000, 4)).astype(np.float32)
    y = rng.integers(0, N_CLASSES, 2000)
    with (
        Client(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None) as c,
        use_executor(ClusterExecutor(c)),
    ):
        gc.disable()
        try:
            row_stats(da.from_array(X, chunks=(500, 4)), y, N_CLASSES, gram=False)
            deadline = time.monotonic() + 5
            while any(c.has_what().values()) and time.monotonic() < deadline:
                time.sleep(0.02)
            assert not any(c.has_what().values())
        finally:
            gc.enable()


def test_large_row_stats_partials_and_grams_run_one_chain_per_thread(monkeypatch):
    monkeypatch.setattr(reductions, "_threads", lambda: 3)
    # 10,000 classes at D = 512: 41 MB partials keep two chains per thread.
    assert reductions.stats_chains(512, 10_000, gram=False) == 6
    # At D = 4096 (328 MB), one per thread; with a Gram (long steps), one per thread at any size.
    assert reductions.stats_chains(4096, 10_000, gram=False) == 3
    assert reductions.stats_chains(4096, 10, gram=True) == 3
    assert reductions.stats_chains(64, 10, gram=True) == 3
