"""Gaussian random projection (used by paper 000's RPLap, Table 1)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state

from imgscale.pipeline.embed._base import RowTransformerMixin
from imgscale.pipeline.fitted import Shape
from imgscale.pipeline.params import Interval


class GaussianRandomProjection(RowTransformerMixin, BaseEstimator):
    """z = Rx with Rᵢⱼ ~ N(0, 1/k), so E‖z‖² = ‖x‖² (Johnson–Lindenstrauss).

    Parameters
    ----------
    n_components : int, default=1000
        k, the output dimension (paper 000 §4.1 uses 1,000 projections for RPLap).
    random_state : int, RandomState instance or None, default=None

    Attributes
    ----------
    components_ : ndarray of shape (n_components_, n_features_in_), float32
        R.
    n_components_ : int
    n_features_in_ : int

    References
    ----------
    Dasgupta & Gupta, "An elementary proof of a theorem of Johnson and Lindenstrauss", 2003.
    Gong & Lazebnik, CVPR 2011, §3.2.1 and Table 1 (RPLap).
    """

    # The fitted arrays and their shapes (`pipeline.fitted`): D features, K components.
    _fitted_shapes: ClassVar[dict[str, Shape]] = {"components_": ("K", "D")}

    # What each parameter may be (`pipeline.params`), checked when fit reads its rows.
    _parameter_rules: ClassVar[dict[str, tuple]] = {"n_components": (Interval(int, 1, None),)}

    def __init__(self, n_components: int = 1000, random_state: Any = None):
        self.n_components = n_components
        self.random_state = random_state

    def fit(self, X: Any, y: Any = None) -> GaussianRandomProjection:
        """Draw R (only the input width is read from X)."""
        X = self._check_rows(X, reset=True)
        rng = check_random_state(self.random_state)
        k = int(self.n_components)
        R = rng.standard_normal((k, self.n_features_in_)) / np.sqrt(k)
        self.components_ = R.astype(np.float32)
        self.n_components_ = k
        return self

    def _transform_params(self) -> tuple[np.ndarray]:
        return (np.ascontiguousarray(self.components_.T),)

    @staticmethod
    def _transform_block(X: np.ndarray, projection: np.ndarray, row_start: int = 0) -> np.ndarray:
        return X @ projection
