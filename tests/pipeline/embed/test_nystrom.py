import numpy as np
import pytest

from imgscale.pipeline.embed import Nystrom
from tests.pipeline.embed.conftest import match_signs


def _laplacian_eigenvectors(K, d):
    """Exact eigenvectors of I − D^{-1/2}KD^{-1/2} for the 2nd … (d+1)-th smallest eigenvalues."""
    inv_sqrt = 1 / np.sqrt(K.sum(axis=1))
    laplacian = np.eye(len(K)) - inv_sqrt[:, None] * K * inv_sqrt[None, :]
    values, vectors = np.linalg.eigh(laplacian)
    return values[1 : d + 1], vectors[:, 1 : d + 1]


def test_every_row_a_landmark_gives_exact_laplacian_eigenvectors_gaussian():
    X = np.random.default_rng(0).normal(size=(80, 3)).astype(np.float32)
    model = Nystrom(n_components=6, n_landmarks=80, gamma=0.5).fit(X)
    X64 = X.astype(np.float64)
    K = np.exp(-0.5 * ((X64[:, None] - X64[None]) ** 2).sum(axis=2) / 2)
    values, vectors = _laplacian_eigenvectors(K, 6)
    # √n: the documented scaling to unit mean square per coordinate.
    expected = np.sqrt(80) * vectors
    Z = model.transform(X).astype(np.float64)
    np.testing.assert_allclose(match_signs(Z, expected), expected, atol=2e-4)
    np.testing.assert_allclose(model.eigenvalues_, values, atol=1e-6)


def test_every_row_a_landmark_gives_exact_laplacian_eigenvectors_intersection(histograms):
    model = Nystrom(n_components=5, n_landmarks=200, kernel="intersection").fit(histograms)
    X64 = histograms.astype(np.float64)
    K = np.minimum(X64[:, None], X64[None]).sum(axis=2)
    _, vectors = _laplacian_eigenvectors(K, 5)
    expected = np.sqrt(200) * vectors
    Z = model.transform(histograms).astype(np.float64)
    np.testing.assert_allclose(match_signs(Z, expected), expected, atol=2e-4)


def test_new_row_is_embedded_by_nystrom_extension_with_degree_over_the_landmarks():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(50, 3)).astype(np.float32)
    model = Nystrom(n_components=4, n_landmarks=20, gamma=1.0, random_state=0).fit(X)
    new = rng.normal(size=(5, 3)).astype(np.float32)
    L = model.landmarks_.astype(np.float64)

    def kernel(A, B):
        return np.exp(-((A[:, None] - B[None]) ** 2).sum(axis=2) / 2)

    K = kernel(L, L)
    d_L = K.sum(axis=1)
    mu, U = np.linalg.eigh(K / np.sqrt(np.outer(d_L, d_L)))
    mu, U = mu[::-1][1:5], U[:, ::-1][:, 1:5]
    k = kernel(new.astype(np.float64), L)
    d_new = k.sum(axis=1)  # the documented degree of a new row
    expected = np.sqrt(20) * (k / np.sqrt(np.outer(d_new, d_L))) @ U / mu
    Z = model.transform(new).astype(np.float64)
    np.testing.assert_allclose(match_signs(Z, expected), expected, rtol=1e-3, atol=1e-5)


def test_n_components_is_capped_below_the_number_of_landmarks():
    X = np.random.default_rng(2).normal(size=(30, 2)).astype(np.float32)
    assert Nystrom(n_components=50, n_landmarks=10, gamma=1.0).fit(X).n_components_ == 9


def test_unknown_kernel_is_rejected():
    with pytest.raises(ValueError, match="unknown kernel"):
        Nystrom(kernel="chi2").fit(np.ones((5, 2), dtype=np.float32))
