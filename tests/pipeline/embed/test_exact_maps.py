"""SquareRoot and HistogramIntersection are exact: dot products equal their kernels."""

import numpy as np
import pytest

from imgscale.pipeline.embed import HistogramIntersection, SquareRoot
from tests.pipeline.embed.conftest import as_dask


def test_square_root_dot_products_equal_bhattacharyya_kernel(histograms):
    Z = SquareRoot().fit_transform(histograms).astype(np.float64)
    X = histograms.astype(np.float64)
    exact = np.sqrt(X[:, None, :] * X[None, :, :]).sum(axis=2)
    np.testing.assert_allclose(Z @ Z.T, exact, rtol=1e-5)


def test_hike_dot_products_equal_intersection_kernel_on_quantised_values(histograms):
    hike = HistogramIntersection(n_levels=8).fit(histograms)
    Z = hike.transform(histograms).astype(np.float64)
    step = histograms.max(axis=0).astype(np.float64) / 8
    quantised = np.clip(np.rint(histograms / step), 0, 8) * step
    exact = np.minimum(quantised[:, None, :], quantised[None, :, :]).sum(axis=2)
    assert Z.shape == (200, 6 * 8)
    np.testing.assert_allclose(Z @ Z.T, exact, rtol=1e-5)


def test_hike_is_unary_per_dimension():
    X = np.array([[0.0, 4.0], [2.0, 1.0], [4.0, 0.0]], dtype=np.float32)
    Z = HistogramIntersection(n_levels=4).fit_transform(X)
    # Steps are 1 in both columns: q ones of √1 each, then zeros.
    np.testing.assert_array_equal(Z[1], [1, 1, 0, 0, 1, 0, 0, 0])


def test_hike_clips_values_above_the_fitted_range_and_handles_all_zero_columns():
    X = np.array([[0.0, 1.0], [0.0, 2.0]], dtype=np.float32)
    hike = HistogramIntersection(n_levels=2).fit(X)
    Z = hike.transform(np.array([[5.0, 9.0]], dtype=np.float32))
    np.testing.assert_allclose(Z, [[0, 0, 1, 1]])


@pytest.mark.parametrize("cls", [SquareRoot, HistogramIntersection])
def test_negative_features_are_rejected_with_their_rows(cls, histograms):
    bad = histograms.copy()
    bad[50, 2] = -1
    model = cls().fit(histograms)
    with pytest.raises(ValueError, match=r"Negative values .* rows \[50\]"):
        model.transform(bad)
    with pytest.raises(ValueError, match=r"Negative values .* rows \[50\]"):
        model.transform(as_dask(bad)).compute()
