"""NearestClassMean (paper 002 §3.2, ℓ2) against numpy brute force."""

import dask.array as da
import numpy as np
import pytest

from imgscale.pipeline.classify import NearestClassMean
from tests.pipeline.conftest import N_CLASSES, as_dask


def brute_force_means(X, y):
    return np.stack([X[y == c].astype(np.float64).mean(axis=0) for c in range(N_CLASSES)])


def test_means_are_class_means_of_labelled_rows(data):
    X, y = data
    model = NearestClassMean().fit(X, y)
    np.testing.assert_array_equal(model.classes_, np.arange(N_CLASSES))
    np.testing.assert_allclose(model.means_, brute_force_means(X, y), rtol=1e-6)
    np.testing.assert_array_equal(model.class_counts_, np.bincount(y[y >= 0]))


def test_decision_is_minus_squared_distance_to_each_mean(data):
    X, y = data
    model = NearestClassMean().fit(X, y)
    distances = ((X[:, None, :] - model.means_[None].astype(np.float64)) ** 2).sum(axis=2)
    np.testing.assert_allclose(model.decision_function(X), -distances, rtol=1e-5, atol=1e-4)


def test_predict_is_the_nearest_mean(data):
    X, y = data
    model = NearestClassMean().fit(X, y)
    distances = ((X[:, None, :] - model.means_[None].astype(np.float64)) ** 2).sum(axis=2)
    np.testing.assert_array_equal(model.predict(X), distances.argmin(axis=1))


def test_fit_on_dask_equals_numpy(data):
    X, y = data
    on_dask = NearestClassMean().fit(as_dask(X), as_dask(y))
    on_numpy = NearestClassMean().fit(X, y)
    np.testing.assert_allclose(on_dask.class_sums_, on_numpy.class_sums_, rtol=1e-12)
    np.testing.assert_array_equal(on_dask.class_counts_, on_numpy.class_counts_)


def test_dask_predictions_are_lazy_and_equal_numpy(data):
    X, y = data
    model = NearestClassMean().fit(X, y)
    for method in ("decision_function", "predict", "predict_top_k"):
        lazy = getattr(model, method)(as_dask(X))
        assert isinstance(lazy, da.Array)
        np.testing.assert_array_equal(lazy.compute(), getattr(model, method)(X))


def test_partial_fit_in_pieces_equals_one_fit(data):
    X, y = data
    pieces = NearestClassMean()
    for rows in np.array_split(np.arange(len(X)), 4):
        pieces.partial_fit(X[rows], y[rows], classes=np.arange(N_CLASSES))
    np.testing.assert_allclose(pieces.means_, NearestClassMean().fit(X, y).means_, rtol=1e-6)


def test_new_class_is_appended_without_touching_other_means(data):
    X, y = data
    model = NearestClassMean().fit(X[y != 2], y[y != 2])
    before = model.means_.copy()
    model.partial_fit(X[y == 2], y[y == 2])
    assert model.classes_.tolist() == [0, 1, 3, 4, 2]
    np.testing.assert_array_equal(model.means_[:4], before)  # bit-identical
    np.testing.assert_allclose(model.means_[4], X[y == 2].mean(axis=0), rtol=1e-6)


def test_class_without_rows_is_rejected_by_name(data):
    X, y = data
    with pytest.raises(ValueError, match=r"classes \['cat'\]"):
        NearestClassMean().partial_fit(
            X[y >= 0], np.where(y[y >= 0] > 1, "dog", "cow"), classes=["cat", "cow", "dog"]
        )


def test_unlabelled_rows_do_not_move_the_means(data):
    X, y = data
    with_unlabelled = NearestClassMean().fit(X, y)
    without = NearestClassMean().fit(X[y >= 0], y[y >= 0])
    np.testing.assert_array_equal(with_unlabelled.means_, without.means_)


def test_fitted_state_rebuilds_a_model_that_keeps_learning(data):
    X, y = data
    model = NearestClassMean().fit(X[:200], y[:200])
    rebuilt = NearestClassMean(**model.get_params())
    for name, value in vars(model).items():
        if name.endswith("_"):
            setattr(rebuilt, name, value)
    np.testing.assert_array_equal(rebuilt.predict(X), model.predict(X))
    rebuilt.partial_fit(X[200:], y[200:])
    np.testing.assert_allclose(rebuilt.means_, NearestClassMean().fit(X, y).means_, rtol=1e-6)


def test_add_class_adds_or_replaces_one_class_mean_and_leaves_the_others_bit_identical():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(60, 4)).astype(np.float32)
    y = np.arange(60) % 3
    model = NearestClassMean().fit(X, y)
    before = model.means_.copy()
    new_rows = rng.normal(size=(5, 4)).astype(np.float32) + 10
    model.add_class(new_rows, 3)
    np.testing.assert_array_equal(model.classes_, [0, 1, 2, 3])
    np.testing.assert_array_equal(model.means_[:3], before)
    np.testing.assert_allclose(model.means_[3], new_rows.mean(axis=0), rtol=1e-6)
    model.add_class(new_rows[:2] - 20, 1, replace=True)
    np.testing.assert_allclose(model.means_[1], (new_rows[:2] - 20).mean(axis=0), rtol=1e-6)
    np.testing.assert_array_equal(model.means_[[0, 2]], before[[0, 2]])
    assert model.class_counts_.tolist() == [20, 2, 20, 5]


def test_replacing_a_class_the_model_does_not_have_is_refused():
    X = np.eye(4, dtype=np.float32)
    model = NearestClassMean().fit(X, [0, 0, 1, 1])
    with pytest.raises(ValueError, match="no class 7 to replace"):
        model.add_class(X, 7, replace=True)
