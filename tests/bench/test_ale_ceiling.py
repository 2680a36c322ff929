"""The exact-eigenmaps reference of `imgscale bench ale-ceiling` against a dense eigensolver."""

import numpy as np
import scipy.linalg

from imgscale_reproductions.ale_ceiling import exact_eigenmaps


def test_exact_eigenmaps_are_the_dense_random_walk_eigenvectors_of_the_knn_graph():
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(c, 0.6, (60, 3)) for c in (-1.0, 0.0, 1.0)]).astype(np.float32)
    U, sigma = exact_eigenmaps(X, 5, n_neighbors=8)

    # Dense reference: the same graph built by hand, then (D − W)f = σDf by scipy.linalg.eigh.
    distance = np.sqrt(((X[:, None, :] - X[None, :, :]).astype(np.float64) ** 2).sum(axis=2))
    np.fill_diagonal(distance, np.inf)
    neighbours = np.argsort(distance, axis=1)[:, :8]
    scale = distance[np.arange(len(X)), neighbours[:, -1]].mean()
    W = np.zeros_like(distance)
    rows = np.repeat(np.arange(len(X)), 8)
    W[rows, neighbours.ravel()] = np.exp(-0.5 * (distance[rows, neighbours.ravel()] / scale) ** 2)
    W = np.maximum(W, W.T)
    D = np.diag(W.sum(axis=1))
    exact_sigma, exact_f = scipy.linalg.eigh(D - W, D, subset_by_index=(0, 5))

    np.testing.assert_allclose(sigma, exact_sigma[1:], rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose((U**2).mean(axis=0), 1, rtol=1e-5)
    angles = scipy.linalg.subspace_angles(U.astype(np.float64), exact_f[:, 1:])
    assert np.degrees(angles).max() < 1e-2
