"""Ridge in its dual form, for training rows fewer than their dimensions (paper 000 §3.3).

Paper 000 §3.3 solves W = (X̃ᵀX̃ + ρI)⁻¹X̃ᵀY, a D × D system. By the push-through identity
(X̃ᵀX̃ + ρI)⁻¹X̃ᵀ = X̃ᵀ(X̃X̃ᵀ + ρI)⁻¹, the same W is X̃ᵀα with (K + ρI)α = Y and K = X̃X̃ᵀ the
l × l Gram of the l labelled rows: the system to solve when l < D (an additive-kernel map of
8,400-D pyramid histograms is 67,200-D, and its D × D Gram would take 36 GB). With
K = U diag(λ) Uᵀ, α(ρ) = U diag(1/(λ + ρ)) UᵀY for every ρ of the grid from one
eigendecomposition, as the primal form's; K's nonzero eigenvalues are X̃ᵀX̃'s, so generalised
cross-validation reads the same scores.

A dual fit keeps no D × D statistics, so rows cannot be added to or removed from it
(`RidgeClassifier.update`, `partial_fit`): it is trained again.
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
import scipy.linalg

from imgscale.pipeline.classify._base import encode_labels, encode_labels_lazy, unique_labels
from imgscale.pipeline.compute import compute
from imgscale.pipeline.reductions import reduce_rows


def centred_kernel(
    X: Any, y_index: np.ndarray, gram_precision: str
) -> tuple[np.ndarray, np.ndarray, Any]:
    """(μ, K, X̃): the mean μ of all rows (labelled or not, as the primal form centres), the
    l × l Gram K = X̃X̃ᵀ of the labelled rows X̃ = X_l − μ (float64; its products in
    ``gram_precision``) and X̃ itself, lazy when X is dask. Dask sums K by pairs of row blocks."""
    mean = compute(_rows_where(X, np.ones(len(y_index), bool)).sum(axis=0, dtype=np.float64))
    mean = mean[0] / X.shape[0]
    product = np.float64 if gram_precision == "float64" else np.float32
    centred = _rows_where(X, y_index >= 0).astype(product) - mean.astype(product)
    gram = compute(centred @ centred.T)[0]
    return mean, np.asarray(gram, dtype=np.float64), centred


def _rows_where(X: Any, keep: np.ndarray) -> Any:
    """The rows of ``X`` where ``keep``; of dask rows, only the blocks that keep any (a store's
    split leaves blocks of no rows, which add nothing to the Gram but tasks)."""
    if not isinstance(X, da.Array):
        return X[keep]
    ends = np.cumsum(X.chunks[0])
    blocks = [
        X.blocks[i] if keep[end - size : end].all() else X.blocks[i][keep[end - size : end]]
        for i, (size, end) in enumerate(zip(X.chunks[0], ends, strict=True))
        if keep[end - size : end].any()
    ]
    return da.concatenate(blocks) if blocks else X[:0]


def dual_eigensystem(
    gram: np.ndarray, targets: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(λ, U, UᵀY) of K = U diag(λ) Uᵀ, λ clipped at 0 (K is PSD; negative values are rounding)."""
    eigvals, eigvecs = scipy.linalg.eigh(gram, driver="evd")
    eigvals = eigvals.clip(min=0.0)
    return eigvals, eigvecs, eigvecs.T @ targets


def grid_coefficients(
    eigvals: np.ndarray, eigvecs: np.ndarray, z: np.ndarray, grid: np.ndarray
) -> np.ndarray:
    """α(ρ) = U diag(1/(λ + ρ)) UᵀY of every ρ of ``grid`` side by side: l × (R·C)."""
    return eigvecs @ np.hstack([z / (eigvals + rho)[:, None] for rho in grid])


def dual_gcv_scores(eigvals: np.ndarray, z: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Generalised cross-validation (RSS/l)/(1 − df/l)² per ρ, as `ridge.gcv_scores`, from K's
    eigensystem: the residual Y − K α(ρ) is U diag(ρ/(λ + ρ)) UᵀY, so RSS(ρ) sums its squares
    directly (no difference of nearly equal sums where ρ is small against λ)."""
    n_labelled = len(eigvals)
    z2 = (z**2).sum(axis=1)
    lam, rho = eigvals[None, :], grid[:, None]
    rss = (z2 * (rho / (lam + rho)) ** 2).sum(axis=1)
    df = (lam / (lam + rho)).sum(axis=1)
    with np.errstate(divide="ignore"):
        return np.where(df < n_labelled, (rss / n_labelled) / (1 - df / n_labelled) ** 2, np.inf)


def primal_weights(centred: Any, coefficients: np.ndarray) -> np.ndarray:
    """W = X̃ᵀα (D × columns of α, float64), in one pass over the labelled rows."""
    if isinstance(centred, da.Array):
        return np.asarray(compute(centred.T @ coefficients)[0], dtype=np.float64)
    return centred.T.astype(np.float64) @ coefficients


def grid_errors_chunk(
    X: np.ndarray,
    label_index: np.ndarray,
    weights: np.ndarray,
    intercepts: np.ndarray,
    class_of_label: np.ndarray,
    n_classes: int,
    row_start: int = 0,
) -> np.ndarray:
    """(R + 1,) sums: ‖xᵀW(ρ) + b(ρ) − y‖² over the labelled rows per ρ, then their count.

    ``label_index`` indexes the rows' labels, ``class_of_label`` maps each to its class column,
    or −1 for a class the model does not have: such a row targets zero in every column, as
    `ridge.validation_errors` counts it."""
    labelled = label_index >= 0
    scores = X[labelled].astype(np.float64) @ weights + intercepts
    n_rho = weights.shape[1] // n_classes
    scores = scores.reshape(len(scores), n_rho, n_classes)
    column = class_of_label[label_index[labelled]]
    known = np.flatnonzero(column >= 0)
    scores[known, :, column[known]] -= 1.0
    sums = np.empty(n_rho + 1)
    sums[:n_rho] = (scores**2).sum(axis=(0, 2))
    sums[n_rho] = len(scores)
    return sums


def grid_errors(
    weights: np.ndarray, intercepts: np.ndarray, classes: np.ndarray, X_val: Any, y_val: Any
) -> np.ndarray:
    """Mean squared error on the labelled validation rows of every grid value, in one pass.

    `weights` (D, R·C) and `intercepts` (R·C,) hold the C class columns of each ρ side by side.
    """
    labels = unique_labels(y_val)
    if len(labels) == 0:
        raise ValueError("y_val has no labelled rows")
    known = np.isin(labels, classes)
    class_of_label = np.full(len(labels), -1)
    class_of_label[known] = encode_labels(labels[known], classes)
    sums = reduce_rows(
        grid_errors_chunk,
        [X_val, encode_labels_lazy(y_val, labels)],
        weights,
        intercepts,
        class_of_label,
        len(classes),
    )
    sums = np.asarray(compute(sums)[0])
    return sums[:-1] / sums[-1]
