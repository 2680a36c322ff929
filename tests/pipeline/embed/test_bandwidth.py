"""The per-chunk nearest-neighbour search of the RFF bandwidth, against brute force."""

import numpy as np
import pytest

from imgscale.pipeline.embed import _bandwidth
from imgscale.pipeline.embed._bandwidth import NearestSquaredDistances, chunk_nearest


def brute_force_nearest(X: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    d2 = ((queries[:, None, :].astype(np.float64) - X[None, :, :]) ** 2).sum(axis=2)
    return np.sort(d2, axis=1)[:, :k]


@pytest.mark.parametrize("block_rows", [7, 64, 32768])
def test_chunk_nearest_equals_brute_force_across_row_blocks(monkeypatch, block_rows):
    # Offset rows: the expansion ‖q‖² − 2qᵀx + ‖x‖² must still rank by the true distance.
    rng = np.random.default_rng(0)
    X = (rng.normal(size=(300, 10)) + 5).astype(np.float32)
    queries = np.vstack([X[::37], rng.normal(5, 1, size=(4, 10)).astype(np.float32)])
    monkeypatch.setattr(_bandwidth, "_KNN_ROWS", block_rows)
    nearest = chunk_nearest(X, queries, 12).values
    np.testing.assert_allclose(nearest, brute_force_nearest(X, queries, 12), rtol=1e-4, atol=1e-3)


def test_chunk_nearest_pads_with_inf_when_a_chunk_has_fewer_than_k_rows():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(5, 3)).astype(np.float32)
    nearest = chunk_nearest(X, X[:2], 8).values
    assert np.isinf(nearest[:, 5:]).all()
    np.testing.assert_allclose(nearest[:, :5], brute_force_nearest(X, X[:2], 5), atol=1e-5)


def test_partials_merge_to_the_k_smallest_of_both():
    rng = np.random.default_rng(2)
    a, b = np.sort(rng.random((3, 4)), axis=1), np.sort(rng.random((3, 4)), axis=1)
    merged = (NearestSquaredDistances(a) + NearestSquaredDistances(b)).values
    np.testing.assert_array_equal(merged, np.sort(np.hstack([a, b]), axis=1)[:, :4])
