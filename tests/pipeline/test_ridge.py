"""RidgeClassifier (paper 000 §3.3) vs sklearn Ridge on rows centred on the mean of all rows."""

import dask
import dask.array as da
import numpy as np
import pytest
from sklearn.linear_model import Ridge

from imgscale.pipeline.classify import RidgeClassifier, ridge
from imgscale.pipeline.classify.ridge import RHO_GRID
from imgscale.pipeline.compute import use_executor
from imgscale.pipeline.metrics import per_class_rate
from tests.pipeline.conftest import N_CLASSES, N_FEATURES, as_dask, computing_with


def reference_weights(X, y, rho):
    """sklearn Ridge without intercept on (X_l − mean of all rows, one-hot Y): D × C."""
    X64 = X.astype(np.float64)
    labelled = y >= 0
    centred = X64[labelled] - X64.mean(axis=0)
    targets = np.eye(N_CLASSES)[y[labelled]]
    return Ridge(alpha=rho, fit_intercept=False).fit(centred, targets).coef_.T


def assert_rel_close(actual, expected, rtol=1e-5):
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * np.abs(expected).max())


# Both Gram precisions hold the same tolerance against sklearn on these rows (the float32 one
# at ~1e-6, see pipeline.gram), at every ρ of the grid.
PRECISIONS = ["float64", "float32"]


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("rho", RHO_GRID)
def test_coef_equals_sklearn_ridge_on_centred_numpy_rows(data, rho, precision):
    X, y = data
    model = RidgeClassifier(rho=rho, gram_precision=precision).fit(X, y)
    assert_rel_close(model.coef_.T, reference_weights(X, y, rho))


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("rho", RHO_GRID)
def test_coef_equals_sklearn_ridge_on_centred_dask_rows(data, rho, precision):
    X, y = data
    model = RidgeClassifier(rho=rho, gram_precision=precision).fit(as_dask(X), as_dask(y))
    assert_rel_close(model.coef_.T, reference_weights(X, y, rho))


def test_float32_gram_partial_fit_in_pieces_equals_sklearn(data):
    X, y = data
    model = RidgeClassifier(rho=0.2, gram_precision="float32")
    for piece in np.array_split(np.arange(len(X)), 3):
        model.partial_fit(as_dask(X[piece]), y[piece], classes=np.arange(N_CLASSES))
    assert_rel_close(model.coef_.T, reference_weights(X, y, 0.2))


def test_unknown_gram_precision_is_rejected_before_any_work(data):
    X, y = data
    with pytest.raises(ValueError, match="gram_precision"):
        RidgeClassifier(gram_precision="float16").fit(X, y)


def test_mean_includes_unlabelled_rows(data):
    X, y = data
    model = RidgeClassifier().fit(X, y)
    np.testing.assert_allclose(model.mean_, X.astype(np.float64).mean(axis=0), rtol=1e-12)


def test_decision_function_is_centred_rows_times_weights(data):
    X, y = data
    model = RidgeClassifier(rho=2.0).fit(X, y)
    expected = (X.astype(np.float64) - X.mean(axis=0, dtype=np.float64)) @ reference_weights(
        X, y, 2.0
    )
    assert_rel_close(model.decision_function(X), expected, rtol=1e-4)


def brute_force_gcv(X, y, rho):
    """Golub–Heath–Wahba GCV from the explicit hat matrix of the centred labelled rows."""
    labelled = y >= 0
    centred = X[labelled].astype(np.float64) - X.astype(np.float64).mean(axis=0)
    targets = np.eye(N_CLASSES)[y[labelled]]
    n, d = centred.shape
    hat = centred @ np.linalg.solve(centred.T @ centred + rho * np.eye(d), centred.T)
    rss = ((targets - hat @ targets) ** 2).sum()
    return (rss / n) / (1 - np.trace(hat) / n) ** 2


def test_gcv_scores_equal_brute_force_hat_matrix_gcv(data):
    X, y = data
    model = RidgeClassifier().fit(X, y)
    expected = [brute_force_gcv(X, y, rho) for rho in RHO_GRID]
    np.testing.assert_allclose(model.rho_scores_, expected, rtol=1e-8)


def test_without_validation_rows_rho_minimises_gcv(data):
    X, y = data
    grid = (1e-3, 1.0, 30.0, 300.0, 1e4)  # brute-force GCV is smallest at 30 on this data
    model = RidgeClassifier(rho_grid=grid).fit(X, y)
    assert model.rho_selection_ == "gcv"
    assert model.rho_ == 30.0 == grid[np.argmin([brute_force_gcv(X, y, r) for r in grid])]


def reference_validation_error(X, y, X_val, y_val, rho):
    """Mean over the labelled validation rows of ‖(x − μ)ᵀW − y‖², from the rows themselves:
    W by sklearn on the training rows (`reference_weights`, over the classes they have), a row
    of another class targeting zero in every column."""
    classes = np.unique(y[y >= 0])
    weights = reference_weights(X, y, rho)[:, classes]
    labelled = y_val >= 0
    scores = (X_val[labelled].astype(np.float64) - X.astype(np.float64).mean(axis=0)) @ weights
    targets = (y_val[labelled][:, None] == classes[None, :]).astype(np.float64)
    return ((scores - targets) ** 2).sum(axis=1).mean()


def test_validation_scores_are_the_squared_errors_of_each_grid_model(data):
    """Computed from the validation rows' statistics alone, equal to the error of each grid
    value's model on the rows; also with validation rows of a class the model does not have."""
    X, y = data
    X_val, y_val = X[::2], y[::2]
    train = np.arange(len(y)) % 2 == 1
    X, y = X[train], np.where(y[train] == 4, -1, y[train])  # class 4 in validation rows only
    model = RidgeClassifier().fit(X, y, X_val=X_val, y_val=y_val)
    expected = [reference_validation_error(X, y, X_val, y_val, rho) for rho in RHO_GRID]
    np.testing.assert_allclose(model.rho_scores_, expected, rtol=1e-6)
    assert len(set(np.round(expected, 3))) > 1
    assert model.rho_selection_ == "validation"
    assert model.rho_ == RHO_GRID[int(np.argmin(expected))]
    assert model.validation_class_counts_.tolist() == np.bincount(y_val[y_val >= 0]).tolist()


def test_validation_statistics_follow_added_and_removed_validation_rows(data):
    """`update` with validation rows added and removed chooses ρ as a fit on the rows as they
    then are, from the kept statistics and the changed rows only."""
    X, y = data
    grid = (1e-3, 30.0, 1e3, 3e4)
    model = RidgeClassifier(rho_grid=grid).fit(X[:200], y[:200], X_val=X[200:300], y_val=y[200:300])
    none = (X[:0], y[:0])
    model.update(none, none, (X[300:], y[300:]), (X[200:240], y[200:240]))
    fresh = RidgeClassifier(rho_grid=grid).fit(X[:200], y[:200], X_val=X[240:], y_val=y[240:])
    np.testing.assert_allclose(model.rho_scores_, fresh.rho_scores_, rtol=1e-9)
    assert model.rho_ == fresh.rho_
    np.testing.assert_allclose(model.validation_gram_, fresh.validation_gram_, rtol=1e-9)
    model.update(none, none, None, (X[240:], y[240:]))  # no validation row is left: GCV
    assert model.rho_selection_ == "gcv" and not hasattr(model, "validation_gram_")


def test_an_update_sums_the_changed_rows_of_both_splits_in_one_graph(data):
    """Training and validation rows added and removed (dask rows, as a store gives them) are
    summed in one computation, and the result is the fit on the rows as they then are."""
    X, y = data
    grid = (1e-3, 30.0, 1e3, 3e4)
    model = RidgeClassifier(rho_grid=grid).fit(X[:200], y[:200], X_val=X[200:300], y_val=y[200:300])
    computations = []

    def counted(*collections):
        computations.append(len(collections))
        return dask.compute(*collections)

    def rows(start, stop):
        return as_dask(X[start:stop], rows=13), y[start:stop]

    with use_executor(computing_with(counted)):
        model.update(rows(300, 340), rows(0, 40), rows(340, 420), rows(200, 240))
    assert computations == [4]
    fresh = RidgeClassifier(rho_grid=grid).fit(
        np.vstack([X[40:200], X[300:340]]),
        np.concatenate([y[40:200], y[300:340]]),
        X_val=np.vstack([X[240:300], X[340:420]]),
        y_val=np.concatenate([y[240:300], y[340:420]]),
    )
    assert model.rho_ == fresh.rho_
    np.testing.assert_allclose(model.rho_scores_, fresh.rho_scores_, rtol=1e-9)
    assert_rel_close(model.coef_, fresh.coef_)
    np.testing.assert_allclose(model.mean_, fresh.mean_, rtol=1e-9)


@pytest.mark.parametrize("block_rows", [None, 7], ids=["one-block", "blocks-of-7-rows"])
def test_rate_criterion_scores_are_per_class_rates_of_each_grid_model(
    data, block_rows, monkeypatch
):
    """Also scored 7 rows at a time: blocks of labelled rows and blocks with unlabelled ones."""
    if block_rows:
        monkeypatch.setattr(ridge, "_GRID_SCORE_BYTES", 1)
        monkeypatch.setattr(ridge, "_GRID_MIN_ROWS", block_rows)
    X, y = data
    X_val, y_val = X[::2], y[::2]
    model = RidgeClassifier(rho_criterion="rate").fit(X[1::2], y[1::2], X_val=X_val, y_val=y_val)
    labelled = y_val >= 0
    expected = [
        per_class_rate(
            y_val[labelled],
            RidgeClassifier(rho=rho).fit(X[1::2], y[1::2]).predict(X_val[labelled]),
        )
        for rho in RHO_GRID
    ]
    np.testing.assert_allclose(model.rho_scores_, expected)
    assert model.rho_selection_ == "validation" and not hasattr(model, "validation_gram_")
    assert model.rho_ == RHO_GRID[int(np.argmax(expected))]
    none = (X[:0], y[:0])
    model.update(none, none, (X[::3], y[::3]))  # the rate scores every validation row again
    again = RidgeClassifier(rho_criterion="rate").fit(X[1::2], y[1::2], X_val=X[::3], y_val=y[::3])
    np.testing.assert_allclose(model.rho_scores_, again.rho_scores_)
    with pytest.raises(ValueError, match="pass all validation rows as validation_added"):
        model.update(none, none, (X[::3], y[::3]), (X[:3], y[:3]))


def test_unknown_rho_criterion_is_rejected_before_any_work(data):
    X, y = data
    with pytest.raises(ValueError, match="rho_criterion must be one of"):
        RidgeClassifier(rho_criterion="accuracy").fit(X, y, X_val=X, y_val=y)


def test_validation_on_dask_rows_equals_numpy(data):
    X, y = data
    grid = (1e-3, 30.0, 1e3, 3e4)  # spread so that the rates differ
    on_numpy = RidgeClassifier(rho_grid=grid).fit(X, y, X_val=X[::3], y_val=y[::3])
    on_dask = RidgeClassifier(rho_grid=grid).fit(
        as_dask(X), y, X_val=as_dask(X[::3], rows=31), y_val=as_dask(y[::3], rows=31)
    )
    np.testing.assert_allclose(on_dask.rho_scores_, on_numpy.rho_scores_)
    assert len(set(on_numpy.rho_scores_)) > 1


def test_fixed_rho_is_used_even_with_validation_rows(data):
    X, y = data
    model = RidgeClassifier(rho=0.2).fit(X, y, X_val=X, y_val=y)
    assert (model.rho_, model.rho_selection_) == (0.2, "fixed")


def test_partial_fit_in_pieces_equals_one_fit(data):
    X, y = data
    whole = RidgeClassifier().fit(X, y)
    pieces = RidgeClassifier()
    for rows in np.array_split(np.arange(len(X)), 3):
        pieces.partial_fit(X[rows], y[rows], classes=np.arange(N_CLASSES))
    assert pieces.rho_ == whole.rho_
    np.testing.assert_array_equal(pieces.classes_, whole.classes_)
    assert_rel_close(pieces.coef_, whole.coef_)
    assert_rel_close(pieces.intercept_, whole.intercept_)


def test_partial_fit_appends_a_new_class_and_fits_it(data):
    X, y = data
    model = RidgeClassifier(rho=2.0).partial_fit(X[y != 3], y[y != 3])
    model.partial_fit(X[y == 3], y[y == 3])
    assert model.classes_.tolist() == [0, 1, 2, 4, 3]
    assert_rel_close(model.coef_[[0, 1, 2, 4, 3]].T, reference_weights(X, y, 2.0))


def test_partial_fit_keeps_rho_chosen_on_validation_rows(data):
    X, y = data
    model = RidgeClassifier(rho_grid=(1e-3, 1e6)).fit(X, y, X_val=X, y_val=y)
    assert model.rho_ == 1e-3
    model.partial_fit(X[:10], y[:10])
    assert (model.rho_, model.rho_selection_) == (1e-3, "validation")


def test_class_without_labelled_rows_is_rejected_by_name(data):
    X, y = data
    with pytest.raises(ValueError, match=r"classes \[7\]"):
        RidgeClassifier().partial_fit(X, y, classes=[0, 1, 2, 3, 4, 7])


def test_failed_fit_leaves_the_fitted_model_unchanged(data):
    X, y = data
    model = RidgeClassifier().fit(X, y)
    coef = model.coef_.copy()
    bad = X.copy()
    bad[3, 0] = np.inf
    with pytest.raises(ValueError):
        model.fit(as_dask(bad), y)
    np.testing.assert_array_equal(model.coef_, coef)


def test_dask_predictions_are_lazy_and_equal_numpy(data):
    X, y = data
    model = RidgeClassifier().fit(X, y)
    Xd = as_dask(X)
    for method in ("decision_function", "predict", "predict_top_k"):
        lazy = getattr(model, method)(Xd)
        assert isinstance(lazy, da.Array)
        np.testing.assert_array_equal(lazy.compute(), getattr(model, method)(X))


def test_predict_top_k_lists_classes_best_first_starting_with_predict(data):
    X, y = data
    model = RidgeClassifier().fit(X, y)
    top = model.predict_top_k(X, k=3)
    scores = model.decision_function(X)
    ranked = np.take_along_axis(scores, np.searchsorted(model.classes_, top), axis=1)
    assert top.shape == (len(X), 3)
    np.testing.assert_array_equal(top[:, 0], model.predict(X))
    assert (np.diff(ranked, axis=1) <= 0).all()


def fitted_state(model):
    return {k: v for k, v in vars(model).items() if k.endswith("_") and not k.startswith("_")}


def test_fitted_state_is_arrays_and_json_scalars_and_rebuilds_the_model(data):
    X, y = data
    model = RidgeClassifier().fit(X[:200], y[:200])
    state = fitted_state(model)
    assert all(isinstance(v, np.ndarray | int | float | str | bool) for v in state.values())
    rebuilt = type(model)(**model.get_params())
    for name, value in state.items():
        setattr(rebuilt, name, value)
    np.testing.assert_array_equal(rebuilt.predict(X), model.predict(X))
    rebuilt.partial_fit(X[200:], y[200:])
    assert_rel_close(rebuilt.coef_, RidgeClassifier().fit(X, y).coef_)


def widened(X, n_features):
    """The rows with random columns appended to ``n_features``: rows wider than they are many."""
    noise = np.random.default_rng(1).normal(size=(len(X), n_features - X.shape[1]))
    return np.hstack([X, noise]).astype(np.float32)


def exact_weights(X, y, rho):
    """W = (X̃ᵀX̃ + ρI)⁻¹X̃ᵀY (paper 000 §3.3) by a dense float64 solve: X̃ the labelled rows
    minus the mean of all rows, Y one-hot."""
    X64 = X.astype(np.float64)
    labelled = y >= 0
    centred = X64[labelled] - X64.mean(axis=0)
    targets = np.eye(N_CLASSES)[y[labelled]]
    system = centred.T @ centred + rho * np.eye(X.shape[1])
    return np.linalg.solve(system, centred.T @ targets)


# 300 labelled and 120 unlabelled rows: 12 features (rows more than dimensions), 350 (fewer
# labelled rows than dimensions, more rows in all) and 600 (fewer rows of any kind).
SHAPES = [12, 350, 600]


@pytest.mark.parametrize("as_rows", [np.asarray, as_dask], ids=["numpy", "dask"])
@pytest.mark.parametrize("solver", ["primal", "dual"])
@pytest.mark.parametrize("n_features", SHAPES)
def test_both_forms_equal_the_exact_dense_solution(data, n_features, solver, as_rows):
    X, y = data
    X = X if n_features == N_FEATURES else widened(X, n_features)
    model = RidgeClassifier(rho=0.2, solver=solver).fit(as_rows(X), y)
    assert model.solver_ == solver
    assert_rel_close(model.coef_.T, exact_weights(X, y, 0.2))
    mean = X.astype(np.float64).mean(axis=0)
    assert_rel_close(model.intercept_, -mean @ exact_weights(X, y, 0.2))


@pytest.mark.parametrize("n_features, form", [(12, "primal"), (350, "dual"), (600, "dual")])
def test_auto_solves_in_the_dual_when_labelled_rows_are_fewer_than_features(data, n_features, form):
    X, y = data
    X = X if n_features == N_FEATURES else widened(X, n_features)
    model = RidgeClassifier(rho=0.2).fit(X, y)
    assert model.solver_ == form
    assert hasattr(model, "gram_") == (form == "primal")


@pytest.mark.parametrize("criterion", ["gcv", "error", "rate"])
@pytest.mark.parametrize("n_features", SHAPES)
def test_the_two_forms_choose_the_same_rho_and_give_the_same_model(data, n_features, criterion):
    """ρ by generalised cross-validation, by the validation squared error (with validation rows
    of a class the model does not have) or by the validation per-class rate: the dual form's
    scores are the exact ones at every ρ, its ρ their best, its W the primal form's at that ρ.

    Where X̃ᵀX̃ is singular (n < D) and ρ small, the primal form's GCV is a difference of nearly
    equal sums and loses the digits that order the flat scores there: against it, the scores
    are close, not equal, and its ρ may differ."""
    X, y = data
    X = X if n_features == N_FEATURES else widened(X, n_features)
    X_val, y_val = X[::2], y[::2]
    train = np.arange(len(y)) % 2 == 1
    X, y = X[train], y[train]
    if criterion == "error":
        y = np.where(y == 4, -1, y)  # class 4 in validation rows only
    options = {"rho_criterion": "rate"} if criterion == "rate" else {}
    validation = {} if criterion == "gcv" else {"X_val": as_dask(X_val), "y_val": y_val}
    primal = RidgeClassifier(solver="primal", **options).fit(X, y, **validation)
    dual = RidgeClassifier(solver="dual", **options).fit(as_dask(X), y, **validation)
    assert primal.rho_selection_ == dual.rho_selection_
    if criterion == "rate":  # counts of rows: equal
        np.testing.assert_array_equal(dual.rho_scores_, primal.rho_scores_)
        expected_rho = primal.rho_
    else:
        if criterion == "error":
            expected = [reference_validation_error(X, y, X_val, y_val, rho) for rho in RHO_GRID]
        else:
            expected = [brute_force_gcv(X, y, rho) for rho in RHO_GRID]
        np.testing.assert_allclose(dual.rho_scores_, expected, rtol=1e-6)
        assert len(set(np.round(expected, 3))) > 1
        np.testing.assert_allclose(primal.rho_scores_, expected, rtol=1e-2)
        expected_rho = RHO_GRID[int(np.argmin(expected))]
    assert dual.rho_ == expected_rho
    at_that_rho = RidgeClassifier(rho=dual.rho_, solver="primal").fit(X, y)
    assert_rel_close(dual.coef_, at_that_rho.coef_)
    assert_rel_close(dual.intercept_, at_that_rho.intercept_)


def test_a_fit_that_fits_neither_form_is_refused_by_name_before_any_row_is_read(data):
    X, y = data
    narrow = da.map_blocks(_unreadable, as_dask(X), dtype=np.float32)
    wide = da.map_blocks(_unreadable, as_dask(widened(X, 600)), dtype=np.float32)
    with pytest.raises(ValueError, match=r"dual form needs a 300 × 300 solve.*max_solve_bytes"):
        RidgeClassifier(max_solve_bytes=10**6).fit(wide, y)
    with pytest.raises(ValueError, match=r"primal form needs a 12 × 12 solve"):
        RidgeClassifier(max_solve_bytes=1000).fit(narrow, y)


def _unreadable(block):
    raise AssertionError("a row was read")


@pytest.mark.parametrize("change", ["update", "partial_fit"])
def test_a_dual_model_refuses_to_add_rows_by_name_and_stays_as_it_was(data, change):
    X, y = data
    X = widened(X, 600)
    model = RidgeClassifier(rho=0.2).fit(X[:300], y[:300])
    coef = model.coef_.copy()
    with pytest.raises(ValueError, match=f"dual form.*{change} cannot follow"):
        if change == "update":
            model.update((X[300:], y[300:]), (X[:0], y[:0]))
        else:
            model.partial_fit(X[300:], y[300:])
    np.testing.assert_array_equal(model.coef_, coef)


def _no_empty_block(block):
    assert len(block), "a block of no rows was read"
    return block


def test_the_dual_form_reads_no_block_of_no_rows(data):
    """A store's split leaves blocks of no rows, which add nothing to the Gram: the dual form
    reads only blocks holding rows."""
    X, y = data
    X = widened(X, 600)
    empty = da.zeros((0, 600), dtype=np.float32, chunks=(0, 600))
    rows = da.concatenate([as_dask(X[:100]), empty, as_dask(X[100:])])
    model = RidgeClassifier(rho=0.2).fit(rows.map_blocks(_no_empty_block, dtype=np.float32), y)
    assert model.solver_ == "dual"
    assert_rel_close(model.coef_.T, exact_weights(X, y, 0.2))
