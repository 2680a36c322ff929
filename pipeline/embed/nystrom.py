"""Nyström approximation of normalized-Laplacian eigenvectors (paper 000 §3.2.1, §4.1)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import scipy.linalg
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state

from imgscale.pipeline.embed._bandwidth import rbf_gamma
from imgscale.pipeline.embed._base import RowTransformerMixin
from imgscale.pipeline.embed._kernels import kernel_matrix
from imgscale.pipeline.fitted import Shape
from imgscale.pipeline.params import Interval, Options
from imgscale.pipeline.rows import sample_rows

KERNELS = ("gaussian", "intersection")


class Nystrom(RowTransformerMixin, BaseEstimator):
    """Smoothest eigenvectors of the normalized Laplacian I − D^{-1/2}KD^{-1/2}, via landmarks.

    On m landmark rows sampled from the data, with kernel matrix K and degrees dᵢ = Σⱼ Kᵢⱼ, the
    normalized affinity A = D^{-1/2}KD^{-1/2} is decomposed; the eigenvectors of the Laplacian
    I − A with the smallest eigenvalues are those of A with the largest, μ₁ = 1 ≥ μ₂ ≥ …. The
    first (trivial, ∝ D^{1/2}1) is dropped and the next d kept as U (m × d). A row x is embedded
    by the Nyström extension f(x) = √m · a(x) U diag(1/μ), with aⱼ(x) = k(x, lⱼ)/√(d(x) dⱼ).

    Degree of a new row: d(x) = Σⱼ k(x, lⱼ), its kernel sum over the *landmarks*, i.e. x's
    degree in the landmark graph with x added — the same normalisation as a landmark's own dᵢ
    and not rescaled by n/m. With this choice a landmark lᵢ is embedded exactly at its own
    eigenvector entries √m·Uᵢ, and when every row is a landmark the embedding equals the exact
    normalized-Laplacian eigenvectors. The factor √m gives each coordinate unit mean square over
    the landmarks, so the ridge ρ grid does not depend on m.

    Parameters
    ----------
    n_components : int, default=50
        d, eigenvectors kept (paper 000 §4.1: 50 with few labels, 500 with many).
    n_landmarks : int, default=1000
        m, rows sampled as landmarks (paper 000 §4.1).
    kernel : {"gaussian", "intersection"}, default="gaussian"
        exp(−γ‖x − y‖²/2) (GIST) or Σⱼ min(xⱼ, yⱼ) (bag of words, no parameter).
    gamma : float or None, default=None
        γ = 1/σ² of the Gaussian kernel; None sets σ to the mean distance to the
        `n_neighbors`-th nearest neighbour (paper 000 §4.1), as in `RandomFourierFeatures`.
    n_neighbors : int, default=50
    bandwidth_sample : int, default=500
        Query rows sampled for the bandwidth.
    random_state : int, RandomState instance or None, default=None

    Attributes
    ----------
    landmarks_ : ndarray of shape (m, n_features_in_), float32
    landmark_degrees_ : ndarray of shape (m,), float32
        dⱼ = Σᵢ k(lᵢ, lⱼ).
    projection_ : ndarray of shape (m, n_components_), float32
        √m · D^{-1/2} U diag(1/μ): a row's embedding is ``k(x, L) / √d(x) @ projection_``.
    eigenvalues_ : ndarray of shape (n_components_,)
        Laplacian eigenvalues 1 − μ of the kept eigenvectors, ascending.
    gamma_ : float or None
        γ used by the Gaussian kernel (None for intersection).
    n_components_ : int
        min(n_components, m − 1).
    n_features_in_ : int

    References
    ----------
    Fowlkes, Belongie, Chung & Malik, "Spectral grouping using the Nyström method", PAMI 2004.
    Gong & Lazebnik, CVPR 2011, §3.2.1 (method) and §4.1 (landmarks, bandwidth, d).
    """

    # The fitted arrays and their shapes (`pipeline.fitted`): L landmarks, K components.
    _fitted_shapes: ClassVar[dict[str, Shape]] = {
        "landmarks_": ("L", "D"),
        "landmark_degrees_": ("L",),
        "projection_": ("L", "K"),
        "eigenvalues_": ("K",),
    }

    # What each parameter may be (`pipeline.params`), checked when fit reads its rows.
    _parameter_rules: ClassVar[dict[str, tuple]] = {
        "n_components": (Interval(int, 1, None),),
        "n_landmarks": (Interval(int, 2, None),),
        "kernel": (Options(KERNELS),),
        "gamma": (Interval(float, 0, None, closed="neither"), None),
        "n_neighbors": (Interval(int, 1, None),),
        "bandwidth_sample": (Interval(int, 1, None),),
    }

    def __init__(
        self,
        n_components: int = 50,
        n_landmarks: int = 1000,
        kernel: str = "gaussian",
        gamma: float | None = None,
        n_neighbors: int = 50,
        bandwidth_sample: int = 500,
        random_state: Any = None,
    ):
        self.n_components = n_components
        self.n_landmarks = n_landmarks
        self.kernel = kernel
        self.gamma = gamma
        self.n_neighbors = n_neighbors
        self.bandwidth_sample = bandwidth_sample
        self.random_state = random_state

    def fit(self, X: Any, y: Any = None) -> Nystrom:
        """Sample landmarks (and for the Gaussian kernel without `gamma`, one bandwidth pass)."""
        X = self._check_rows(X, reset=True)
        if X.shape[0] < 2:
            raise ValueError(f"Nystrom needs at least 2 rows, got n_samples = {X.shape[0]}")
        rng = check_random_state(self.random_state)
        gamma = None
        if self.kernel == "gaussian":
            gamma = rbf_gamma(X, self.gamma, self.n_neighbors, self.bandwidth_sample, rng)
        landmarks = sample_rows(X, self.n_landmarks, rng)
        self._fit_landmarks(landmarks, gamma)
        return self

    def _fit_landmarks(self, landmarks: np.ndarray, gamma: float | None) -> None:
        m = len(landmarks)
        K = kernel_matrix(landmarks, landmarks, self.kernel, gamma).astype(np.float64)
        degrees = K.sum(axis=1)
        if not (degrees > 0).all():
            raise ValueError("a landmark has zero degree (an all-zero row, intersection kernel)")
        inv_sqrt = 1 / np.sqrt(degrees)
        affinity = inv_sqrt[:, None] * K * inv_sqrt[None, :]
        d = min(int(self.n_components), m - 1)
        # Largest d + 1 eigenvalues of A, i.e. smallest of the Laplacian I − A.
        mu, U = scipy.linalg.eigh(affinity, subset_by_index=(m - d - 1, m - 1))
        mu, U = mu[::-1][1:], U[:, ::-1][:, 1:]
        if not (np.abs(mu) > 1e-10).all():
            raise ValueError("the landmark graph has zero eigenvalues among those kept; use fewer")
        self.landmarks_ = landmarks
        self.landmark_degrees_ = degrees.astype(np.float32)
        self.projection_ = (np.sqrt(m) * inv_sqrt[:, None] * U / mu[None, :]).astype(np.float32)
        self.eigenvalues_ = 1 - mu
        self.gamma_ = gamma
        self.n_components_ = d

    def _transform_params(self) -> tuple:
        return self.landmarks_, self.projection_, self.kernel, self.gamma_

    @staticmethod
    def _transform_block(
        X: np.ndarray,
        landmarks: np.ndarray,
        projection: np.ndarray,
        kernel: str,
        gamma: float | None,
        row_start: int = 0,
    ) -> np.ndarray:
        K = kernel_matrix(X, landmarks, kernel, gamma)
        degrees = K.sum(axis=1)
        # A row with no similarity to any landmark (all-zero histogram) embeds at the origin.
        inv_sqrt = np.divide(1, np.sqrt(degrees), out=np.zeros_like(degrees), where=degrees > 0)
        K *= inv_sqrt[:, None]
        return K @ projection
