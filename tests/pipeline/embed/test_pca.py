import numpy as np
import pytest
from sklearn.decomposition import PCA as SklearnPCA

from imgscale.pipeline.embed import PCA
from tests.pipeline.embed.conftest import as_dask


@pytest.fixture
def correlated():
    rng = np.random.default_rng(0)
    return (rng.normal(size=(300, 8)) @ rng.normal(size=(8, 8)) + 5).astype(np.float32)


@pytest.mark.parametrize("whiten", [False, True])
def test_equals_sklearn_pca(correlated, whiten):
    ours = PCA(n_components=4, whiten=whiten).fit(correlated)
    theirs = SklearnPCA(n_components=4, whiten=whiten, svd_solver="full").fit(correlated)
    np.testing.assert_allclose(ours.components_, theirs.components_, atol=1e-4)
    np.testing.assert_allclose(ours.explained_variance_, theirs.explained_variance_, rtol=1e-4)
    np.testing.assert_allclose(ours.mean_, theirs.mean_, rtol=1e-6)
    np.testing.assert_allclose(
        ours.transform(correlated), theirs.transform(correlated), rtol=1e-3, atol=1e-3
    )


def test_partial_fit_over_two_halves_equals_fit(correlated):
    whole = PCA(n_components=3).fit(correlated)
    halves = PCA(n_components=3).partial_fit(correlated[:120])
    halves.partial_fit(as_dask(correlated[120:]))
    np.testing.assert_allclose(halves.components_, whole.components_, atol=1e-5)
    assert halves.n_rows_ == 300


def test_fit_is_one_pass_over_a_dask_array(correlated):
    # One task per chunk for the statistics plus the tree of adds; no per-row materialisation.
    np.testing.assert_allclose(
        PCA(3).fit(as_dask(correlated)).components_, PCA(3).fit(correlated).components_, atol=1e-5
    )
