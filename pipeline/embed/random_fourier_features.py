"""Random Fourier features for the Gaussian kernel (paper 000 §3.2.2)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state

from imgscale.pipeline.embed._bandwidth import rbf_gamma
from imgscale.pipeline.embed._base import RowTransformerMixin
from imgscale.pipeline.fitted import Shape
from imgscale.pipeline.params import Interval


class RandomFourierFeatures(RowTransformerMixin, BaseEstimator):
    """z(x) = √(2/d) cos(Wᵀx + b) with z(x)ᵀz(y) ≈ k(x, y) = exp(−γ‖x − y‖²/2).

    Each column of W is drawn from N(0, γI) and b from U[0, 2π] (Rahimi & Recht). The paper
    writes each coordinate as √2 cos(wᵀx + b); the extra 1/√d makes dot products approximate the
    kernel itself, independent of d, so one ridge grid of ρ suits every d. Note the kernel is
    exp(−γ‖x − y‖²/2): scikit-learn's ``RBFSampler(gamma=g)`` is exp(−g‖x − y‖²), i.e. g = γ/2.

    Parameters
    ----------
    n_components : int, default=2000
        Embedding dimension d (paper 000 §4.1 uses 2,000).
    gamma : float or None, default=None
        Inverse squared bandwidth γ = 1/σ². None sets σ to the mean distance from a sample of
        rows to their `n_neighbors`-th nearest neighbour among all rows (paper 000 §4.1).
    n_neighbors : int, default=50
        Neighbour rank for the bandwidth.
    bandwidth_sample : int, default=500
        Query rows sampled for the bandwidth; their neighbours are searched in one pass.
    random_state : int, RandomState instance or None, default=None

    Attributes
    ----------
    gamma_ : float
        The γ used.
    random_weights_ : ndarray of shape (n_features_in_, n_components), float32
        W.
    random_offset_ : ndarray of shape (n_components,), float32
        b.
    n_components_ : int
    n_features_in_ : int

    References
    ----------
    Rahimi & Recht, "Random features for large-scale kernel machines", NIPS 2007.
    Gong & Lazebnik, "Comparing data-dependent and data-independent embeddings for classification
    and ranking of Internet images", CVPR 2011, §3.2.2 (embedding) and §4.1 (bandwidth).
    """

    # The fitted arrays and their shapes (`pipeline.fitted`): D features, K components.
    _fitted_shapes: ClassVar[dict[str, Shape]] = {
        "random_weights_": ("D", "K"),
        "random_offset_": ("K",),
    }

    # What each parameter may be (`pipeline.params`), checked when fit reads its rows.
    _parameter_rules: ClassVar[dict[str, tuple]] = {
        "n_components": (Interval(int, 1, None),),
        "gamma": (Interval(float, 0, None, closed="neither"), None),
        "n_neighbors": (Interval(int, 1, None),),
        "bandwidth_sample": (Interval(int, 1, None),),
    }

    def __init__(
        self,
        n_components: int = 2000,
        gamma: float | None = None,
        n_neighbors: int = 50,
        bandwidth_sample: int = 500,
        random_state: Any = None,
    ):
        self.n_components = n_components
        self.gamma = gamma
        self.n_neighbors = n_neighbors
        self.bandwidth_sample = bandwidth_sample
        self.random_state = random_state

    def fit(self, X: Any, y: Any = None) -> RandomFourierFeatures:
        """Draw W and b; without `gamma`, one pass over X sets the bandwidth."""
        X = self._check_rows(X, reset=True)
        rng = check_random_state(self.random_state)
        gamma = rbf_gamma(X, self.gamma, self.n_neighbors, self.bandwidth_sample, rng)
        d = int(self.n_components)
        weights = rng.standard_normal((self.n_features_in_, d)) * np.sqrt(gamma)
        self.gamma_ = gamma
        self.random_weights_ = weights.astype(np.float32)
        self.random_offset_ = rng.uniform(0, 2 * np.pi, d).astype(np.float32)
        self.n_components_ = d
        return self

    def _transform_params(self) -> tuple[np.ndarray, np.ndarray]:
        return self.random_weights_, self.random_offset_

    @staticmethod
    def _transform_block(
        X: np.ndarray, weights: np.ndarray, offset: np.ndarray, row_start: int = 0
    ) -> np.ndarray:
        P = X @ weights
        P += offset
        np.cos(P, out=P)
        P *= np.float32(np.sqrt(2.0 / weights.shape[1]))
        return P
