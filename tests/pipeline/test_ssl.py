"""The semi-supervised eigenvector solve (paper 001 eq. 3) and paper 000's eigenvalue-regularised
ridge, against dense solves of the equations as written."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from imgscale.pipeline.classify.ssl import EigenvalueRidgeClassifier, SemiSupervisedEigenSolver

UNLABELLED_MINUS_ONE = "label -1 means unlabelled, so labels {-1, 1} are one class"


@pytest.fixture
def problem():
    """600 rows of a 12-column 'embedding', 3 classes, 60 labelled rows, Σ ascending."""
    rng = np.random.default_rng(0)
    n, d = 600, 12
    classes = rng.integers(0, 3, n)
    centres = rng.standard_normal((3, d))
    U = (rng.standard_normal((n, d)) + 1.5 * centres[classes]).astype(np.float32)
    y = np.full(n, -1)
    labelled = rng.choice(n, 60, replace=False)
    y[labelled] = classes[labelled]
    sigma = np.sort(rng.uniform(0.01, 0.5, d))
    return U, y, classes, sigma


def _eq3_reference(U, y, sigma, lam, intercept):
    """Dense (Σ + UᵀΛU)α = UᵀΛY with unit-length columns U/√n, Λ = λ on labelled rows."""
    n = len(U)
    U1 = U.astype(np.float64) / np.sqrt(n)
    if intercept:  # the constant eigenvector, σ = 0
        U1 = np.hstack([U1, np.full((n, 1), 1 / np.sqrt(n))])
        sigma = np.append(sigma, 0.0)
    Lam = np.diag(np.where(y >= 0, lam, 0.0))
    Y = (y[:, None] == np.arange(3)[None, :]).astype(np.float64)
    alpha = np.linalg.solve(np.diag(sigma) + U1.T @ Lam @ U1, U1.T @ Lam @ Y)
    return U1 @ alpha


@pytest.mark.parametrize("intercept", [False, True])
def test_scores_equal_the_dense_solution_of_eq3(problem, intercept):
    U, y, _, sigma = problem
    model = SemiSupervisedEigenSolver(lam=100, fit_intercept=intercept).fit(U, y, sigma)
    expected = _eq3_reference(U, y, sigma, 100, intercept)
    np.testing.assert_allclose(model.decision_function(U), expected, rtol=2e-4, atol=2e-5)


def test_blockwise_dask_fit_equals_numpy(problem):
    U, y, _, sigma = problem
    expected = SemiSupervisedEigenSolver().fit(U, y, sigma)
    got = SemiSupervisedEigenSolver().fit(
        da.from_array(U, chunks=97), da.from_array(y, chunks=97), sigma
    )
    np.testing.assert_allclose(got.coef_, expected.coef_, rtol=1e-5, atol=1e-6)
    lazy = got.predict(da.from_array(U, chunks=150))
    assert isinstance(lazy, da.Array)
    np.testing.assert_array_equal(lazy.compute(), expected.predict(U))


def test_partial_fit_over_batches_equals_fit_on_all_rows(problem):
    U, y, _, sigma = problem
    expected = SemiSupervisedEigenSolver().fit(U, y, sigma)
    model = SemiSupervisedEigenSolver().partial_fit(U[:250], y[:250], sigma)
    model.partial_fit(U[250:], y[250:])
    np.testing.assert_array_equal(model.classes_, expected.classes_)
    np.testing.assert_allclose(model.coef_, expected.coef_, rtol=1e-5, atol=1e-6)


def test_lam_is_validated_on_the_grid_and_the_best_value_refits_identically(problem):
    U, y, classes, sigma = problem
    grid = (0.1, 1.0, 100.0, 1e5)
    model = SemiSupervisedEigenSolver(lam=None, lam_grid=grid)
    model.fit(U, y, sigma, X_val=U[:300], y_val=classes[:300])
    assert model.lam_ in grid and len(model.lam_scores_) == 4
    assert model.lam_scores_[grid.index(model.lam_)] == model.lam_scores_.max()
    fixed = SemiSupervisedEigenSolver(lam=model.lam_).fit(U, y, sigma)
    np.testing.assert_allclose(model.coef_, fixed.coef_, rtol=1e-6)
    with pytest.raises(ValueError, match="X_val"):
        SemiSupervisedEigenSolver(lam=None).fit(U, y, sigma)


def test_labels_beyond_the_labelled_rows_are_learned(problem):
    U, y, classes, sigma = problem
    model = SemiSupervisedEigenSolver().fit(U, y, sigma)
    unlabelled = y == -1
    assert (model.predict(U[unlabelled]) == classes[unlabelled]).mean() > 0.9
    assert model.predict_top_k(U[:5], k=2).shape == (5, 2)


def test_bad_eigenvalues_are_rejected(problem):
    U, y, _, sigma = problem
    with pytest.raises(ValueError, match="11 eigenvalues for 12"):
        SemiSupervisedEigenSolver().fit(U, y, sigma[:11])
    with pytest.raises(ValueError, match="positive"):
        SemiSupervisedEigenSolver().fit(U, y, np.zeros(12))


def test_eigenvalue_ridge_equals_the_dense_centred_solve_with_sigma_as_regulariser(problem):
    U, y, _, sigma = problem
    model = EigenvalueRidgeClassifier(rho=0.5).fit(U, y, sigma)
    X = U.astype(np.float64)
    mean = X.mean(axis=0)  # all rows, labelled or not (paper 000 §3.3)
    labelled = y >= 0
    Xl = X[labelled] - mean
    Y = (y[labelled, None] == np.arange(3)[None, :]).astype(np.float64)
    W = np.linalg.solve(Xl.T @ Xl + 0.5 * np.diag(sigma), Xl.T @ Y)
    np.testing.assert_allclose(model.decision_function(U), (X - mean) @ W, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(model.mean_, mean, rtol=1e-6, atol=1e-6)


def test_eigenvalue_ridge_without_eigenvalues_is_ordinary_ridge(problem):
    from imgscale.pipeline.classify import RidgeClassifier

    U, y, _, _ = problem
    ours = EigenvalueRidgeClassifier(rho=2.0).fit(U, y)
    plain = RidgeClassifier(rho=2.0).fit(U, y)
    np.testing.assert_allclose(ours.coef_, plain.coef_, rtol=1e-6)


def _expected_failed(estimator):
    return {"check_classifiers_classes": UNLABELLED_MINUS_ONE}


@parametrize_with_checks(
    [SemiSupervisedEigenSolver(), EigenvalueRidgeClassifier()],
    expected_failed_checks=_expected_failed,
)
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)
