"""Improved Fisher vectors of dense SIFT and local colour statistics (paper 002 §5.1)."""

from __future__ import annotations

from typing import Any, ClassVar

import numba
import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from imgscale.pipeline.describe._images import check_images
from imgscale.pipeline.describe.dense_sift import DenseSift, check_grid_params, check_window
from imgscale.pipeline.describe.local_color import LocalColor
from imgscale.pipeline.describe.vocabulary import (
    Chunk,
    DescriptorChunks,
    InMemoryChunks,
    fit_gmm,
    fit_kmeans,
    fit_pca,
    project,
    responsibilities,
)
from imgscale.pipeline.fitted import Shape

CHANNELS = ("sift", "color")
# Images encoded at once: their responsibilities are (images · patches · n_gaussians) float64.
_SLICE = 32
# The fitted arrays of one channel, each named "<channel>_<name>".
CHANNEL_ARRAYS = ("mean_", "components_", "weights_", "means_", "variances_")


def fisher_vectors(X: np.ndarray, weights, means, variances) -> np.ndarray:
    """Improved Fisher vectors of each image's local descriptors X (n, T, d): float64 (n, 2Kd).

    The gradients of the average log-likelihood w.r.t. the means and the standard deviations
    of a diagonal GMM, whitened by the Fisher information's diagonal approximation (Sánchez et
    al. 2013, eqs. 16–17; Perronnin et al. 2010, eqs. 7–8), from the image's statistics
    S0 = Σγ, S1 = Σγx, S2 = Σγx²:

        G_μk = (S1_k − S0_k μ_k) / (T √w_k σ_k)
        G_σk = (S2_k − 2 μ_k S1_k + (μ_k² − σ_k²) S0_k) / (T √(2 w_k) σ_k²)

    then power-normalised, sign(z)·|z|^½, and L2-normalised (Perronnin et al. 2010, §3). Rows are
    [G_μ1 … G_μK, G_σ1 … G_σK], each d long.
    """
    n, T, d = X.shape
    gamma, _ = responsibilities(X.reshape(-1, d), weights, means, variances)
    gamma = gamma.reshape(n, T, -1)
    X = X.astype(np.float64)
    # Batched products (BLAS), not einsum's loops: several times faster for the same sums.
    per_image = gamma.transpose(0, 2, 1)
    s1 = per_image @ X
    s2 = per_image @ (X * X)
    # G_μ = a·S1 − b·S0 and G_σ = c·S2 − e·S1 + f·S0, with per-Gaussian coefficients.
    a = 1 / (T * np.sqrt(weights)[:, None] * np.sqrt(variances))
    c = 1 / (T * np.sqrt(2 * weights)[:, None] * variances)
    out = np.empty((n, 2 * means.size))
    _normalised_gradients(
        gamma.sum(axis=1), s1, s2, a, means * a, c, 2 * means * c, (means**2 - variances) * c, out
    )
    return out


@numba.njit(cache=True, nogil=True)
def _normalised_gradients(s0, s1, s2, a, b, c, e, f, out):  # pragma: no cover
    """out[i] = the power- and L2-normalised [G_μ, G_σ] of image i, in one pass over its
    statistics (numpy's elementwise steps, each a temporary of the whole slice, cost more than
    the products that make the statistics)."""
    n, K, d = s1.shape
    for i in range(n):
        total = 0.0
        for k in range(K):
            for j in range(d):
                g_mean = a[k, j] * s1[i, k, j] - b[k, j] * s0[i, k]
                g_sigma = c[k, j] * s2[i, k, j] - e[k, j] * s1[i, k, j] + f[k, j] * s0[i, k]
                g_mean = np.sign(g_mean) * np.sqrt(np.abs(g_mean))
                g_sigma = np.sign(g_sigma) * np.sqrt(np.abs(g_sigma))
                out[i, k * d + j] = g_mean
                out[i, (K + k) * d + j] = g_sigma
                total += g_mean * g_mean + g_sigma * g_sigma
        out[i] /= max(np.sqrt(total), 1e-12)


class FisherVector(TransformerMixin, BaseEstimator):
    """One improved Fisher vector per channel of local descriptors, concatenated: dense SIFT
    ("sift") and the means and standard deviations of R, G, B in 4×4 cells ("color"), each
    PCA-projected to ``n_components`` dimensions and encoded against its own diagonal GMM.

    Paper 002 §5.1 (after Perronnin et al. 2010): SIFT and colour descriptors on a dense grid,
    PCA to 64-D, GMMs of 16 or 256 Gaussians, gradients w.r.t. means and variances, power and
    L2 normalisation, the channels' vectors concatenated: 2 · 2 · K · 64 dimensions (4K-D at
    K = 16). Each channel's vector has unit norm. RootSIFT before the PCA is the default (the
    design doc's finding: it gained most, with a GMM that has converged).

    The vocabulary (per channel: PCA, then k-means to start EM, then EM to convergence) is
    learned by `fit` on images in memory, or by `fit_chunks` over local descriptors held
    elsewhere (``imgscale fit-features``: chunks on the Dask workers), one pass an iteration.

    Parameters
    ----------
    n_gaussians : int, default=16
    n_components : int, default=64
        PCA dimensions of each channel's descriptors.
    channels : tuple of str, default=("sift", "color")
    patch_sizes, step : the dense grid (`DenseSift`, `LocalColor`), default 16 px every 8 px.
    root : bool, default=True
        RootSIFT.
    sift_window : float, default=1.0
        Side of the window each SIFT descriptor covers, in patch sides (`DenseSift`'s window;
        1 is the patch alone, as saved vocabularies without it were fitted).
    image_size : int, default=128
        Side of the square RGB images `transform` takes.
    max_iter : int, default=100
        EM iterations at most (k-means, which starts EM, runs at most 50).
    tol : float, default=1e-3
        EM stops when the mean log-likelihood of a descriptor gains less: scikit-learn's
        GaussianMixture default on the same measure (its lower bound), with which EM stops
        where scikit-learn's does from the same start. A tenth of it asks for gains that EM,
        slow near its optimum, makes only after many more passes (on CIFAR-10's RootSIFT and
        colour descriptors at 64 Gaussians, more than ``max_iter``'s 100).
    random_state : int, default=0

    Attributes
    ----------
    <channel>_mean_, <channel>_components_ : the PCA (d,), (n_components, d)
    <channel>_weights_, <channel>_means_, <channel>_variances_ : the GMM (K,), (K, 64), (K, 64)
    log_likelihood_ : dict channel → mean log-likelihood of a descriptor under its GMM
    n_iter_ : dict channel → EM iterations
    n_features_out_ : int

    References
    ----------
    Perronnin, Sánchez & Mensink, "Improving the Fisher kernel for large-scale image
    classification", ECCV 2010.
    Sánchez, Perronnin, Mensink & Verbeek, "Image classification with the Fisher vector: theory
    and practice", IJCV 105(3), 2013.
    Mensink, Verbeek, Perronnin & Csurka, ECCV 2012, §5.1 (paper 002).
    """

    # Per channel of local descriptors (S: 128-D SIFT, R: 96-D colour statistics).
    _fitted_shapes: ClassVar[dict[str, Shape]] = {
        f"{channel}_{name}": shape
        for channel, width in (("sift", "S"), ("color", "R"))
        for name, shape in (
            ("mean_", (width,)),
            ("components_", ("n_components", width)),
            ("weights_", ("n_gaussians",)),
            ("means_", ("n_gaussians", "n_components")),
            ("variances_", ("n_gaussians", "n_components")),
        )
    }

    def __init__(
        self,
        n_gaussians: int = 16,
        n_components: int = 64,
        channels: tuple[str, ...] = CHANNELS,
        patch_sizes: tuple[int, ...] = (16,),
        step: int = 8,
        root: bool = True,
        sift_window: float = 1.0,
        image_size: int = 128,
        max_iter: int = 100,
        tol: float = 1e-3,
        random_state: int = 0,
    ):
        self.n_gaussians = n_gaussians
        self.n_components = n_components
        self.channels = channels
        self.patch_sizes = patch_sizes
        self.step = step
        self.root = root
        self.sift_window = sift_window
        self.image_size = image_size
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state

    @property
    def image_request(self) -> tuple[str, tuple[int, int]]:
        """RGB images of image_size × image_size (grey when SIFT is the only channel)."""
        mode = "RGB" if "color" in self.channels else "L"
        return mode, (self.image_size, self.image_size)

    def local_descriptors(self, images: Any) -> Chunk:
        """Each channel's descriptors of a batch of images, all rows together: (n·P, d)."""
        self.check_params()
        return {name: X.reshape(-1, X.shape[2]) for name, X in self._describe(images).items()}

    def fit(self, images: Any, y: Any = None) -> FisherVector:
        """Learn each channel's PCA and GMM from the local descriptors of ``images``."""
        chunk = self.local_descriptors(images)
        return self.fit_chunks(InMemoryChunks([chunk]), len(next(iter(chunk.values()))))

    def fit_chunks(self, chunks: DescriptorChunks, n_descriptors: int) -> FisherVector:
        """Learn each channel's PCA and GMM from local descriptors in ``chunks``
        (`local_descriptors` of batches of images), ``n_descriptors`` a channel."""
        self.check_params()
        self.log_likelihood_, self.n_iter_ = {}, {}
        for channel in self.channels:
            mean, components = fit_pca(chunks, channel, int(self.n_components))
            start = fit_kmeans(
                chunks,
                channel,
                (mean, components),
                int(self.n_gaussians),
                n_descriptors=n_descriptors,
                max_iter=50,
                tol=1e-4,
                random_state=self.random_state,
            )
            gmm = fit_gmm(
                chunks,
                channel,
                (mean, components),
                start,
                max_iter=int(self.max_iter),
                tol=float(self.tol),
            )
            fitted = (mean, components, gmm.weights, gmm.means, gmm.variances)
            for name, value in zip(CHANNEL_ARRAYS, fitted, strict=True):
                setattr(self, f"{channel}_{name}", value)
            self.log_likelihood_[channel] = float(gmm.log_likelihood)
            self.n_iter_[channel] = gmm.n_iter
        per_channel = 2 * int(self.n_gaussians) * int(self.n_components)
        self.n_features_out_ = per_channel * len(self.channels)
        return self

    def transform(self, images: Any) -> np.ndarray:
        """Fisher vectors of uint8 images as `image_request` says: float32 (n, n_features_out_)."""
        check_is_fitted(self)
        out = np.empty((len(images), self.n_features_out_), np.float32)
        width = self.n_features_out_ // len(self.channels)
        for start in range(0, len(images), _SLICE):
            local = self._describe(images[start : start + _SLICE])
            for c, channel in enumerate(self.channels):
                mean, components, weights, means, variances = (
                    getattr(self, f"{channel}_{name}") for name in CHANNEL_ARRAYS
                )
                X = project(local[channel], (mean, components))
                rows = fisher_vectors(X, weights, means, variances)
                out[start : start + len(rows), c * width : (c + 1) * width] = rows
        return out

    def _describe(self, images: Any) -> dict[str, np.ndarray]:
        """Each channel's local descriptors, (n, P, d)."""
        mode = self.image_request[0]
        images = check_images(images, mode, self.image_size, "FisherVector")
        images = np.asarray(images, np.uint8)
        local = {}
        if "sift" in self.channels:
            grey = images if mode == "L" else _luma(images)
            sift = DenseSift(tuple(self.patch_sizes), self.step, self.root, self.sift_window).fit()
            local["sift"] = sift.transform(grey)
        if "color" in self.channels:
            local["color"] = LocalColor(tuple(self.patch_sizes), self.step).fit().transform(images)
        return local

    def check_params(self) -> None:
        """Refuse parameters no image can be described with, before any image is read."""
        check_grid_params(self.patch_sizes, self.step, "FisherVector", self.image_size)
        check_window(self.sift_window, "FisherVector", "sift_window")
        channels = tuple(self.channels)
        if not channels or len(set(channels)) != len(channels) or set(channels) - set(CHANNELS):
            raise ValueError(
                f"FisherVector: channels must be some of {CHANNELS}, each once, got "
                f"{self.channels!r}"
            )
        for name in ("n_gaussians", "n_components"):
            value = getattr(self, name)
            if not isinstance(value, int | np.integer) or value < 1:
                raise ValueError(f"FisherVector: {name} must be an integer >= 1, got {value!r}")


def _luma(rgb: np.ndarray) -> np.ndarray:
    """ITU-R 601 luma of uint8 RGB, rounded as Pillow's convert("L") (L = R·299/1000 +
    G·587/1000 + B·114/1000 in 16-bit fixed point)."""
    r, g, b = (rgb[..., c].astype(np.uint32) for c in range(3))
    return ((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16).astype(np.uint8)
