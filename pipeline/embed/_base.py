"""Input checks, row sampling and the lazy per-chunk plumbing shared by every embedding.

An embedding supplies `_transform_params()` (its fitted numpy arrays) and a static
`_transform_block(X, *params, row_start)` numpy kernel (`row_start` names rows in errors).
`RowTransformerMixin.transform` applies the kernel to a numpy array directly or, lazily with
`map_blocks`, to each row chunk of a dask array, with the parameters wrapped once in
`dask.delayed(..., pure=True)`: one graph key, sent once to each worker rather than embedded in
every task.
"""

from __future__ import annotations

from typing import Any

import dask
import dask.array as da
import numpy as np
from sklearn.base import TransformerMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from pipeline._compute import compute
from pipeline.classify._base import check_dask_X


def sample_rows(X: Any, n_samples: int, random_state: Any) -> np.ndarray:
    """`n_samples` distinct rows of `X` (all rows if fewer), in row order, as float32 numpy.

    Row indices are drawn on the client and the rows gathered with ``X[sorted_indices]``, so only
    the sample, never the n-row array, reaches the client.
    """
    n_rows = X.shape[0]
    rng = check_random_state(random_state)
    if n_samples >= n_rows:
        index = np.arange(n_rows)
    else:
        index = np.sort(rng.choice(n_rows, n_samples, replace=False))
    sample = X[index]
    if isinstance(sample, da.Array):
        sample = compute(sample)[0]
    return np.ascontiguousarray(sample, dtype=np.float32)


def check_non_negative_block(X: np.ndarray, row_start: int, what: str) -> None:
    if X.size and X.min() < 0:
        rows = np.flatnonzero((X < 0).any(axis=1))[:10] + row_start
        raise ValueError(f"Negative values in data passed to {what}: rows {rows.tolist()}")


class RowTransformerMixin(TransformerMixin):
    """`transform` for numpy or row-chunked dask input, from a per-block numpy kernel."""

    def _check_rows(self, X: Any, *, reset: bool) -> Any:
        """X as float32 (numpy) or full-width row chunks cast lazily to float32 (dask)."""
        if isinstance(X, da.Array):
            X = check_dask_X(X, None if reset else self.n_features_in_)
            if reset:
                self.n_features_in_ = int(X.shape[1])
            return X
        return validate_data(self, X, reset=reset, dtype=np.float32)

    def transform(self, X: Any) -> Any:
        """Embed the rows of X: float32 (n, n_components_), lazy for dask input."""
        check_is_fitted(self)
        X = self._check_rows(X, reset=False)
        params = tuple(self._transform_params())
        if not isinstance(X, da.Array):
            return self._transform_block(X, *params, row_start=0)
        shared = dask.delayed(params, pure=True)
        return X.map_blocks(
            _apply_block,
            self._transform_block,
            shared,
            dtype=np.float32,
            chunks=(X.chunks[0], (self._n_output_features(),)),
        )

    def _n_output_features(self) -> int:
        return int(self.n_components_)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float32"]
        return tags


def _apply_block(X: np.ndarray, kernel: Any, params: tuple, block_info=None) -> np.ndarray:
    row_start = block_info[0]["array-location"][0][0] if block_info else 0
    return kernel(X, *params, row_start=row_start)
