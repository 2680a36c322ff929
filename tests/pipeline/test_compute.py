"""pipeline.compute: the single, hookable way pipeline code materialises dask results."""

import dask.array as da
import numpy as np
import pytest

from imgscale.pipeline.classify import RidgeClassifier
from imgscale.pipeline.compute import compute, gather_rows, installed_executor, use_executor
from tests.pipeline.conftest import as_dask, computing_with


def test_compute_returns_numpy_inputs_untouched():
    a = np.arange(3)
    (out,) = compute(a)
    assert out is a


def test_compute_without_hook_equals_dask_compute():
    x = da.arange(10, chunks=3)
    assert compute(x.sum(), x.max()) == (45, 9)


def test_use_executor_routes_dask_collections_through_the_executor():
    calls = []

    def hook(*collections):
        calls.append(len(collections))
        return tuple(c.compute(scheduler="sync") for c in collections)

    with use_executor(computing_with(hook)):
        assert compute(da.ones(4, chunks=2).sum()) == (4.0,)
    assert calls == [1]


def test_use_executor_restores_the_previous_executor_on_exit():
    with use_executor(computing_with(lambda *c: c)):
        pass
    assert installed_executor.get() is None


def test_ridge_fit_on_dask_materialises_through_the_executor(data):
    X, y = data
    calls = []

    def hook(*collections):
        calls.append(collections)
        import dask

        return dask.compute(*collections)

    with use_executor(computing_with(hook)):
        RidgeClassifier().fit(as_dask(X), y)
    assert len(calls) == 1


@pytest.mark.parametrize(
    "index",
    [np.array([0, 3, 56, 57, 58, 199]), np.arange(200), np.array([], np.int64)],
    ids=["across-chunks", "all", "none"],
)
def test_gather_rows_equals_numpy_indexing(index):
    X = np.arange(200 * 3, dtype=np.uint8).reshape(200, 3)  # codes keep their dtype
    for source in (X, as_dask(X)):
        rows = gather_rows(source, index)
        assert rows.dtype == np.uint8
        np.testing.assert_array_equal(rows, X[index])


def test_a_models_large_arrays_reach_the_workers_once_and_answer_as_in_numpy(monkeypatch):
    """On a distributed client, fitted arrays above `SCATTER_BYTES` (a kNN's reference rows, an
    embedding's weights) are sent to the workers, not put into the graph: lazy predictions and a
    reduction over embedded rows equal the numpy ones."""
    import cloudpickle
    from distributed import Client

    from imgscale.jobs.cluster import ClusterExecutor
    from imgscale.pipeline import compute as compute_module
    from imgscale.pipeline.classify import MetricKNeighborsClassifier
    from imgscale.pipeline.embed import RandomFourierFeatures
    from imgscale.pipeline.reductions import chunk_row_stats, reduce_rows

    rng = np.random.default_rng(5)
    X = rng.normal(size=(600, 6)).astype(np.float32)
    y = np.arange(600) % 3
    knn = MetricKNeighborsClassifier(n_neighbors=3, n_components=None, metric_learning=False)
    knn.fit(X, y)
    rff = RandomFourierFeatures(n_components=32, gamma=0.5, random_state=0).fit(X)
    X_dask = da.from_array(X, chunks=(128, 6))
    with (
        Client(processes=False, n_workers=1, threads_per_worker=2, dashboard_address=None) as c,
        use_executor(ClusterExecutor(c)),
    ):
        sizes = {}
        for limit in (10**9, 100):
            monkeypatch.setattr(compute_module, "SCATTER_BYTES", limit)
            predicted = knn.predict(X_dask)
            sizes[limit] = len(cloudpickle.dumps(dict(predicted.__dask_graph__())))
            np.testing.assert_array_equal(predicted.compute(), knn.predict(X))
        stats = reduce_rows(chunk_row_stats, [rff.transform(X_dask), y], 3, False).compute()
    assert sizes[10**9] - sizes[100] > 0.75 * knn.reference_.nbytes
    expected = chunk_row_stats(rff.transform(X), y, 3, False)
    np.testing.assert_allclose(stats.class_sums, expected.class_sums, rtol=1e-5)
