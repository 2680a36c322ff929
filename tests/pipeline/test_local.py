"""Predicted neighbourhoods for lazy local learning (paper 004): each piece against a dense
reference or an exact distribution, and the estimator's contract."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
from scipy import optimize, stats

from imgscale.pipeline.classify import local, local_kernels
from imgscale.pipeline.classify.local import (
    PredictedNeighbourhoodClassifier,
    local_posteriors,
    multi_target_ridge,
    predict_from_confidences,
    recover,
    sample_candidates,
    sensing_signs,
)


def _blobs(n=240, d=6, n_classes=2, seed=0):
    """Rows around 2·C centres, the label of a centre alternating: each label is bimodal."""
    rng = np.random.default_rng(seed)
    centres = 3 * rng.normal(size=(2 * n_classes, d))
    mode = rng.integers(0, 2 * n_classes, n)
    X = (centres[mode] + rng.normal(size=(n, d))).astype(np.float32)
    return X, mode % n_classes


def test_omp_recovers_a_planted_sparse_indicator_from_order_l_log_m_over_l_measurements():
    n_rows, sparsity = 2000, 10
    n_measurements = int(4 * sparsity * np.log(n_rows / sparsity))  # 211 of 2,000
    phi = sensing_signs(n_measurements, n_rows, seed=1) / np.sqrt(n_measurements)
    rng = np.random.default_rng(2)
    for _ in range(5):
        indicator = np.zeros(n_rows)
        indicator[rng.choice(n_rows, sparsity, replace=False)] = 1.0
        recovered = recover(phi @ indicator, phi, sparsity, "omp")[0]
        np.testing.assert_allclose(recovered, indicator, atol=1e-8)


def test_sensing_signs_are_the_bits_of_pcg64s_raw_stream_which_numpy_keeps_across_versions():
    """A saved model keeps only the seed of its signs, so they must not change with NumPy: the
    first two raw words of PCG64 seeded with 0 (as NumPy 1.17 to 2.x draw them), bit by bit,
    least significant first, 1 for +1 and 0 for -1."""
    words = (0xA30FEBCFD9C2825F, 0x4510BDF882D9D721)
    expected = [1 if word >> bit & 1 else -1 for word in words for bit in range(64)]
    signs = sensing_signs(4, 32, seed=0)
    assert signs.dtype == np.int8
    np.testing.assert_array_equal(signs, np.reshape(expected, (4, 32)))
    assert 0.45 < np.mean(sensing_signs(50, 400, seed=3) > 0) < 0.55


def test_candidates_are_label_balanced_and_drawn_with_weight_one_over_rank():
    """One row per label and set: row of rank r is drawn with probability (1/r)/H_m exactly."""
    ranked = [np.arange(0, 40), np.arange(100, 140)]
    n_draws = 20_000
    sets = sample_candidates(ranked, 1, n_draws, np.random.default_rng(0))
    assert sets.shape == (n_draws, 2)
    assert np.all(sets[:, 0] < 40) and np.all(sets[:, 1] >= 100)  # one row of each label
    weights = 1.0 / np.arange(1, 41)
    expected = n_draws * weights / weights.sum()
    observed = np.bincount(sets[:, 0], minlength=40)
    assert stats.chisquare(observed, expected).pvalue > 0.01


def test_candidate_sets_draw_without_replacement_and_favour_near_rows():
    ranked = [np.arange(0, 500), np.arange(500, 1000)]
    sets = sample_candidates(ranked, 25, 400, np.random.default_rng(3))
    assert all(len(np.unique(s)) == 50 for s in sets)
    ranks = np.where(sets < 500, sets, sets - 500)
    # Nearest tenth of each label against its farthest tenth: weight 1/r puts ~6x more there.
    near, far = np.mean(ranks < 50), np.mean(ranks >= 450)
    assert near > 5 * far


def _primal_decisions(X_set, targets, queries, alpha):
    """Ridge in the primal d × d form: W = (X̃ᵀX̃ + ρI)⁻¹ X̃ᵀ(t − t̄), the dense reference."""
    X_set = X_set.astype(np.float64)
    mean = X_set.mean(0)
    centred = X_set - mean
    rho = alpha * np.sum(centred**2) / len(X_set)
    t_mean = targets.mean(0)
    W = np.linalg.solve(
        centred.T @ centred + rho * np.eye(X_set.shape[1]), centred.T @ (targets - t_mean)
    )
    return centred @ W + t_mean, (queries - mean) @ W + t_mean


def _platt_reference(decisions, positive):
    n_pos, n_neg = positive.sum(), (~positive).sum()
    t = np.where(positive, (n_pos + 1) / (n_pos + 2), 1 / (n_neg + 2))

    def loss(ab):
        z = ab[0] * decisions + ab[1]
        return np.sum(t * np.logaddexp(0, z) + (1 - t) * np.logaddexp(0, -z))

    return optimize.minimize(
        loss,
        [0.0, 0.0],
        method="Nelder-Mead",
        options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 20_000},
    ).x


@pytest.mark.parametrize("n_classes", [2, 3])
@pytest.mark.parametrize("n, d", [(60, 4), (20, 30)], ids=["primal", "dual"])
def test_local_posterior_is_platt_scaled_ridge_of_the_set(n_classes, n, d):
    X, y = _blobs(n=n, d=d, n_classes=n_classes, seed=n_classes)
    query = np.random.default_rng(5).normal(size=d)
    got = local_posteriors(X, y, n_classes, query, alpha=0.3)
    targets = local_kernels._targets(y, n_classes)
    train, at_query = _primal_decisions(X, targets, query, 0.3)
    probability = []
    for c in range(targets.shape[1]):
        a, b = _platt_reference(train[:, c], targets[:, c] > 0)
        probability.append(1 / (1 + np.exp(a * at_query[c] + b)))
    probability = np.array(probability)
    expected = (
        np.array([1 - probability[0], probability[0]])
        if n_classes == 2
        else probability / probability.sum()
    )
    np.testing.assert_allclose(got, expected, atol=1e-5)


def _weighted_platt_reference(decisions, positive, weights):
    weights = weights * len(weights) / weights.sum()
    n_pos = weights[positive].sum()
    n_neg = len(weights) - n_pos
    t = np.where(positive, (n_pos + 1) / (n_pos + 2), 1 / (n_neg + 2))

    def loss(ab):
        z = ab[0] * decisions + ab[1]
        return np.sum(weights * (t * np.logaddexp(0, z) + (1 - t) * np.logaddexp(0, -z)))

    return optimize.minimize(
        loss,
        [0.0, 0.0],
        method="Nelder-Mead",
        options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 20_000},
    ).x


@pytest.mark.parametrize("n, d", [(60, 4), (20, 30)], ids=["primal", "dual"])
def test_weighted_local_posterior_is_platt_scaled_weighted_ridge_of_the_set(n, d):
    """min Σ wᵢ(x̃ᵢw − t̃ᵢ)² + ρ‖w‖², weighted mean and ρ, solved densely; weighted Platt."""
    X, y = _blobs(n=n, d=d, seed=7)
    rng = np.random.default_rng(8)
    query, weights = rng.normal(size=d), rng.uniform(0.2, 5.0, n)
    got = local_posteriors(X, y, 2, query, alpha=0.3, row_weights=weights)
    w = weights * n / weights.sum()
    X64 = X.astype(np.float64)
    mean = (w[:, None] * X64).sum(0) / n
    centred = X64 - mean
    rho = 0.3 * (w[:, None] * centred**2).sum() / n
    t = np.where(y == 1, 1.0, -1.0)
    t_mean = (w * t).sum() / n
    coef = np.linalg.solve(centred.T @ (w[:, None] * centred) + rho * np.eye(d),
                           centred.T @ (w * (t - t_mean)))  # fmt: skip
    a, b = _weighted_platt_reference(centred @ coef + t_mean, y == 1, w)
    positive = 1 / (1 + np.exp(a * ((query - mean) @ coef + t_mean) + b))
    np.testing.assert_allclose(got, [1 - positive, positive], atol=1e-5)


@pytest.mark.parametrize("n, d", [(60, 4), (20, 30)], ids=["primal", "dual"])
def test_a_prior_shrinks_the_weighted_ridge_towards_it(n, d):
    """min Σ wᵢ(x̃ᵢw − t̃ᵢ)² + ρ‖w − prior‖², solved densely, through the same Platt fit."""
    X, y = _blobs(n=n, d=d, seed=11)
    rng = np.random.default_rng(12)
    query, weights, prior = rng.normal(size=d), rng.uniform(0.2, 5.0, n), rng.normal(size=(d, 1))
    got = local_posteriors(X, y, 2, query, alpha=0.3, row_weights=weights, prior=prior)
    w = weights * n / weights.sum()
    X64 = X.astype(np.float64)
    mean = (w[:, None] * X64).sum(0) / n
    centred = X64 - mean
    rho = 0.3 * (w[:, None] * centred**2).sum() / n
    t = np.where(y == 1, 1.0, -1.0)
    t_mean = (w * t).sum() / n
    coef = np.linalg.solve(centred.T @ (w[:, None] * centred) + rho * np.eye(d),
                           centred.T @ (w * (t - t_mean)) + rho * prior[:, 0])  # fmt: skip
    a, b = _weighted_platt_reference(centred @ coef + t_mean, y == 1, w)
    positive = 1 / (1 + np.exp(a * ((query - mean) @ coef + t_mean) + b))
    np.testing.assert_allclose(got, [1 - positive, positive], atol=1e-5)


def test_the_global_prior_is_the_weighted_ridge_of_all_rows():
    X, y = _blobs(n=200, d=5, seed=13)
    keep = np.concatenate([np.flatnonzero(y == 0)[:20], np.flatnonzero(y == 1)])
    X, y = X[keep], y[keep]
    model = PredictedNeighbourhoodClassifier(
        neighbourhood="nearest", balanced=False, class_weight="balanced",
        local_prior="global", alpha=2.0,
    ).fit(X, y)  # fmt: skip
    w = (len(y) / (2 * np.bincount(y)))[y]
    w = w * len(y) / w.sum()
    X64 = X.astype(np.float64)
    mean = (w[:, None] * X64).sum(0) / len(y)
    centred = X64 - mean
    rho = 2.0 * (w[:, None] * centred**2).sum() / len(y)
    t = np.where(y == 1, 1.0, -1.0)
    expected = np.linalg.solve(centred.T @ (w[:, None] * centred) + rho * np.eye(5),
                               centred.T @ (w * (t - (w * t).sum() / len(y))))  # fmt: skip
    np.testing.assert_allclose(model.prior()[:, 0], expected, rtol=1e-4)
    assert model.set_params(local_prior=None).prior() is None


def test_equal_row_weights_change_nothing():
    X, y = _blobs(n=40, d=5, n_classes=3, seed=9)
    query = X[0] + 0.1
    np.testing.assert_allclose(
        local_posteriors(X, y, 3, query, 0.5, row_weights=np.full(40, 3.0)),
        local_posteriors(X, y, 3, query, 0.5),
        rtol=1e-10,
    )


def test_multi_target_ridge_solves_the_dense_system_at_the_gcv_choice():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(80, 5)).astype(np.float32)
    Z = X @ rng.normal(size=(5, 3)) + 0.5 * rng.normal(size=(80, 3)) + 2.0
    grid = (1e-3, 1e-2, 1e-1, 1.0, 10.0)
    coef, _, z_mean, rho = multi_target_ridge(X, Z, grid)
    Xc, Zc = X - X.mean(0), Z - Z.mean(0)
    G = Xc.T.astype(np.float64) @ Xc
    scale = np.trace(G) / 5

    def gcv(r):
        hat = Xc @ np.linalg.solve(G + r * np.eye(5), Xc.T)
        residual = Zc - hat @ Zc
        return np.sum(residual**2) / 80 / (1 - np.trace(hat) / 80) ** 2

    best = scale * grid[int(np.argmin([gcv(scale * g) for g in grid]))]
    assert rho == pytest.approx(best)
    np.testing.assert_allclose(coef, np.linalg.solve(G + rho * np.eye(5), Xc.T @ Zc), rtol=1e-4)
    np.testing.assert_allclose(z_mean, Z.mean(0))


def test_a_perfect_predicted_neighbourhood_trains_exactly_on_that_set():
    X, y = _blobs()
    chosen = np.concatenate([np.flatnonzero(y == 0)[:15], np.flatnonzero(y == 1)[5:20]])
    confidences = np.zeros((1, len(X)))
    confidences[0, chosen] = np.linspace(2, 1, len(chosen))
    query = X[200:201]
    got, sizes = predict_from_confidences(X, y, 2, query, confidences, (30,), alpha=1.0)
    np.testing.assert_array_equal(got[0], local_posteriors(X[chosen], y[chosen], 2, query[0], 1.0))
    assert sizes[0] == 30


def test_a_one_label_neighbourhood_answers_that_label_without_fitting(monkeypatch):
    X, y = _blobs()
    confidences = np.where(y == 1, 1.0, 0.0)[None, :]

    def no_fit(*args, **kwargs):
        raise AssertionError("a local classifier was fitted")

    monkeypatch.setattr(local, "local_posteriors", no_fit)
    got, _ = predict_from_confidences(X, y, 2, X[:1], confidences, (20, 40), alpha=1.0)
    np.testing.assert_array_equal(got, [[0.0, 1.0]])


def _fitted(**params):
    X, y = _blobs(n=300)
    params = {
        "n_neighbourhoods": 60,
        "sizes": (10, 20),
        "n_samples": 3,
        "random_state": 0,
        **params,
    }
    return PredictedNeighbourhoodClassifier(**params).fit(X, y), X, y


def test_target_neighbourhoods_are_balanced_hold_their_size_and_exclude_the_instance():
    model, _, y = _fitted()
    bounds = model.neighbourhood_indptr_
    for n, instance in enumerate(model.neighbourhood_instances_):
        members = model.neighbourhood_members_[bounds[n] : bounds[n + 1]]
        assert len(members) == model.neighbourhood_sizes_[n]
        assert np.bincount(y[members], minlength=2).tolist() == [len(members) // 2] * 2
        assert instance not in members


def test_unbalanced_targets_draw_from_all_rows_and_weigh_labels_by_their_rarity():
    X, y = _blobs(n=300)
    rare = np.flatnonzero(y == 0)[:30]
    keep = np.sort(np.concatenate([rare, np.flatnonzero(y == 1)]))
    X, y = X[keep], y[keep]
    model = PredictedNeighbourhoodClassifier(
        n_neighbourhoods=60, sizes=(10, 20), n_samples=3, balanced=False,
        class_weight="balanced", random_state=0,
    ).fit(X, y)  # fmt: skip
    counts = np.bincount(y)
    np.testing.assert_allclose(model.label_weights(), len(y) / (2 * counts))
    bounds = model.neighbourhood_indptr_
    shares = []
    for n in range(len(model.neighbourhood_instances_)):
        members = model.neighbourhood_members_[bounds[n] : bounds[n + 1]]
        assert len(members) == model.neighbourhood_sizes_[n]
        shares.append(np.mean(y[members] == 0))
    # Drawn by rank among all rows, the rare label is nowhere near half of every target.
    assert np.mean(shares) < 0.35


def test_neighbourhoods_do_not_depend_on_how_instances_are_blocked(monkeypatch):
    first, _, _ = _fitted()
    monkeypatch.setattr(local, "INSTANCES_PER_BLOCK", 7)
    second, _, _ = _fitted()
    np.testing.assert_array_equal(first.neighbourhood_members_, second.neighbourhood_members_)
    np.testing.assert_array_equal(first.regression_coef_, second.regression_coef_)


@pytest.mark.parametrize("compression", [None, 0.3])
def test_regression_targets_are_the_indicators_or_their_compression(compression):
    model, X, _ = _fitted(compression=compression)
    bounds = model.neighbourhood_indptr_
    indicators = np.zeros((len(model.neighbourhood_instances_), len(X)))
    for n in range(len(indicators)):
        indicators[n, model.neighbourhood_members_[bounds[n] : bounds[n + 1]]] = 1.0
    targets = model.regression_targets()
    if compression is None:
        assert model.sensing_matrix() is None
        np.testing.assert_array_equal(targets, indicators)
    else:
        phi = model.sensing_matrix() / np.sqrt(len(model.sensing_matrix()))
        assert phi.shape == (round(0.3 * len(X)), len(X))
        np.testing.assert_allclose(targets, indicators @ phi.T, atol=1e-5)
    assert model.regression_coef_.shape == (X.shape[1], targets.shape[1])


def test_refitting_the_regression_with_compression_equals_fitting_with_it():
    compressed, X, _ = _fitted(compression=0.3)
    refitted, _, _ = _fitted()
    refitted.set_params(compression=0.3).fit_regression()
    np.testing.assert_array_equal(refitted.sensing_matrix(), compressed.sensing_matrix())
    np.testing.assert_array_equal(refitted.regression_coef_, compressed.regression_coef_)
    np.testing.assert_array_equal(refitted.predict_proba(X[:20]), compressed.predict_proba(X[:20]))


@pytest.mark.parametrize(
    "neighbourhood, compression",
    [("predicted", None), ("predicted", 0.3), ("nearest", None)],
)
def test_dask_queries_give_the_numpy_posteriors(neighbourhood, compression):
    model, X, _ = _fitted(neighbourhood=neighbourhood, compression=compression)
    expected = model.predict_proba(X[:50])
    lazy = model.predict_proba(da.from_array(X[:50], chunks=17))
    assert isinstance(lazy, da.Array)
    np.testing.assert_array_equal(lazy.compute(), expected)
    np.testing.assert_array_equal(model.predict(X[:50]), model.classes_[expected.argmax(1)])


def test_nearest_neighbourhood_is_the_k_over_c_nearest_rows_of_each_label():
    X, y = _blobs()
    model = PredictedNeighbourhoodClassifier(neighbourhood="nearest", sizes=(20,)).fit(X, y)
    query = X[7] + 0.1
    distance = ((X - query) ** 2).sum(1)
    nearest = np.concatenate(
        [np.flatnonzero(y == c)[np.argsort(distance[y == c])[:10]] for c in (0, 1)]
    )
    expected = local_posteriors(X[np.sort(nearest)], y[np.sort(nearest)], 2, query, 1.0)
    np.testing.assert_allclose(model.predict_proba(query[None])[0], expected, atol=1e-6)


def test_multiclass_labels_are_predicted():
    X, y = _blobs(n=300, n_classes=3)
    labels = np.array(["a", "b", "c"])[y]
    model = PredictedNeighbourhoodClassifier(
        n_neighbourhoods=60, sizes=(15, 30), n_samples=3, random_state=0
    ).fit(X, labels)
    assert model.predict_proba(X[:40]).shape == (40, 3)
    assert np.mean(model.predict(X[:40]) == labels[:40]) > 0.8


def test_one_class_training_data_is_refused():
    X, _ = _blobs()
    with pytest.raises(ValueError, match="1 class"):
        PredictedNeighbourhoodClassifier().fit(X, np.zeros(len(X), dtype=int))


def test_more_neighbourhoods_than_rows_is_refused():
    X, y = _blobs(n=50)
    with pytest.raises(ValueError, match="n_neighbourhoods=60 exceeds the 50"):
        PredictedNeighbourhoodClassifier(n_neighbourhoods=60, sizes=(10,)).fit(X, y)
