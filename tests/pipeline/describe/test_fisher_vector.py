"""Improved Fisher vectors against the formulas of Perronnin et al. 2010 / Sánchez et al. 2013
written out per descriptor and Gaussian, and against skimage.feature.fisher_vector."""

import numpy as np
import pytest
from skimage.feature import fisher_vector as skimage_fisher_vector
from sklearn.mixture import GaussianMixture

from imgscale.pipeline.describe import DenseSift, FisherVector
from imgscale.pipeline.describe.fisher_vector import fisher_vectors

from .conftest import photos


def mixture(K: int, d: int, seed: int):
    rng = np.random.default_rng(seed)
    weights = rng.uniform(0.5, 1.5, K)
    return weights / weights.sum(), rng.normal(0, 1, (K, d)), rng.uniform(0.3, 2.0, (K, d))


def reference(X: np.ndarray, weights, means, variances) -> np.ndarray:
    """One image's improved FV, descriptor by descriptor and Gaussian by Gaussian."""
    T, d = X.shape
    K = len(weights)
    g_mean, g_sigma = np.zeros((K, d)), np.zeros((K, d))
    for x in X:
        p = np.array(
            [
                weights[k]
                * np.prod(np.exp(-((x - means[k]) ** 2) / (2 * variances[k])))
                / np.prod(np.sqrt(2 * np.pi * variances[k]))
                for k in range(K)
            ]
        )
        gamma = p / p.sum()
        for k in range(K):
            u = (x - means[k]) / np.sqrt(variances[k])
            g_mean[k] += gamma[k] * u / (T * np.sqrt(weights[k]))
            g_sigma[k] += gamma[k] * (u**2 - 1) / (T * np.sqrt(2 * weights[k]))
    fv = np.concatenate([g_mean.ravel(), g_sigma.ravel()])
    fv = np.sign(fv) * np.abs(fv) ** 0.5
    return fv / np.linalg.norm(fv)


def test_encoding_matches_the_formulas_written_out():
    weights, means, variances = mixture(5, 4, 0)
    X = np.random.default_rng(1).normal(0, 1.2, (3, 40, 4))
    out = fisher_vectors(X, weights, means, variances)
    assert out.shape == (3, 2 * 5 * 4)
    for i in range(3):
        np.testing.assert_allclose(out[i], reference(X[i], weights, means, variances), atol=1e-10)


def test_encoding_matches_scikit_image_up_to_its_conventions():
    # skimage's vector is [∂π (K), ∂μ (K·d), ∂σ (K·d)], its ∂σ the negative of G_σ; with
    # improved=False it is neither power- nor L2-normalised, so both are applied here.
    weights, means, variances = mixture(4, 3, 2)
    gmm = GaussianMixture(4, covariance_type="diag")
    gmm.weights_, gmm.means_, gmm.covariances_ = weights, means, variances
    gmm.precisions_cholesky_ = 1 / np.sqrt(variances)
    X = np.random.default_rng(3).normal(0, 1.5, (50, 3))
    theirs = skimage_fisher_vector(X, gmm, improved=False)
    K, d = 4, 3
    raw = np.concatenate([theirs[K : K + K * d], -theirs[K + K * d :]])
    expected = np.sign(raw) * np.sqrt(np.abs(raw))
    expected /= np.linalg.norm(expected)
    np.testing.assert_allclose(fisher_vectors(X[None], weights, means, variances)[0], expected,
                               atol=1e-10)  # fmt: skip


@pytest.fixture(scope="module")
def fitted():
    images = photos(64, grey=False)
    crops = np.concatenate([images, images[:, ::-1], images[:, :, ::-1]])
    return FisherVector(n_gaussians=3, n_components=8, image_size=64).fit(crops), crops


def test_one_vector_per_channel_each_of_unit_norm(fitted):
    fv, crops = fitted
    out = fv.transform(crops)
    assert out.shape == (6, 2 * 2 * 3 * 8) == (6, fv.n_features_out_) and out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out[:, :48], axis=1), 1, rtol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(out[:, 48:], axis=1), 1, rtol=1e-5)
    assert fv.sift_components_.shape == (8, 128) and fv.color_components_.shape == (8, 96)
    assert set(fv.n_iter_) == {"sift", "color"}


def test_the_sift_channel_is_the_fv_of_the_projected_rootsift(fitted):
    fv, crops = fitted
    local = fv.local_descriptors(crops[:1])["sift"]
    projected = (local - fv.sift_mean_) @ fv.sift_components_.T
    expected = reference(projected, fv.sift_weights_, fv.sift_means_, fv.sift_variances_)
    np.testing.assert_allclose(fv.transform(crops[:1])[0, :48], expected, atol=1e-5)


def test_a_sift_only_vocabulary_takes_grey_images():
    images = photos(64, grey=True)
    fv = FisherVector(n_gaussians=2, n_components=4, channels=("sift",), image_size=64)
    assert fv.image_request == ("L", (64, 64))
    assert fv.fit(images).transform(images).shape == (2, 16)


def test_an_image_size_under_one_patch_and_unknown_channels_are_refused():
    with pytest.raises(ValueError, match="image_size 8 is smaller than one 16-pixel patch"):
        FisherVector(image_size=8).fit(np.zeros((2, 8, 8, 3), np.uint8))
    with pytest.raises(ValueError, match="channels must be some of"):
        FisherVector(channels=("sift", "hog")).fit(np.zeros((2, 32, 32, 3), np.uint8))


def test_the_sift_window_reaches_the_sift_channel():
    images = photos(64, grey=True)[:2]
    vocabulary = FisherVector(channels=("sift",), image_size=64, sift_window=2.25)
    wide = DenseSift(root=True, window=2.25).fit().transform(images).reshape(-1, 128)
    np.testing.assert_array_equal(vocabulary.local_descriptors(images)["sift"], wide)
