"""PCA axes of rows in memory: the n × n Gram route for wide rows equals the SVD of the centred
rows, and never forms the D × D covariance."""

import numpy as np
import pytest

from imgscale.pipeline import principal_axes as axes_module
from imgscale.pipeline.classify.ncm_metric import initial_projection
from imgscale.pipeline.principal_axes import principal_axes_of_rows


def svd_axes(X: np.ndarray, k: int) -> np.ndarray:
    """Top-k right singular vectors of the centred rows, largest entry of each positive."""
    _, _, vt = np.linalg.svd(X - X.mean(axis=0), full_matrices=False)
    top = vt[:k]
    return top * np.sign(top[np.arange(k), np.argmax(np.abs(top), axis=1)])[:, None]


@pytest.mark.parametrize("shape", [(40, 300), (300, 40)])
def test_axes_are_those_of_the_svd_of_the_centred_rows(shape):
    rng = np.random.default_rng(0)
    # Distinct variances along random directions, so the top axes are well separated.
    X = rng.standard_normal(shape) * np.linspace(3, 0.1, shape[1]) + 5.0
    np.testing.assert_allclose(principal_axes_of_rows(X, 5), svd_axes(X, 5), atol=1e-8)


def test_wide_rows_never_form_the_covariance(monkeypatch):
    monkeypatch.setattr(axes_module, "covariance_stats", lambda X: pytest.fail("D x D covariance"))
    X = np.random.default_rng(1).standard_normal((30, 2_000)).astype(np.float32)
    assert principal_axes_of_rows(X, 4).shape == (4, 2_000)


def test_the_initial_metric_of_wide_rows_starts_from_their_pca(monkeypatch):
    monkeypatch.setattr(axes_module, "covariance_stats", lambda X: pytest.fail("D x D covariance"))
    rng = np.random.default_rng(2)
    X = (rng.standard_normal((60, 1_500)) * np.linspace(2, 0.1, 1_500)).astype(np.float32)
    y = np.arange(60) % 3
    means = np.stack([X[y == c].mean(axis=0) for c in range(3)])
    W = initial_projection(X, y, means, 4)
    # Rows of W are the PCA axes, scaled alike.
    unit = W / np.linalg.norm(W, axis=1, keepdims=True)
    np.testing.assert_allclose(np.abs(unit), np.abs(svd_axes(X.astype(np.float64), 4)), atol=1e-5)
