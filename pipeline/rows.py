"""Rows as every estimator takes them: the input checks, a random sample of rows, and the
squared distances between two sets of rows.

Embeddings and classifiers both use these (a classifier may embed, an embedding may rank rows
by distance), so they sit below both packages rather than in either.
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
from sklearn.utils import check_random_state
from sklearn.utils.validation import validate_data

from imgscale.pipeline.compute import gather_rows
from imgscale.pipeline.params import check_params


def check_dask_X(X: da.Array, n_features: int | None) -> da.Array:
    """Dask counterpart of sklearn's input checks: 2-D, full-width row chunks, float32."""
    if X.ndim != 2:
        raise ValueError(f"expected a 2-D array of features, got shape {X.shape}")
    if n_features is not None and X.shape[1] != n_features:
        raise ValueError(f"X has {X.shape[1]} features, but the model expects {n_features}")
    if X.dtype.kind not in "fiub":
        raise ValueError(f"expected numeric features, got dtype {X.dtype}")
    return X.rechunk({1: -1}).astype(np.float32, copy=False)


def check_rows(estimator: Any, X: Any, *, reset: bool) -> Any:
    """X as ``estimator`` takes it: float32 numpy (scikit-learn's `validate_data`) or full-width
    row chunks cast lazily to float32 (dask), of ``n_features_in_`` columns. With ``reset`` (a
    fit), the estimator's parameters are checked first (`pipeline.params`) and ``n_features_in_``
    is set from X."""
    if reset:
        check_params(estimator)
    if not isinstance(X, da.Array):
        return validate_data(estimator, X, reset=reset, dtype=np.float32)
    X = check_dask_X(X, None if reset else estimator.n_features_in_)
    if reset:
        estimator.n_features_in_ = int(X.shape[1])
    return X


def sample_rows(X: Any, n_samples: int, random_state: Any) -> np.ndarray:
    """`n_samples` distinct rows of `X` (all rows if fewer), in row order, as float32 numpy.

    Row indices are drawn on the client and the rows gathered chunk by chunk (`gather_rows`), so
    only the sample, never the n-row array, reaches the client.
    """
    n_rows = X.shape[0]
    rng = check_random_state(random_state)
    if n_samples >= n_rows:
        index = np.arange(n_rows)
    else:
        index = np.sort(rng.choice(n_rows, n_samples, replace=False))
    return np.ascontiguousarray(gather_rows(X, index), dtype=np.float32)


def squared_distances(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """‖a − b‖² for every row pair (len(A) × len(B)) in A's dtype, clipped at 0 (rounding)."""
    out = A @ B.T
    out *= -2
    out += np.einsum("ij,ij->i", A, A)[:, None]
    out += np.einsum("ij,ij->i", B, B)[None, :]
    return np.maximum(out, 0, out=out)
