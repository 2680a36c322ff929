"""Gram matrix accumulation XᵀX of a float32 row chunk, the compute-bound half of a ridge fit."""

from __future__ import annotations

import numpy as np

# Rows converted to float64 at a time: bounds the temporary copy (32 MiB at D = 512).
_SUB_ROWS = 8192


def add_gram(gram: np.ndarray, X: np.ndarray) -> None:
    """Add XᵀX to the float64 `gram` in place, in sub-blocks of `_SUB_ROWS` rows."""
    # One reused float64 buffer: a fresh 32 MiB array per sub-block costs page faults.
    buffer = np.empty((min(len(X), _SUB_ROWS), X.shape[1]))
    for start in range(0, len(X), _SUB_ROWS):
        block = buffer[: min(_SUB_ROWS, len(X) - start)]
        np.copyto(block, X[start : start + _SUB_ROWS])
        gram += block.T @ block  # numpy dispatches Aᵀ A to syrk
