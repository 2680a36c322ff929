"""MetricKNeighborsClassifier (paper 002 §3.1) against brute force and finite differences."""

import tracemalloc

import dask
import numpy as np
import pytest

from imgscale.pipeline.classify.knn import (
    MetricKNeighborsClassifier,
    _mean_squared_distance,
    _vote_scores,
    dynamic_targets,
    knn_search,
    triplet_objective,
)
from tests.pipeline.conftest import as_dask
from tests.pipeline.test_base_top_k import stable_top_k
from tests.pipeline.test_ncm_metric import noisy_classes


def brute_force_neighbours(queries, references, k):
    distances = ((queries[:, None, :].astype(np.float64) - references[None]) ** 2).sum(axis=2)
    return np.argsort(distances, axis=1, kind="stable")[:, :k]


def test_knn_search_equals_brute_force_on_numpy_and_dask():
    rng = np.random.default_rng(0)
    references, queries = rng.normal(size=(500, 6)), rng.normal(size=(40, 6))
    expected = brute_force_neighbours(queries, references, 7)
    ids, _ = knn_search(queries, references.astype(np.float32), 7)
    np.testing.assert_array_equal(ids, expected)
    ids, distances = knn_search(queries, as_dask(references.astype(np.float32), rows=64), 7)
    np.testing.assert_array_equal(ids, expected)
    assert np.all(np.diff(distances, axis=1) >= 0)


def test_triplet_objective_is_eq2_summed_triplet_by_triplet_with_its_gradient():
    """Rows shared between queries, targets and negatives (as in a minibatch) included."""
    rng = np.random.default_rng(1)
    rows = rng.normal(size=(20, 5))
    queries = rng.choice(20, 12, replace=False)
    targets, negatives = rng.integers(0, 20, (12, 2)), rng.integers(0, 20, (12, 3))
    W = rng.normal(size=(3, 5)) * 0.4

    def objective(W):
        return triplet_objective(W, rows, queries, targets, negatives)

    expected_loss, expected_grad = 0.0, np.zeros_like(W)
    for q, row_targets, row_negatives in zip(queries, targets, negatives, strict=True):
        for p in row_targets:
            for n in row_negatives:
                near, far = rows[q] - rows[p], rows[q] - rows[n]
                hinge = 1 + np.sum((W @ near) ** 2) - np.sum((W @ far) ** 2)
                if hinge > 0:
                    expected_loss += hinge
                    expected_grad += 2 * (np.outer(W @ near, near) - np.outer(W @ far, far))
    loss, grad = objective(W)
    assert loss == pytest.approx(expected_loss / 72, rel=1e-12)
    np.testing.assert_allclose(grad, expected_grad / 72, rtol=1e-10, atol=1e-12)
    numeric = np.zeros_like(W)
    for index in np.ndindex(W.shape):
        step = np.zeros_like(W)
        step[index] = 1e-7
        numeric[index] = (objective(W + step)[0] - objective(W - step)[0]) / 2e-7
    np.testing.assert_allclose(grad, numeric, rtol=1e-4, atol=1e-6)


def test_dynamic_targets_are_nearest_same_class_rows():
    rng = np.random.default_rng(2)
    Z, y = rng.normal(size=(60, 3)).astype(np.float32), rng.integers(0, 3, 60)
    targets = dynamic_targets(Z, y, 4)
    for i in range(60):
        same = np.flatnonzero((y == y[i]) & (np.arange(60) != i))
        order = same[brute_force_neighbours(Z[i : i + 1], Z[same], 4)[0]]
        np.testing.assert_array_equal(targets[i], order)


def test_plain_knn_predicts_the_brute_force_majority():
    X, y = noisy_classes(n=300)
    Xt, _ = noisy_classes(n=50, seed=1)
    model = MetricKNeighborsClassifier(
        n_neighbors=5, n_components=None, metric_learning=False, random_state=0
    ).fit(X, y)
    labelled = model.reference_index_
    neighbours = brute_force_neighbours(Xt, model.reference_.astype(np.float64), 5)
    votes = np.array([np.bincount(labelled[row], minlength=6) for row in neighbours])
    clear = np.sort(votes, axis=1)[:, -1] > np.sort(votes, axis=1)[:, -2]
    np.testing.assert_array_equal(model.predict(Xt)[clear], votes.argmax(axis=1)[clear])
    np.testing.assert_array_equal(model.predict(as_dask(Xt, rows=16)).compute(), model.predict(Xt))


def test_metric_learning_beats_l2_knn():
    X, y = noisy_classes(n=800)
    Xt, yt = noisy_classes(n=400, seed=1)
    plain = MetricKNeighborsClassifier(n_components=None, metric_learning=False, random_state=0)
    learned = MetricKNeighborsClassifier(
        n_components=2, max_iter=150, batch_size=128, validate_every=25, random_state=0
    )
    plain_error = np.mean(plain.fit(X, y).predict(Xt) != yt)
    learned_error = np.mean(learned.fit(X, y).predict(Xt) != yt)
    assert learned_error < 0.7 * plain_error


def test_knn_fitted_on_dask_holds_numpy_references_and_equals_brute_force():
    X, y = noisy_classes(n=300)
    Xt, _ = noisy_classes(n=50, seed=1)
    params = {"n_neighbors": 5, "n_components": None, "metric_learning": False}
    model = MetricKNeighborsClassifier(**params, random_state=0).fit(as_dask(X, rows=64), y)
    assert isinstance(model.reference_, np.ndarray)
    neighbours = brute_force_neighbours(Xt, X.astype(np.float64), 5)
    expected = _vote_scores(model.reference_index_[neighbours], len(model.classes_))
    np.testing.assert_array_equal(model.decision_function(Xt), expected)
    for queries in (Xt, as_dask(Xt, rows=16)):
        top = np.asarray(dask.compute(model.predict_top_k(queries, k=3))[0])
        np.testing.assert_array_equal(top, model.classes_[stable_top_k(expected, 3)])
        predicted = np.asarray(dask.compute(model.predict(queries))[0])
        np.testing.assert_array_equal(predicted, model.classes_[expected.argmax(axis=1)])


def test_the_pools_spread_is_exact_without_a_copy_of_the_pool():
    """The SGD step is scaled by the pool's mean squared distance to its class means; a pool of
    64K-D rows is gigabytes, so that mean must not copy it (it once made two float64 copies)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(4096, 2048)).astype(np.float32)
    centres, index = rng.normal(size=(7, 2048)).astype(np.float32), rng.integers(0, 7, 4096)
    expected = np.mean(np.sum((X - centres[index]).astype(np.float64) ** 2, axis=1))
    tracemalloc.start()
    try:
        value = _mean_squared_distance(X, centres, index)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert value == pytest.approx(expected, rel=1e-12)
    assert peak < X.nbytes / 4
