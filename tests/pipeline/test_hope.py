"""en-HOPE (paper 003): objective against a dense reference of eqs. 5–8, gradients against finite
differences, streaming passes against the in-memory pass, kNN against brute force."""

import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.decomposition import PCA
from sklearn.neighbors import KNeighborsClassifier

from imgscale.pipeline.classify import ExemplarHOPE
from imgscale.pipeline.classify.hope_exemplars import exemplar_knn_scores, exemplars_per_class
from imgscale.pipeline.classify.hope_network import Layout, Network, Problem, initial_blocks
from tests.pipeline.embed.conftest import as_dask

H, F, M, h, N_CLASSES = 5, 4, 3, 2, 3


def dense_embedding(X, C, W, b, V, mean, scale):
    """Eq. 5 written out: x′ = [s(x − μ); 1], y_s = Σ_k V_sk σ(Σ_f W_fk (C_fᵀx′)² + b_k)."""
    Xp = np.hstack([scale * (X - mean), np.ones((len(X), 1))])
    with np.errstate(over="ignore"):  # exp(−u) = inf for u ≪ 0 gives σ = 0 exactly
        hidden = 1 / (1 + np.exp(-(np.einsum("nd,df->nf", Xp, C) ** 2 @ W + b)))
    return hidden @ V.T


def dense_cross_entropy(X, labels, E_scaled, exemplar_labels, C, W, b, V, mean, scale):
    """−Σ_ij p_{j|i} log q_{j|i} / n − log n of eqs. 6–8 (the KL divergence without the entropy
    of p): p_{j|i} = [L_i = L_j]/z_{L_i}, q_{j|i} = t_ij / Σ_ik t_ik, t = (1 + d)⁻¹."""
    Y = dense_embedding(X, C, W, b, V, mean, scale)
    Ye = dense_embedding(E_scaled / scale + mean, C, W, b, V, mean, scale)
    t = 1 / (1 + ((Y[:, None, :] - Ye[None]) ** 2).sum(axis=2))
    q = t / t.sum()
    same = labels[:, None] == exemplar_labels[None]
    p = same / same.sum(axis=1, keepdims=True)
    return -(p * np.log(q)).sum() / len(X) - np.log(len(X))


@pytest.fixture
def problem():
    """Float64 problem with learned exemplars (so every block is in θ), 40 rows, 3 classes with
    1, 2 and 2 exemplars."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(40, H)) * 3 + 1
    labels = rng.integers(0, N_CLASSES, len(X))
    exemplar_labels = np.array([0, 1, 1, 2, 2])
    layout = Layout(H, F, M, h, len(exemplar_labels), learn_exemplars=True)
    targets = (np.arange(N_CLASSES)[:, None] == exemplar_labels[None]).astype(float)
    targets /= targets.sum(axis=1, keepdims=True)
    mean, scale = X.mean(axis=0), 0.4
    prob = Problem(layout, mean, scale, targets, None, dtype=np.float64)
    E = rng.normal(size=(len(exemplar_labels), H))
    theta = layout.pack(initial_blocks(layout, E, np.random.RandomState(0)))
    theta += rng.normal(size=theta.shape) * 0.3  # b ≠ 0, exemplars moved
    return prob, X, labels, exemplar_labels, theta


def test_objective_equals_dense_cross_entropy_of_eqs_6_to_8(problem):
    prob, X, labels, exemplar_labels, theta = problem
    loss, _ = prob.objective(X, labels, theta)
    blocks = prob.layout.unpack(theta)
    expected = dense_cross_entropy(
        X, labels, blocks["E"], exemplar_labels, blocks["C"], blocks["W"], blocks["b"],
        blocks["V"], prob.mean, prob.scale,
    )  # fmt: skip
    assert loss == pytest.approx(expected, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("block", ["C", "W", "b", "V", "E"])
def test_gradient_of_each_block_matches_finite_differences_of_the_dense_cross_entropy(
    problem, block
):
    prob, X, labels, exemplar_labels, theta = problem
    _, grad = prob.objective(X, labels, theta)
    layout = prob.layout

    def dense(t):
        bl = layout.unpack(t)
        return dense_cross_entropy(
            X, labels, bl["E"], exemplar_labels, bl["C"], bl["W"], bl["b"], bl["V"],
            prob.mean, prob.scale,
        )  # fmt: skip

    start = 0
    for name, shape in layout.shapes().items():
        if name == block:
            break
        start += int(np.prod(shape))
    size = int(np.prod(layout.shapes()[block]))
    eps = 1e-6
    numeric = np.empty(size)
    for i in range(size):
        step = np.zeros_like(theta)
        step[start + i] = eps
        numeric[i] = (dense(theta + step) - dense(theta - step)) / (2 * eps)
    np.testing.assert_allclose(grad[start : start + size], numeric, rtol=1e-6, atol=1e-9)
    assert np.abs(numeric).max() > 1e-4  # the block matters: the check is not vacuous


def test_pass_over_3_chunks_equals_in_memory_gradient(problem):
    prob, X, labels, _, theta = problem
    labels = labels.copy()
    labels[::7] = -1  # unlabelled rows are left out of both
    loss, grad = prob.objective(X, labels, theta)
    chunked = as_dask(X, rows=14)
    assert chunked.numblocks[0] == 3
    loss_dask, grad_dask = prob.objective(chunked, labels, theta)
    assert loss_dask == pytest.approx(loss, rel=1e-12)
    np.testing.assert_allclose(grad_dask, grad, rtol=1e-10, atol=1e-14)
    keep = labels >= 0
    loss_kept, grad_kept = prob.objective(X[keep], labels[keep], theta)
    assert loss_kept == pytest.approx(loss, rel=1e-12)
    np.testing.assert_allclose(grad_kept, grad, rtol=1e-10, atol=1e-14)


def test_minibatch_objective_with_one_backward_pass_equals_the_streaming_pass(problem):
    prob, X, labels, _, theta = problem
    labels = labels.copy()
    labels[::5] = -1
    loss, grad = prob.objective(as_dask(X, rows=14), labels, theta)
    loss_batch, grad_batch = prob.batch_objective(X, labels, theta)
    assert loss_batch == pytest.approx(loss, rel=1e-12)
    np.testing.assert_allclose(grad_batch, grad, rtol=1e-10, atol=1e-14)


def test_float32_pass_matches_float64_gradient(problem):
    prob, X, labels, _, theta = problem
    _, grad = prob.objective(X, labels, theta)
    prob32 = Problem(prob.layout, prob.mean, prob.scale, prob.targets, None, dtype=np.float32)
    _, grad32 = prob32.objective(X.astype(np.float32), labels, theta)
    np.testing.assert_allclose(grad32, grad, rtol=1e-3, atol=1e-5 * np.abs(grad).max())


def test_float32_embedding_of_saturated_units_matches_the_dense_reference():
    """Trained units saturate (pre-activations of ±1,000): σ must stay exact there in float32."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(200, H))
    C, W = rng.normal(size=(H + 1, F)) * 8, rng.normal(size=(F, M)) * 4
    b, V = rng.normal(size=M) * 50, rng.normal(size=(h, M))
    pre_activation = (np.hstack([X, np.ones((len(X), 1))]) @ C) ** 2 @ W + b
    assert np.abs(pre_activation).max() > 500 and (np.abs(pre_activation) < 5).any()
    net = Network(*(a.astype(np.float32) for a in (C[:-1], C[-1], W, b, V)))
    expected = dense_embedding(X, C, W, b, V, np.zeros(H), 1.0)
    np.testing.assert_allclose(net.embed(X.astype(np.float32)), expected, rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def digits():
    d = load_digits()
    X, y = d.data.astype(np.float32), d.target
    return X[:1400], y[:1400], X[1400:], y[1400:]


SMALL = {"n_factors": 60, "n_hidden": 30, "n_exemplars": 10, "random_state": 0}


def test_lbfgs_objective_decreases_monotonically(digits):
    X, y, _, _ = digits
    model = ExemplarHOPE(
        **SMALL, solver="lbfgs", max_iter=15, validate_every=20, n_iter_no_change=99
    )
    model.fit(X[:400], y[:400])
    trace = np.array(model.objective_)
    assert len(trace) == 16  # the start and each of the 15 iterations
    assert np.all(np.diff(trace) <= 0)
    assert trace[-1] < trace[0] - 0.1


@pytest.mark.parametrize(
    "schedule, steps",
    [("adaptive", [1, 1, 1, 1 / 2, 1 / 2, 1 / 4, 1 / 4]), ("constant", [1] * 7)],
)
def test_adaptive_schedule_halves_the_step_after_two_validations_without_improvement(
    digits, monkeypatch, schedule, steps
):
    """With a constant gradient Adam moves every parameter by exactly its step; the validation
    error never improves after the first validation, so the run stops at the 8th (7 stale).
    The first 7 steps are compared, in units of the initial step."""
    X, y, _, _ = digits
    thetas = []

    def constant_gradient(self, rows, labels, theta):
        thetas.append(theta.copy())
        return 0.0, np.ones_like(theta)

    monkeypatch.setattr(Problem, "batch_objective", constant_gradient)
    monkeypatch.setattr(ExemplarHOPE, "_validation_error", lambda self, theta: 0.5)
    model = ExemplarHOPE(
        **SMALL, learning_rate=1e-2, learning_rate_schedule=schedule, max_iter=50,
        validate_every=1, n_iter_no_change=7, weight_decay=0,
    )  # fmt: skip
    model.fit(X[:300], y[:300])
    assert model.n_iter_ == 8
    moved = -np.diff(np.array(thetas), axis=0)[:, 0] / 1e-2
    np.testing.assert_allclose(moved, steps, rtol=1e-6)


def test_weight_decay_shrinks_c_w_and_v_but_not_b_or_the_exemplars(digits, monkeypatch):
    """With a zero gradient an AdamW step only decays: C, W, V by (1 − rate·decay) each step."""
    X, y, _, _ = digits
    monkeypatch.setattr(
        Problem, "batch_objective", lambda self, rows, labels, theta: (0.0, np.zeros_like(theta))
    )
    rate, decay, steps = 1e-2, 3.0, 7
    params = {**SMALL, "exemplar_init": "learned", "learning_rate": rate, "averaging": 0}
    start = ExemplarHOPE(**params, max_iter=0).fit(X[:300], y[:300])
    model = ExemplarHOPE(**params, weight_decay=decay, max_iter=steps, validate_every=steps).fit(
        X[:300], y[:300]
    )
    shrink = (1 - rate * decay) ** steps
    for name in ("factors_", "hidden_weights_", "output_weights_"):
        np.testing.assert_allclose(getattr(model, name), shrink * getattr(start, name), rtol=1e-5)
    np.testing.assert_array_equal(model.hidden_bias_, start.hidden_bias_)
    np.testing.assert_allclose(model.exemplars_, start.exemplars_, rtol=1e-6)


def test_validation_sees_the_bias_corrected_average_of_the_iterates(digits, monkeypatch):
    """A constant gradient moves θ by exactly −rate per step (Adam's normalised step), so the
    t-th iterate is θ₀ − t·rate and their average with weights d^(T − t) is known in closed form."""
    X, y, _, _ = digits
    rate, decay, steps = 1e-2, 0.9, 6
    first_theta, validated = [], []

    def constant_gradient(self, rows, labels, theta):
        first_theta.append(theta.copy())
        return 0.0, np.ones_like(theta)

    def record_validated(self, theta):
        validated.append(theta.copy())
        return 0.5

    monkeypatch.setattr(Problem, "batch_objective", constant_gradient)
    monkeypatch.setattr(ExemplarHOPE, "_validation_error", record_validated)
    ExemplarHOPE(
        **SMALL, learning_rate=rate, averaging=decay, weight_decay=0,
        learning_rate_schedule="constant", max_iter=steps, validate_every=steps,
    ).fit(X[:300], y[:300])  # fmt: skip
    t = np.arange(1, steps + 1)
    weights = decay ** (steps - t)
    expected = first_theta[0] - rate * np.sum(weights * t) / weights.sum()
    np.testing.assert_allclose(validated[-1], expected, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("dropout", [0.0, 0.25])
def test_input_dropout_zeroes_that_fraction_of_features_and_rescales_the_rest(
    digits, monkeypatch, dropout
):
    X, y, _, _ = digits
    X = X[:300] + 1  # integer features 1..17: a 0 can only come from dropout
    seen = []

    def record_rows(self, rows, labels, theta):
        seen.append(rows.copy())
        return 0.0, np.zeros_like(theta)

    monkeypatch.setattr(Problem, "batch_objective", record_rows)
    ExemplarHOPE(
        **SMALL, input_dropout=dropout, max_iter=20, batch_size=100, validate_every=10
    ).fit(X, y[:300])
    rows = np.concatenate(seen)
    dropped = rows == 0
    assert abs(dropped.mean() - dropout) < 0.01
    kept = rows[~dropped] * (1 - dropout)
    np.testing.assert_allclose(kept, np.round(kept), atol=1e-5)
    assert kept.min() > 0.999 and kept.max() < 17.001


def test_lbfgs_never_drops_features(digits):
    X, y, _, _ = digits
    fits = [
        ExemplarHOPE(**SMALL, solver="lbfgs", input_dropout=p, max_iter=3).fit(X[:300], y[:300])
        for p in (0.0, 0.5)
    ]
    np.testing.assert_array_equal(fits[0].factors_, fits[1].factors_)


@pytest.mark.parametrize(
    "param, value, message",
    [
        ("input_dropout", -0.1, "input_dropout must be in"),
        ("input_dropout", 1.0, "input_dropout must be in"),
        ("averaging", 1.0, "averaging must be in"),
        ("weight_decay", -1.0, "weight_decay must be non-negative"),
    ],
)
def test_bad_regulariser_is_refused(digits, param, value, message):
    X, y, _, _ = digits
    with pytest.raises(ValueError, match=message):
        ExemplarHOPE(**SMALL, **{param: value}).fit(X[:300], y[:300])


def test_unknown_learning_rate_schedule_is_refused(digits):
    X, y, _, _ = digits
    with pytest.raises(ValueError, match="learning_rate_schedule must be one of adaptive"):
        ExemplarHOPE(**SMALL, learning_rate_schedule="cosine").fit(X[:100], y[:100])


def test_learned_2d_embedding_beats_pca_2d_knn_on_digits(digits):
    X, y, X_test, y_test = digits
    model = ExemplarHOPE(**SMALL, exemplar_init="learned", learning_rate=1e-2, batch_size=500)
    model.set_params(max_iter=400, validate_every=50).fit(X, y)
    error = np.mean(model.predict(X_test) != y_test)
    pca = PCA(2).fit(X)
    knn = KNeighborsClassifier(1).fit(pca.transform(X), y)
    pca_error = np.mean(knn.predict(pca.transform(X_test)) != y_test)
    assert error < 0.15 < pca_error
    assert model.embedded_exemplars_.shape == (10, 2)
    assert model.exemplars_.shape == (10, 64)


def test_exemplar_knn_equals_brute_force_votes():
    rng = np.random.default_rng(3)
    Y, Ye = rng.normal(size=(500, 2)), rng.normal(size=(12, 2))
    exemplar_class = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2, 3, 3, 3])
    starts = np.array([0, 3, 5, 9, 12])
    for k in (1, 3, 5):
        scores = exemplar_knn_scores(Y, Ye, starts, k)
        for i in range(len(Y)):
            d = ((Y[i] - Ye) ** 2).sum(axis=1)
            votes = np.bincount(exemplar_class[np.argsort(d)[:k]], minlength=4)
            best = np.flatnonzero(votes == votes.max())
            # ties go to the class with the nearest exemplar
            nearest = [d[exemplar_class == c].min() for c in best]
            assert np.argmax(scores[i]) == best[np.argmin(nearest)]
    sklearn_1nn = KNeighborsClassifier(1).fit(Ye, exemplar_class).predict(Y)
    np.testing.assert_array_equal(np.argmax(exemplar_knn_scores(Y, Ye, starts, 1), 1), sklearn_1nn)


@pytest.fixture(scope="module")
def fitted(digits):
    X, y, _, _ = digits
    return ExemplarHOPE(**SMALL, max_iter=50, validate_every=25).fit(X, y)


def test_predict_is_brute_force_knn_against_the_embedded_exemplars(fitted, digits):
    _, _, X_test, _ = digits
    Y = fitted.transform(X_test)
    Ye = fitted.embedded_exemplars_
    assert fitted.n_neighbors_ == 1  # one exemplar per class (§4)
    nearest = ((Y[:, None] - Ye[None]) ** 2).sum(axis=2).argmin(axis=1)
    np.testing.assert_array_equal(fitted.predict(X_test), fitted.exemplar_labels_[nearest])
    top = fitted.predict_top_k(X_test, k=3)
    np.testing.assert_array_equal(top[:, 0], fitted.predict(X_test))


def test_dask_input_gives_the_same_embedding_and_predictions(fitted, digits):
    _, _, X_test, _ = digits
    lazy = fitted.transform(as_dask(X_test))
    np.testing.assert_allclose(lazy.compute(), fitted.transform(X_test), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(fitted.predict(as_dask(X_test)).compute(), fitted.predict(X_test))


def test_fit_on_dask_rows_follows_the_fit_on_numpy(digits):
    X, y, _, _ = digits
    params = {**SMALL, "solver": "lbfgs", "max_iter": 4, "validate_every": 20}
    a = ExemplarHOPE(**params).fit(X[:300], y[:300])
    b = ExemplarHOPE(**params).fit(as_dask(X[:300], rows=110), y[:300])
    # Same held-out rows, exemplars and start; float32 passes summed in another order.
    np.testing.assert_array_equal(b.exemplars_, a.exemplars_)
    assert len(a.objective_) == 5
    np.testing.assert_allclose(b.objective_, a.objective_, rtol=1e-4)


def test_exemplars_are_shared_in_proportion_to_class_rows():
    np.testing.assert_array_equal(exemplars_per_class(np.array([50, 30, 20]), 10), [5, 3, 2])
    np.testing.assert_array_equal(exemplars_per_class(np.array([1000, 10, 10]), 3), [1, 1, 1])


@pytest.mark.parametrize(
    ("n_exemplars", "message"),
    [
        (0, "at least one exemplar for each of the 2 classes"),
        (5, "gives class 7 3 exemplars but it has only 2 labelled rows"),
    ],
)
def test_bad_number_of_exemplars_is_refused(n_exemplars, message):
    with pytest.raises(ValueError, match=message):
        exemplars_per_class(np.array([2, 2]), n_exemplars, np.array([7, 9]))
    X = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    y = np.array([7, 7, 9, 9])
    with pytest.raises(ValueError, match=message):
        ExemplarHOPE(n_exemplars=n_exemplars).fit(X, y)


def test_unlabelled_rows_only_are_refused():
    X = np.zeros((10, 3), np.float32)
    with pytest.raises(ValueError, match="at least 2 classes"):
        ExemplarHOPE().fit(X, np.full(10, -1))
