"""`imgscale bench describe-speed`'s arms measure like for like: the OpenCV loop describes every
patch of the grid, scikit-learn's E and M steps from the same start reach the log-likelihood of
our EM passes, and the two Fisher vector encoders are timed on the same vectors. Nothing about
speed is asserted."""

import numpy as np
import pytest
from skimage.feature import fisher_vector
from sklearn.mixture import GaussianMixture

from imgscale.bench.describe_speed import (
    COMPONENTS,
    _fft_flops,
    _ffts_only,
    crops,
    opencv_loop,
    opencv_processes,
    sklearn_em,
)
from imgscale.pipeline.describe import DESCRIPTORS, DenseSift
from imgscale.pipeline.describe.fisher_vector import fisher_vectors
from imgscale.pipeline.describe.vocabulary import (
    InMemoryChunks,
    fit_gmm,
    fit_kmeans,
    fit_pca,
    project,
)


def test_the_opencv_loop_describes_the_grid_of_every_crop():
    images = crops(5)
    assert images.shape == (5, 64, 64) and images.dtype == np.uint8
    assert opencv_loop(images) == 5 * 7 * 7


def test_the_two_process_loop_describes_every_crop_once():
    rate, seconds = opencv_processes(crops(7), 2)  # shares of 4 and 3 crops
    assert round(rate * seconds) == 7 * 7 * 7


def _mixture_start(gaussians: int = 4):
    descriptors = DenseSift((16,), 8, root=True).fit().transform(crops(40)).reshape(-1, 128)
    chunks = InMemoryChunks([{"sift": c} for c in np.array_split(descriptors, 3)])
    projection = fit_pca(chunks, "sift", COMPONENTS)
    start = fit_kmeans(chunks, "sift", projection, gaussians, n_descriptors=len(descriptors),
                       max_iter=5, tol=1e-4, random_state=0)  # fmt: skip
    return chunks, projection, start, project(descriptors, projection).astype(np.float64)


def test_sklearn_steps_from_the_same_start_reach_our_em_log_likelihood():
    chunks, projection, start, X = _mixture_start()
    initial = fit_gmm(chunks, "sift", projection, start, max_iter=0, tol=0.0)
    ours = fit_gmm(chunks, "sift", projection, start, max_iter=3, tol=-np.inf)
    _, theirs = sklearn_em(X, initial, 3)
    assert ours.n_iter == 3
    assert abs(ours.log_likelihood - theirs) < 1e-6 * abs(theirs)


def test_both_encoders_give_the_same_mean_gradients():
    chunks, projection, start, X = _mixture_start()
    gmm = fit_gmm(chunks, "sift", projection, start, max_iter=2, tol=-np.inf)
    local = X.reshape(40, 49, COMPONENTS)[:3]
    sk = GaussianMixture(4, covariance_type="diag")
    sk.weights_, sk.means_, sk.covariances_ = gmm.weights, gmm.means, gmm.variances
    sk.precisions_cholesky_ = 1 / np.sqrt(gmm.variances)
    ours = fisher_vectors(local, gmm.weights, gmm.means, gmm.variances)
    for i in range(3):
        # skimage's unnormalised vector is [∂π (K), ∂μ (K·d), ∂σ (K·d)]; ours is [G_μ, G_σ]
        # power- and L2-normalised: the μ parts agree once both are normalised the same way.
        theirs = fisher_vector(local[i], sk, improved=False)[4 : 4 + 4 * COMPONENTS]
        ours_mu = ours[i, : 4 * COMPONENTS]
        theirs = np.sign(theirs) * np.sqrt(np.abs(theirs))
        scale = np.linalg.norm(ours_mu) / np.linalg.norm(theirs)
        np.testing.assert_allclose(ours_mu, theirs * scale, rtol=1e-6, atol=1e-9)


def test_the_gist_floor_counts_the_transforms_gist_computes():
    """``gist`` runs its Gabor stage as FFTs of the 192-point padded image: the floor's count,
    by hand, is 2·192 forward lines and 32 × (192 + 128) inverse lines of 5·192·log2(192)."""
    bank = DESCRIPTORS["gist"]().fit()._bank()
    assert bank.gabor is not None and bank.gabor.shape == (32, 192, 192)
    assert _fft_flops(bank) == pytest.approx((384 + 32 * 320) * 5 * 192 * 7.584962500721156)
    images = crops(3, size=128)
    assert _ffts_only(images, bank.n_filters, bank.boundary_extension, 2) == 3
