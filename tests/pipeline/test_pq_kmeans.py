"""The batched sub-space k-means against a dense numpy Lloyd written from its documented rules,
its empty-cluster split worked by hand, and its independence from how sub-spaces are batched."""

from __future__ import annotations

import numpy as np
import pytest

from imgscale.pipeline.pq_kmeans import (
    MAX_UNROLLED_DSUB,
    _centroid_major,
    _search,
    _unrolled,
    kmeans_sub_spaces,
)


def first_rows(n: int, k: int, seed: int) -> np.ndarray:
    """The documented initialisation: k distinct rows drawn by numpy's default_rng(seed)."""
    return np.random.default_rng(seed).choice(n, k, replace=False)


def dense_lloyd(x: np.ndarray, k: int, niter: int, seed: int) -> tuple[np.ndarray, list]:
    """One sub-space's k-means from the formulas, in float64: nearest centroid by full squared
    distances (first index on ties), means of the assigned rows, then each empty cluster in
    index order moved to the row farthest from its centroid (lowest index on ties, each row
    once, none at distance 0). Returns the centroids and each iteration's (centroids searched,
    rows' nearest centroid)."""
    x = x.astype(np.float64)
    c = x[first_rows(len(x), k, seed)].copy()
    steps = []
    for _ in range(niter):
        searched = c.astype(np.float32)
        nearest = ((x[:, None, :] - searched[None]) ** 2).sum(axis=2).argmin(axis=1)
        steps.append((searched, nearest))
        residuals = ((x - searched[nearest]) ** 2).sum(axis=1)
        for a in np.unique(nearest):
            c[a] = x[nearest == a].mean(axis=0)
        for a in np.setdiff1d(np.arange(k), nearest):
            far = int(np.argmax(residuals))
            if residuals[far] > 0:
                c[a] = x[far]
                residuals[far] = -1
    return c, steps


def kernel_nearest(x: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """The kernel's assignment step alone: each row's nearest of ``centroids``."""
    k, dsub = centroids.shape
    ct, cnorm = np.empty((dsub, k), np.float32), np.empty(k, np.float32)
    _centroid_major(centroids, ct, cnorm)
    nearest, best = np.empty(len(x), np.int32), np.empty(len(x), np.float32)
    _search(x, ct, cnorm, _unrolled(dsub), nearest, best)
    # its minimum is ||c||^2 - 2x.c of the chosen centroid
    chosen = centroids[nearest].astype(np.float64)
    np.testing.assert_allclose(
        best, (chosen**2).sum(1) - 2 * (x * chosen).sum(1), rtol=1e-4, atol=1e-3
    )
    return nearest


def blob_sub_spaces(m: int, n: int, dsub: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(m, 12, dsub)) * 4
    which = rng.integers(0, 12, (m, n))
    return (
        np.take_along_axis(centres, which[..., None], 1) + rng.normal(size=(m, n, dsub))
    ).astype(np.float32)


@pytest.mark.parametrize(
    ("m", "n", "dsub", "k", "niter"),
    [(3, 600, 4, 16, 4), (2, 2048, 8, 256, 3), (1, 300, MAX_UNROLLED_DSUB + 1, 8, 3)],
)
def test_centroids_are_dense_lloyds(m, n, dsub, k, niter):
    sub = blob_sub_spaces(m, n, dsub)
    got = kmeans_sub_spaces(sub, k, niter, seed=5)
    assert got.shape == (m, k, dsub) and got.dtype == np.float32
    for j in range(m):
        expected, steps = dense_lloyd(sub[j], k, niter, seed=5)
        np.testing.assert_allclose(got[j], expected, rtol=1e-5, atol=1e-5)
        # every iteration's assignments, given that iteration's centroids, are exactly the same
        for searched, nearest in steps:
            np.testing.assert_array_equal(kernel_nearest(sub[j], searched), nearest)


def test_no_iterations_leaves_the_seeded_rows():
    sub = blob_sub_spaces(2, 400, 4)
    got = kmeans_sub_spaces(sub, 10, 0, seed=9)
    np.testing.assert_array_equal(got, sub[:, first_rows(400, 10, 9)])


def rows_for(pattern: list[bool], n: int, boundary: int, k: int) -> int:
    """A seed whose initial rows fall each side of ``boundary`` as ``pattern`` says."""
    return next(s for s in range(1000) if list(first_rows(n, k, s) >= boundary) == pattern)


def test_an_empty_cluster_moves_to_the_farthest_row():
    # Rows 0-99 all a = (1, 2, 1, 2); rows 100-399 around b = (3, 4, 3, 4), row 399 the
    # farthest from it. Started from rows a, a, (some b), the second centroid loses its rows
    # to the first (lower index wins a tie) and moves to row 399, which is then a cluster.
    b = np.array([3, 4, 3, 4], np.float32)
    x = np.concatenate([[[1, 2, 1, 2]] * 100, [b + 0.25] * 150, [b - 0.25] * 149, [b + 2]])
    x = x.astype(np.float32)
    seed = rows_for([False, False, True], 400, 100, 3)
    got = kmeans_sub_spaces(x[None], 3, 1, seed=seed)[0]
    np.testing.assert_array_equal(got[:2], [[1, 2, 1, 2], b + 2])
    np.testing.assert_allclose(got[2], x[100:].mean(axis=0), rtol=1e-6)
    again = kmeans_sub_spaces(x[None], 3, 2, seed=seed)[0]
    np.testing.assert_allclose(again, [[1, 2, 1, 2], b + 2, x[100:399].mean(axis=0)], rtol=1e-6)


def test_an_empty_cluster_without_a_donor_stays_put():
    # Two distinct rows only, started from a, b, b: the third centroid is emptied and every
    # row is at distance 0 from its centroid, so it stays at b.
    x = np.array([[1, 2, 1, 2]] * 100 + [[3, 4, 3, 4]] * 300, np.float32)
    seed = rows_for([False, True, True], 400, 100, 3)
    got = kmeans_sub_spaces(x[None], 3, 3, seed=seed)[0]
    np.testing.assert_array_equal(got, [[1, 2, 1, 2], [3, 4, 3, 4], [3, 4, 3, 4]])


def test_seed_decides_the_result_and_batching_does_not():
    sub = blob_sub_spaces(4, 800, 4, seed=1)
    once = kmeans_sub_spaces(sub, 32, 5, seed=3)
    np.testing.assert_array_equal(once, kmeans_sub_spaces(sub, 32, 5, seed=3))
    assert not np.array_equal(once, kmeans_sub_spaces(sub, 32, 5, seed=4))
    halves = [kmeans_sub_spaces(sub[:1], 32, 5, seed=3), kmeans_sub_spaces(sub[1:], 32, 5, seed=3)]
    np.testing.assert_array_equal(once, np.concatenate(halves))


def test_ties_go_to_the_lowest_index():
    centroids = np.array([[1, 0, 0, 0], [0, 1, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0]], np.float32)
    x = np.array([[2, 0, 5, 5], [0, 2, 5, 5], [1, 1, 5, 5], [-1, -1, 5, 5]], np.float32)
    np.testing.assert_array_equal(kernel_nearest(x, centroids), [0, 1, 0, 0])


def test_bad_arguments_are_refused_by_name():
    sub = blob_sub_spaces(1, 50, 2)
    with pytest.raises(ValueError, match="k=51 centroids for 50 rows"):
        kmeans_sub_spaces(sub, 51, 1, seed=0)
    with pytest.raises(ValueError, match=r"expected \(M, n, dsub\)"):
        kmeans_sub_spaces(sub[0], 4, 1, seed=0)
    with pytest.raises(ValueError, match="niter=-1"):
        kmeans_sub_spaces(sub, 4, -1, seed=0)
