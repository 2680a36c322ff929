"""PCALap: separable Laplacian eigenfunctions along PCA directions (paper 000 Table 1)."""

from __future__ import annotations

from typing import Any

import numpy as np

from imgscale.pipeline.embed.eigenfunctions import SeparableEigenfunctions
from imgscale.pipeline.embed.pca import PCA


def pca_rotation(X: Any, n_directions: int | None) -> tuple[np.ndarray, np.ndarray, float]:
    """(D, k) PCA directions, the (k,) offset μR and the rows' total variance (the trace of
    their covariance, all D directions), from PCA's one streaming pass."""
    n_features = X.shape[1]
    k = n_features if n_directions is None else min(int(n_directions), n_features)
    pca = PCA(n_components=k).fit(X)
    projection = np.ascontiguousarray(pca.components_.T)
    n = pca.n_rows_
    total_variance = (np.trace(pca.gram_) - n * pca.mean_ @ pca.mean_) / (n - 1)
    offset = (pca.mean_ @ projection.astype(np.float64)).astype(np.float32)
    return projection, offset, max(float(total_variance), 0.0)


class PCALap(SeparableEigenfunctions):
    """Approximate graph-Laplacian eigenvectors of rows whose PCA projections are independent.

    For each of the top PCA directions, the random-walk Laplacian of a B-bin histogram of the
    projections (Gaussian affinity, P the histogram density) gives 1-D eigenfunctions
    (D̃ − PW̃P)g = σPD̂g; the `n_components` with smallest σ over all directions, excluding
    the constant ones, embed a row by linear interpolation (`pipeline.embed.eigenfunctions`).

    Parameters
    ----------
    n_directions : int or None, default=50
        PCA directions (paper 000 §4.1: 50 for small labelled sets, None = all for large).
    n_components : int or None, default=None
        Eigenfunctions kept, d; None keeps 2 per direction (paper 000 §4.1).
    n_bins : int, default=50
        B, histogram bins per direction (paper 000 Table 1: q = 50).
    bandwidth : float, default=0.2
        Fergus et al.'s SIGMA (0.2 in their code, paper 000 §4.1) in units of the rows' RMS
        distance from their mean: every direction's Gaussian affinity has ω = √2 · bandwidth ·
        rms_radius_ (`_bandwidths`).
    epsilon : float, default=0.1
        Constant added to the normalised histogram before it becomes P (Fergus et al.: no bin
        of zero density).

    Attributes
    ----------
    components_ : ndarray of shape (k, n_features_in_), float32
        Rotation R (rows are PCA directions); offset_ (k,) is μR.
    bin_low_, bin_width_ : ndarray of shape (k,)
        Bin edges: bin j of direction m is bin_low_[m] + [j, j + 1)·bin_width_[m].
    bin_counts_ : ndarray of shape (k, n_bins), int64
        Histograms of all rows seen, that `partial_fit` adds to; n_rows_ is their total.
    rms_radius_ : float
        √(total variance) of the first fit's rows: their RMS distance from their mean.
    bandwidths_ : ndarray of shape (k,)
        ω of each direction in projected units (the same for all).
    eigenvalues_ : ndarray of shape (n_components_,)
        σ of the kept eigenfunctions, ascending (Σ of paper 001 eq. 3).
    dims_ : ndarray of shape (n_components_,), int64
        The direction each kept eigenfunction lives on.
    eigenfunctions_ : ndarray of shape (n_components_, n_bins), float32
        g at the bin centres, scaled to unit mean square over the rows seen.
    clip_low_, clip_high_ : ndarray of shape (k,)
        Projected values are clipped to these (2.5th/97.5th percentiles) before interpolation.
    n_components_, n_features_in_ : int

    References
    ----------
    Gong & Lazebnik, CVPR 2011, §3.2.1, Table 1 and §4.1. Fergus, Weiss & Torralba,
    "Semi-supervised learning in gigantic image collections", NIPS 2009.
    """

    def __init__(
        self,
        n_directions: int | None = 50,
        n_components: int | None = None,
        n_bins: int = 50,
        bandwidth: float = 0.2,
        epsilon: float = 0.1,
    ):
        self.n_directions = n_directions
        self.n_components = n_components
        self.n_bins = n_bins
        self.bandwidth = bandwidth
        self.epsilon = epsilon

    def _fit_rotation(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        projection, offset, total_variance = pca_rotation(X, self.n_directions)
        self.rms_radius_ = float(np.sqrt(total_variance))
        return projection, offset

    def _bandwidths(self, centres: np.ndarray, empirical: np.ndarray) -> np.ndarray:
        """One ω for every direction: √2 · `bandwidth` · the rows' RMS distance from their mean.

        Fergus et al.'s code builds each direction's affinity exp(−(Δ/√2)²/2·SIGMA²) from
        bin-centre distances Δ in the data's own units, with the same SIGMA = 0.2 for every
        direction, on rows of about unit norm (paper 001's L2-normalised VLAD): eigenvalues then
        compare across directions, so the C_D smallest come mostly from the widest directions,
        several from each, and a direction much narrower than ω offers none (σ → 1). Scaling
        SIGMA by the RMS radius keeps that for rows of any scale (pixels in [0, 1] or [0, 255]).
        """
        # Radius 0: every row the same, every direction one bin; any ω gives the same result.
        radius = self.rms_radius_ if self.rms_radius_ > 0 else 1.0
        return np.full(len(centres), np.sqrt(2) * self.bandwidth * radius)
