import numpy as np
import pytest

from imgscale.pipeline.embed import GaussianRandomProjection


def test_preserves_squared_norms_on_average():
    X = np.random.default_rng(0).normal(size=(200, 50)).astype(np.float32)
    Z = GaussianRandomProjection(2000, random_state=0).fit_transform(X)
    ratio = (Z.astype(np.float64) ** 2).sum(axis=1) / (X.astype(np.float64) ** 2).sum(axis=1)
    assert ratio.mean() == pytest.approx(1.0, abs=0.02)
    assert ratio.std() < 0.05  # ≈ √(2/k)


def test_same_random_state_same_projection():
    X = np.ones((3, 5), dtype=np.float32)
    a = GaussianRandomProjection(7, random_state=3).fit(X).components_
    b = GaussianRandomProjection(7, random_state=3).fit(X).components_
    np.testing.assert_array_equal(a, b)
