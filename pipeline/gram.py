"""Gram matrix accumulation XᵀX of a float32 row chunk, the compute-bound half of a ridge fit.

Two precisions, both accumulated into a float64 total:

- ``"float64"``: rows are converted to float64 and multiplied in float64 (exact to ~1e-16; runs
  at about half the float32 rate and needs a float64 copy of each sub-block).
- ``"float32"``: the chunk is shifted by its own mean (rounded to float32), each sub-block of
  `_FLOAT32_SUB_ROWS` rows is multiplied by a float32 `ssyrk`, the products are summed in float64,
  and the shift is undone by an exact rank-2 update in float64:
  Σ xxᵀ = Σ (x − c)(x − c)ᵀ + c sᵀ + s cᵀ − n ccᵀ with s = Σ x.
  A float32 sum of s products has relative error ≤ s·2⁻²⁴ (≈ √s·2⁻²⁴ for random rounding), here
  measured against Σ |x − c||x − c|ᵀ: the shift makes the error relative to the spread of the
  rows, not their offset, which is what the centred ridge system X̃ᵀX̃ needs (its entries
  cancel the offset). Sub-blocks are independent, so the relative error does not grow with n.

The float32 path's error, stated here only: every entry of the Gram is within
`FLOAT32_RELATIVE_ERROR` (2048·2⁻²⁴ ≈ 1.2e-4) of the exact sum, relative to that entry of
Σ |x − c||x − c|ᵀ, and typically about √2048·2⁻²⁴ ≈ 3e-6
(tests/pipeline/test_gram.py::test_float32_error_is_within_the_stated_bound measures it).
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import blas

GRAM_PRECISIONS = ("float64", "float32")

# float64 path: rows converted at a time; bounds the temporary copy (32 MiB at D = 512).
_SUB_ROWS = 8192
# float32 path: rows per float32 product. Their count bounds the relative rounding error
# (`FLOAT32_RELATIVE_ERROR`), while adding each D × D float32 product to the float64 total costs
# about D/(2·2048) of the product itself.
_FLOAT32_SUB_ROWS = 2048
FLOAT32_RELATIVE_ERROR = _FLOAT32_SUB_ROWS * 2.0**-24
# Rows per band of the triangular adds.
_BAND_ROWS = 128


def add_gram(
    gram: np.ndarray, X: np.ndarray, precision: str = "float64", row_sum: np.ndarray | None = None
) -> None:
    """Add XᵀX to the symmetric float64 `gram` (a sum of Gram matrices, or zeros) in place;
    `precision` is one of `GRAM_PRECISIONS`. `row_sum`, X's float64 column sums if the caller
    has them, spares the float32 path computing them again."""
    if precision == "float64":
        _add_gram_float64(gram, X)
    elif precision == "float32":
        X = np.asarray(X, dtype=np.float32)
        _add_gram_float32(gram, X, X.sum(axis=0, dtype=np.float64) if row_sum is None else row_sum)
    else:
        raise ValueError(f"precision must be one of {GRAM_PRECISIONS}, got {precision!r}")


def _add_gram_float64(gram: np.ndarray, X: np.ndarray) -> None:
    # One reused float64 buffer: a fresh 32 MiB array per sub-block costs page faults.
    buffer = np.empty((min(len(X), _SUB_ROWS), X.shape[1]))
    for start in range(0, len(X), _SUB_ROWS):
        block = buffer[: min(_SUB_ROWS, len(X) - start)]
        np.copyto(block, X[start : start + _SUB_ROWS])
        gram += block.T @ block  # numpy dispatches Aᵀ A to syrk


def _add_gram_float32(gram: np.ndarray, X: np.ndarray, row_sum: np.ndarray) -> None:
    """The products go straight into the lower triangle of `gram` (by row bands, half the adds
    of the full matrix), which is mirrored to the upper one at the end: `gram` is symmetric, so
    its upper triangle holds nothing the lower one does not. No D × D float64 temporary."""
    n, d = X.shape
    if n == 0:
        return
    shift = (row_sum / n).astype(np.float32)
    shifted = np.empty((min(n, _FLOAT32_SUB_ROWS), d), dtype=np.float32)
    # Fortran order: ssyrk writes its upper triangle in place, which is the lower triangle of the
    # C-ordered transpose `lower`.
    product = np.zeros((d, d), dtype=np.float32, order="F")
    lower = product.T
    for start in range(0, n, _FLOAT32_SUB_ROWS):
        block = shifted[: min(_FLOAT32_SUB_ROWS, n - start)]
        np.subtract(X[start : start + _FLOAT32_SUB_ROWS], shift, out=block)
        # blockᵀ is Fortran-ordered, so BLAS reads it in place.
        product = blas.ssyrk(1.0, block.T, beta=0.0, c=product, overwrite_c=True)
        for band in _bands(d):
            gram[band, : band.stop] += lower[band, : band.stop]
    # Undo the shift c: Σ xxᵀ = Σ (x − c)(x − c)ᵀ + K + Kᵀ with K = c (s − n c/2)ᵀ, s = Σ x.
    c = shift.astype(np.float64)
    half = row_sum - 0.5 * n * c
    for band in _bands(d):
        gram[band, : band.stop] += np.outer(c[band], half[: band.stop])
        gram[band, : band.stop] += np.outer(half[band], c[: band.stop])
    for band in _bands(d):
        # Each band's upper part (columns from its first row on) mirrors the lower triangle.
        square = gram[band, band]
        square[np.triu_indices(len(square), 1)] = square.T[np.triu_indices(len(square), 1)]
        gram[band, band.stop :] = gram[band.stop :, band].T


def _bands(d: int) -> list[slice]:
    """Row bands of a d × d matrix for the triangle-by-band loops (a band's block fits in L2)."""
    return [slice(i, min(i + _BAND_ROWS, d)) for i in range(0, d, _BAND_ROWS)]
