"""Principal component analysis from one streaming pass (used by paper 000's PCALap, Table 1)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator

from imgscale.pipeline.embed._base import RowTransformerMixin
from imgscale.pipeline.fitted import Shape
from imgscale.pipeline.principal_axes import covariance_stats, principal_axes
from imgscale.pipeline.reductions import RowStats


class PCA(RowTransformerMixin, BaseEstimator):
    """Project onto the top eigenvectors of the covariance: z = (x − μ)V (optionally whitened).

    One pass over the rows accumulates n, Σx and XᵀX in float64 (`pipeline.reductions.row_stats`,
    every row labelled with one class so the Gram counts them all); the covariance
    (XᵀX − nμμᵀ)/(n − 1) is then eigendecomposed on the client (D × D). Component signs follow
    scikit-learn: the largest-magnitude entry of each component is positive.

    Parameters
    ----------
    n_components : int or None, default=None
        Components kept; None keeps all D.
    whiten : bool, default=False
        Divide each output by the square root of its variance (unit-variance outputs).

    Attributes
    ----------
    components_ : ndarray of shape (n_components_, n_features_in_), float32
        Principal axes, by decreasing variance.
    explained_variance_ : ndarray of shape (n_components_,)
    mean_ : ndarray of shape (n_features_in_,), float64
    n_rows_, feature_sum_, gram_ :
        Sufficient statistics that `partial_fit` adds to.
    n_components_ : int
    n_features_in_ : int

    References
    ----------
    Gong & Lazebnik, CVPR 2011, Table 1 (PCALap's first step); Fergus, Weiss & Torralba,
    "Semi-supervised learning in gigantic image collections", NIPS 2009.
    """

    # The fitted arrays and their shapes (`pipeline.fitted`): D features, K components.
    _fitted_shapes: ClassVar[dict[str, Shape]] = {
        "components_": ("K", "D"),
        "mean_": ("D",),
        "feature_sum_": ("D",),
        "gram_": ("D", "D"),
        "explained_variance_": ("K",),
    }

    def __init__(self, n_components: int | None = None, whiten: bool = False):
        self.n_components = n_components
        self.whiten = whiten

    def fit(self, X: Any, y: Any = None) -> PCA:
        """One pass for the mean and covariance, then one D × D eigendecomposition."""
        for name in ("n_rows_", "feature_sum_", "gram_"):
            self.__dict__.pop(name, None)
        return self.partial_fit(X)

    def partial_fit(self, X: Any, y: Any = None) -> PCA:
        """Add the rows of X to the statistics and recompute the components."""
        first = not hasattr(self, "gram_")
        X = self._check_rows(X, reset=first)
        stats = covariance_stats(X)
        if not first:
            stats = stats + RowStats(
                n_rows=self.n_rows_,
                feature_sum=self.feature_sum_,
                class_sums=self.feature_sum_[None, :],
                class_counts=np.array([self.n_rows_]),
                gram=self.gram_,
            )
        mean, variances, axes = principal_axes(stats, self.n_components)
        self.n_rows_ = int(stats.n_rows)
        self.feature_sum_ = stats.feature_sum
        self.gram_ = stats.gram
        self.mean_ = mean
        self.explained_variance_ = variances
        self.components_ = np.ascontiguousarray(axes, dtype=np.float32)
        self.n_components_ = len(axes)
        return self

    def _transform_params(self) -> tuple[np.ndarray, np.ndarray]:
        projection = self.components_.T.astype(np.float64)
        if self.whiten:
            scale = np.sqrt(self.explained_variance_)
            projection = projection / np.where(scale > 0, scale, 1.0)
        # Centre after projecting: (x − μ)V = xV − μV, one GEMM and a (k,) offset.
        return projection.astype(np.float32), (self.mean_ @ projection).astype(np.float32)

    @staticmethod
    def _transform_block(
        X: np.ndarray, projection: np.ndarray, offset: np.ndarray, row_start: int = 0
    ) -> np.ndarray:
        out = X @ projection
        out -= offset
        return out
