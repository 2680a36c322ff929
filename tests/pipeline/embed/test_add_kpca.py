import numpy as np

from imgscale.pipeline.embed import AddKPCA
from tests.pipeline.embed.conftest import match_signs


def _per_dimension_kernel_pca(X):
    """Every eigenpair of every 1-D intersection kernel matrix: (λ, dimension, projection √λu)."""
    pairs = []
    for j in range(X.shape[1]):
        K = np.minimum(X[:, j, None], X[None, :, j])
        values, vectors = np.linalg.eigh(K)
        for c in range(len(values)):
            pairs.append((values[c], j, np.sqrt(max(values[c], 0)) * vectors[:, c]))
    return pairs


def test_all_values_as_landmarks_equals_exact_per_dimension_kernel_pca():
    X = np.random.default_rng(0).gamma(2.0, size=(40, 3))
    model = AddKPCA(n_components=6, n_landmarks=40).fit(X.astype(np.float32))
    pairs = sorted(_per_dimension_kernel_pca(X), key=lambda p: -p[0])[:6]
    pairs.sort(key=lambda p: (p[1], -p[0]))  # output order: by dimension, then by λ
    expected = np.stack([p[2] for p in pairs], axis=1)
    np.testing.assert_array_equal(model.component_dims_, [p[1] for p in pairs])
    np.testing.assert_allclose(model.eigenvalues_, [p[0] for p in pairs], rtol=1e-6)
    Z = model.transform(X.astype(np.float32)).astype(np.float64)
    np.testing.assert_allclose(match_signs(Z, expected), expected, rtol=1e-3, atol=1e-4)


def test_all_components_reproduce_the_additive_intersection_kernel_on_landmarks(histograms):
    X = histograms[:30]
    model = AddKPCA(n_components=30 * 6, n_landmarks=30).fit(X)
    Z = model.transform(X).astype(np.float64)
    X64 = X.astype(np.float64)
    exact = np.minimum(X64[:, None], X64[None]).sum(axis=2)
    np.testing.assert_allclose(Z @ Z.T, exact, rtol=1e-3, atol=1e-3)


def test_default_keeps_two_components_per_dimension(histograms):
    assert AddKPCA(random_state=0).fit(histograms).n_components_ == 12
