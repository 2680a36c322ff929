"""Principal axes from one pass of row statistics: the eigendecomposition behind `embed.PCA` and
the metric learners' initial projection (paper 002 §3 starts W from PCA), in one place below both
`embed` and `classify`.
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
import scipy.linalg

from imgscale.pipeline.reductions import RowStats, row_stats


def covariance_stats(X: Any) -> RowStats:
    """n, Σx and XᵀX of the rows of X (numpy or row-chunked dask) in float64, one pass.

    Every row is labelled with one class, so the Gram counts them all.
    """
    one_class = (
        da.zeros(X.shape[0], dtype=np.int64, chunks=X.chunks[0])
        if isinstance(X, da.Array)
        else np.zeros(X.shape[0], dtype=np.int64)
    )
    return row_stats(X, one_class, 1, gram=True)


def principal_axes(
    stats: RowStats, n_components: int | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, variances, axes) of the covariance (XᵀX − nμμᵀ)/(n − 1), top ``n_components``.

    Axes are rows (k, D), by decreasing variance, float64; signs follow scikit-learn: the
    largest-magnitude entry of each axis is positive.
    """
    n, n_features = stats.n_rows, len(stats.feature_sum)
    if n < 2:
        raise ValueError(f"PCA needs at least 2 rows, got n_samples = {n}")
    k = n_features if n_components is None else int(n_components)
    if not 1 <= k <= n_features:
        raise ValueError(f"n_components must be in [1, {n_features}], got {n_components}")
    mean = stats.feature_sum / n
    covariance = (stats.gram - n * np.outer(mean, mean)) / (n - 1)
    variances, vectors = scipy.linalg.eigh(
        covariance, subset_by_index=(n_features - k, n_features - 1)
    )
    variances, vectors = variances[::-1].clip(min=0), vectors[:, ::-1].T
    biggest = np.argmax(np.abs(vectors), axis=1)
    vectors *= np.sign(vectors[np.arange(k), biggest])[:, None]
    return mean, variances, vectors


def principal_axes_of_rows(X: np.ndarray, n_components: int) -> np.ndarray:
    """Top ``n_components`` principal axes (k, D) of the rows of X (n, D) held in memory,
    float64, by decreasing variance, signs as `principal_axes`.

    From the D × D covariance (`principal_axes`) when D ≤ n; from the n × n Gram of the centred
    rows when the rows are wider than they are many (and more than ``n_components``): with its
    top eigenvectors U the axes are the columns of X̃ᵀU normalised, the same axes without a
    D × D matrix (32 GiB at 64K-D).
    """
    n, n_features = X.shape
    if n_features <= n or n_components >= n:
        return principal_axes(covariance_stats(X), n_components)[2]
    centred = np.asarray(X, np.float64)
    centred = centred - centred.mean(axis=0)
    _, vectors = scipy.linalg.eigh(centred @ centred.T, subset_by_index=(n - n_components, n - 1))
    axes = (centred.T @ vectors[:, ::-1]).T
    axes /= np.linalg.norm(axes, axis=1, keepdims=True)
    biggest = np.argmax(np.abs(axes), axis=1)
    axes *= np.sign(axes[np.arange(n_components), biggest])[:, None]
    return axes
