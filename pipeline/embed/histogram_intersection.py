"""Histogram intersection kernel embedding, HIKE (paper 000 §3.2.2; Maji & Berg's φ2)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator

from imgscale.pipeline.compute import compute
from imgscale.pipeline.embed._base import RowTransformerMixin, check_non_negative_block
from imgscale.pipeline.fitted import Shape
from imgscale.pipeline.params import Interval
from imgscale.pipeline.reductions import reduce_rows


@dataclass
class ColumnMax:
    """Per-column maximum of a set of rows; ``+`` merges two sets (for `reduce_rows`)."""

    values: np.ndarray

    def __add__(self, other: ColumnMax) -> ColumnMax:
        return ColumnMax(np.maximum(self.values, other.values))


def chunk_column_max(X: np.ndarray, row_start: int = 0) -> ColumnMax:
    check_non_negative_block(X, row_start, "HistogramIntersection")
    if len(X) == 0:
        return ColumnMax(np.zeros(X.shape[1], dtype=np.float32))
    return ColumnMax(X.max(axis=0))


class HistogramIntersection(RowTransformerMixin, BaseEstimator):
    """φ(x)ᵀφ(y) = Σⱼ min(x̂ⱼ, ŷⱼ): the intersection kernel on values quantised to B levels.

    Column j is split into B equal steps Δⱼ = maxⱼ / B over [0, maxⱼ] (maxⱼ from the fit rows);
    a value is rounded to its nearest level x̂ = qΔⱼ, q ∈ {0, …, B} (values above maxⱼ clip to B),
    and written in unary as q entries √Δⱼ followed by B − q zeros. Then
    φ(x)ᵀφ(y) = Σⱼ Δⱼ min(q(xⱼ), q(yⱼ)) = Σⱼ min(x̂ⱼ, ŷⱼ) exactly. The dimension grows B-fold
    (paper 000 §4.1: B = 8 on 400-D bag of words gives 3,200). Features must be non-negative.

    Parameters
    ----------
    n_levels : int, default=8
        B, the quantisation levels per input dimension.

    Attributes
    ----------
    max_ : ndarray of shape (n_features_in_,), float32
        Per-column maximum seen by `fit`; the top of the quantisation range.
    n_components_ : int
        n_features_in_ · n_levels.
    n_features_in_ : int

    References
    ----------
    Maji & Berg, "Max-margin additive classifiers for detection", ICCV 2009 (φ2, unary encoding).
    Gong & Lazebnik, CVPR 2011, §3.2.2 and §4.1.
    """

    # The fitted arrays and their shapes (`pipeline.fitted`): D features.
    _fitted_shapes: ClassVar[dict[str, Shape]] = {"max_": ("D",)}

    # What each parameter may be (`pipeline.params`), checked when fit reads its rows.
    _parameter_rules: ClassVar[dict[str, tuple]] = {"n_levels": (Interval(int, 1, None),)}

    def __init__(self, n_levels: int = 8):
        self.n_levels = n_levels

    def fit(self, X: Any, y: Any = None) -> HistogramIntersection:
        """One pass for the per-column maximum."""
        X = self._check_rows(X, reset=True)
        column_max = compute(reduce_rows(chunk_column_max, [X], blocks_per_task="auto"))[0]
        self.max_ = np.asarray(column_max.values, np.float32)
        self.n_components_ = self.n_features_in_ * int(self.n_levels)
        return self

    def _transform_params(self) -> tuple[np.ndarray, int]:
        return self.max_, int(self.n_levels)

    @staticmethod
    def _transform_block(
        X: np.ndarray, col_max: np.ndarray, n_levels: int, row_start: int = 0
    ) -> np.ndarray:
        check_non_negative_block(X, row_start, "HistogramIntersection")
        step = col_max / np.float32(n_levels)
        # An all-zero column has no range: every value quantises to level 0.
        scale = np.divide(1, step, out=np.zeros_like(step), where=step > 0)
        levels = np.rint(X * scale)
        np.clip(levels, 0, n_levels, out=levels)
        out = np.arange(n_levels, dtype=np.float32) < levels[:, :, None]
        out = out.astype(np.float32)
        out *= np.sqrt(step)[None, :, None]
        return out.reshape(len(X), X.shape[1] * n_levels)  # also a block of no rows

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.positive_only = True
        return tags
