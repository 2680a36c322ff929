"""Square-root embedding, exact for the Bhattacharyya kernel (paper 000 §3.2.2)."""

from __future__ import annotations

from typing import Any, ClassVar

import dask.array as da
import numpy as np
from sklearn.base import BaseEstimator

from imgscale.pipeline.embed._base import RowTransformerMixin, check_non_negative_block
from imgscale.pipeline.fitted import Shape


class SquareRoot(RowTransformerMixin, BaseEstimator):
    """φ(x) = √x term by term, so φ(x)ᵀφ(y) = k(x, y) = Σⱼ √(xⱼ yⱼ) exactly (Bhattacharyya).

    For histograms (bag of words): features must be non-negative.

    Attributes
    ----------
    n_components_ : int
        Equal to n_features_in_.
    n_features_in_ : int

    References
    ----------
    Perronnin, Sánchez & Liu, "Large-scale image categorization with explicit data embedding",
    CVPR 2010. Gong & Lazebnik, CVPR 2011, §3.2.2.
    """

    _fitted_shapes: ClassVar[dict[str, Shape]] = {}

    def fit(self, X: Any, y: Any = None) -> SquareRoot:
        """Record the input width (the map has no parameters).

        Numpy input is checked for negative values here; a dask array is not read by `fit`
        (no pass is needed), so its chunks are checked lazily by `transform`.
        """
        X = self._check_rows(X, reset=True)
        if not isinstance(X, da.Array):
            check_non_negative_block(X, 0, "SquareRoot")
        self.n_components_ = self.n_features_in_
        return self

    def _transform_params(self) -> tuple:
        return ()

    @staticmethod
    def _transform_block(X: np.ndarray, row_start: int = 0) -> np.ndarray:
        check_non_negative_block(X, row_start, "SquareRoot")
        return np.sqrt(X, dtype=np.float32)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.positive_only = True
        return tags
