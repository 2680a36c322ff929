"""MetricNearestClassMean (paper 002 §3.2, §4.4) against finite differences and brute force."""

import numpy as np
import pytest

from imgscale.pipeline.classify.ncm_metric import MetricNearestClassMean, ncm_objective
from imgscale.pipeline.classify.zero_shot import ancestors, map_mean, prior_means
from imgscale.pipeline.pq import PQCodec
from tests.pipeline.conftest import as_dask

FAST = {"n_components": 4, "batch_size": 64, "max_iter": 60, "validate_every": 20}


def noisy_classes(n=600, classes=6, dim=10, seed=0):
    """Classes separated in dims 0–1 only; dims 2–9 carry large class-independent noise, so
    ℓ2 NCM is poor and a learned metric that ignores the noise is good."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    X = rng.normal(size=(n, dim)) * np.r_[0.3, 0.3, np.full(dim - 2, 3.0)]
    angle = 2 * np.pi * y / classes
    X[:, 0] += 2 * np.cos(angle)
    X[:, 1] += 2 * np.sin(angle)
    return X.astype(np.float32), y


def brute_force_scores(model, X):
    W = model.components_.astype(np.float64)
    diff = X.astype(np.float64)[:, None, :] - model.means_.astype(np.float64)[None]
    return -(((diff @ W.T) ** 2).sum(axis=2))


def test_gradient_of_eq7_matches_finite_differences():
    rng = np.random.default_rng(1)
    X, means = rng.normal(size=(20, 7)), rng.normal(size=(5, 7))
    y, W = rng.integers(0, 5, 20), rng.normal(size=(3, 7)) * 0.5
    _, grad = ncm_objective(W, X, y, means)
    numeric = np.zeros_like(W)
    for index in np.ndindex(W.shape):
        step = np.zeros_like(W)
        step[index] = 1e-6
        plus, _ = ncm_objective(W + step, X, y, means)
        minus, _ = ncm_objective(W - step, X, y, means)
        numeric[index] = (plus - minus) / 2e-6
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-8)


def test_objective_is_finite_with_10000_classes_and_huge_distances():
    rng = np.random.default_rng(2)
    means = rng.normal(size=(10_000, 8)).astype(np.float32) * 1e3
    X, y = means[:50] + 1, np.arange(50)
    loss, grad = ncm_objective(np.eye(8, dtype=np.float32), X, y, means)
    assert np.isfinite(loss) and np.isfinite(grad).all()


def test_decision_by_eq9_equals_brute_force_distances():
    X, y = noisy_classes()
    model = MetricNearestClassMean(**FAST, random_state=0).fit(X, y)
    np.testing.assert_allclose(
        model.decision_function(X), brute_force_scores(model, X), rtol=1e-4, atol=1e-3
    )


def test_top_k_equals_brute_force_ranking_with_many_classes():
    rng = np.random.default_rng(3)
    y = np.repeat(np.arange(400), 3)
    X = rng.normal(size=(1200, 12)).astype(np.float32) + rng.normal(size=(400, 12))[y] * 3
    model = MetricNearestClassMean(n_components=6, max_iter=0, random_state=0).fit(X, y)
    expected = np.argsort(-brute_force_scores(model, X[:300]), axis=1, kind="stable")[:, :5]
    np.testing.assert_array_equal(model.predict_top_k(X[:300], k=5), model.classes_[expected])
    lazy = model.predict_top_k(as_dask(X[:300], rows=64), k=5)
    np.testing.assert_array_equal(lazy.compute(), model.classes_[expected])


def test_learned_metric_beats_l2_and_keeps_the_best_validated_w():
    X, y = noisy_classes()
    Xt, yt = noisy_classes(seed=1)
    model = MetricNearestClassMean(
        n_components=2, max_iter=200, validate_every=20, validation_k=1, random_state=0
    ).fit(X, y, X_val=Xt[:200], y_val=yt[:200])
    l2 = MetricNearestClassMean(n_components=10, max_iter=0, random_state=0).fit(X, y)
    assert np.mean(model.predict(Xt) != yt) < 0.5 * np.mean(l2.predict(Xt) != yt)
    best = model.validation_iterations_ == model.best_iteration_
    assert model.validation_error_[best][0] == model.validation_error_.min()


def test_fit_on_dask_rows_learns_like_numpy():
    X, y = noisy_classes()
    Xt, yt = noisy_classes(seed=1)
    model = MetricNearestClassMean(**FAST, pool_rows=200, random_state=0)
    model.fit(as_dask(X, rows=100), y)
    np.testing.assert_allclose(model.means_, MetricNearestClassMean(**FAST).fit(X, y).means_)
    assert np.mean(model.predict(Xt) != yt) < 0.3


def test_add_class_leaves_w_and_existing_scores_bit_identical():
    X, y = noisy_classes()
    model = MetricNearestClassMean(**FAST, random_state=0).fit(X[y < 5], y[y < 5])
    W, means, before = model.components_.copy(), model.means_.copy(), model.decision_function(X)
    model.add_class(X[y == 5], 5)
    after = model.decision_function(X)
    np.testing.assert_array_equal(model.components_, W)
    np.testing.assert_array_equal(model.means_[:5], means)
    np.testing.assert_array_equal(after[:, :5], before)
    np.testing.assert_allclose(model.means_[5], X[y == 5].mean(axis=0), rtol=1e-5)


def test_partial_fit_needs_a_learned_metric():
    X, y = noisy_classes()
    with pytest.raises(ValueError, match="call fit first"):
        MetricNearestClassMean().partial_fit(X, y)


def test_fit_codes_means_equal_decoded_rows_and_decode_only_samples():
    rng = np.random.default_rng(5)
    codebook = rng.normal(size=(5, 256, 2)).astype(np.float32)
    codes = rng.integers(0, 256, (400, 5)).astype(np.uint8)
    y = rng.integers(0, 4, 400)
    decode = PQCodec(codebook).decode
    decoded = decode(codes)
    reference = codebook[np.arange(5), codes].reshape(400, 10)
    np.testing.assert_array_equal(decoded, reference)
    model = MetricNearestClassMean(**FAST, random_state=0).fit(
        as_dask(codes), y, codec=PQCodec(codebook)
    )
    expected = np.stack([decoded[y == c].astype(np.float64).mean(0) for c in range(4)])
    np.testing.assert_allclose(model.means_, expected, rtol=1e-5, atol=1e-6)
    assert model.components_.shape == (4, 10)


def test_zero_shot_prior_is_the_average_of_ancestor_means():
    children, parents = ["a", "b", "c", "left", "right"], ["left", "left", "right", "root", "root"]
    assert ancestors(children, parents)["a"] == ["left", "root"]
    means = np.array([[0.0, 0.0], [2.0, 0.0], [0.0, 6.0]])
    prior = prior_means(["a", "b", "c"], means, [*children, "new"], [*parents, "left"], ["new"])
    left, root = np.array([1.0, 0.0]), np.array([2 / 3, 2.0])
    np.testing.assert_allclose(prior[0], (left + root) / 2, rtol=1e-6)


def test_prior_class_gets_the_map_mean_once_rows_arrive():
    X, y = noisy_classes()
    model = MetricNearestClassMean(**FAST, prior_weight=3.0, random_state=0)
    model.fit(X[y < 5], y[y < 5])
    before = model.decision_function(X)
    prior = np.full(10, 0.5, dtype=np.float32)
    model.add_class_prior(5, prior)
    np.testing.assert_array_equal(model.means_[5], prior)
    np.testing.assert_array_equal(model.decision_function(X)[:, :5], before)
    rows = X[y == 5][:4]
    model.partial_fit(rows, np.full(4, 5))
    np.testing.assert_allclose(model.means_[5], map_mean(rows.mean(0), 4, prior, 3.0), rtol=1e-5)
