"""RPLap: separable Laplacian eigenfunctions along Gaussian random projections (paper 000)."""

from __future__ import annotations

from typing import Any

import numpy as np

from imgscale.pipeline.embed.eigenfunctions import SeparableEigenfunctions
from imgscale.pipeline.embed.gaussian_random_projection import GaussianRandomProjection


def mean_absolute_difference(centres: np.ndarray, empirical: np.ndarray) -> np.ndarray:
    """E|s − s′| for two independent rows, per dimension, from its histogram (k,)."""
    diff = np.abs(centres[:, :, None] - centres[:, None, :])
    return np.einsum("ma,mab,mb->m", empirical, diff, empirical)


class RPLap(SeparableEigenfunctions):
    """Separable Laplacian eigenfunctions along Gaussian random projections, uniform marginals.

    As `PCALap`, but the rotation is z = Rx with Rᵢⱼ ~ N(0, 1/k) and P = I (paper 000 §3.2.1:
    "uniform marginals ... works just as well"); the histogram still fixes the bins, the
    bandwidth and the clipping, and scales the eigenfunctions.

    Parameters
    ----------
    n_directions : int, default=1000
        Random projections k (paper 000 §4.1).
    n_components : int or None, default=None
        Eigenfunctions kept; None keeps 2 per projection (paper 000 §4.1: 2,000).
    n_bins : int, default=50
    bandwidth : float, default=0.2
        ω of each projection as a fraction of its mean absolute difference E|s − s′| between
        two rows, estimated from its histogram: a per-dimension estimate from the data (paper
        000 uses Shi & Belkin's method, not reimplemented here).
    epsilon : float, default=0.1
        Unused with P = I; kept so the parameters match `PCALap`.
    random_state : int, RandomState instance or None, default=None

    Attributes
    ----------
    See `PCALap`; `offset_` is zero.

    References
    ----------
    Gong & Lazebnik, CVPR 2011, §3.2.1, Table 1 and §4.1.
    """

    _uses_density = False

    def __init__(
        self,
        n_directions: int = 1000,
        n_components: int | None = None,
        n_bins: int = 50,
        bandwidth: float = 0.2,
        epsilon: float = 0.1,
        random_state: Any = None,
    ):
        self.n_directions = n_directions
        self.n_components = n_components
        self.n_bins = n_bins
        self.bandwidth = bandwidth
        self.epsilon = epsilon
        self.random_state = random_state

    def _fit_rotation(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        rp = GaussianRandomProjection(int(self.n_directions), random_state=self.random_state)
        rp.fit(X)
        projection = np.ascontiguousarray(rp.components_.T)
        return projection, np.zeros(projection.shape[1], dtype=np.float32)

    def _bandwidths(self, centres: np.ndarray, empirical: np.ndarray) -> np.ndarray:
        spread = mean_absolute_difference(centres, empirical)
        # A dimension whose rows all share one bin has spread 0: fall back to one bin width.
        return self.bandwidth * np.where(spread > 0, spread, self.bin_width_ / self.bandwidth)
