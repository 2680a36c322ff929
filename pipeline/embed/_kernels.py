"""Kernel matrices between row blocks, float32, shared by the landmark-based embeddings."""

from __future__ import annotations

import numpy as np

from imgscale.pipeline.rows import squared_distances

# Elements of the rows × landmarks × features minimum computed at once (64 MiB of float32).
_MIN_BLOCK_ELEMENTS = 16 * 2**20


def gaussian_kernel(A: np.ndarray, B: np.ndarray, gamma: float) -> np.ndarray:
    """exp(−γ‖a − b‖²/2) for every row pair (the kernel of paper 000 §3.2.2)."""
    K = squared_distances(A, B)
    K *= np.float32(-gamma / 2)
    return np.exp(K, out=K)


def intersection_kernel(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Σⱼ min(aⱼ, bⱼ) for every row pair, in blocks that bound the 3-D temporary."""
    K = np.empty((len(A), len(B)), dtype=np.float32)
    n_features = max(A.shape[1], 1)
    step_b = max(1, min(len(B), _MIN_BLOCK_ELEMENTS // (n_features * max(len(A), 1))))
    step_a = max(1, _MIN_BLOCK_ELEMENTS // (n_features * step_b))
    for i in range(0, len(A), step_a):
        for j in range(0, len(B), step_b):
            block = np.minimum(A[i : i + step_a, None, :], B[None, j : j + step_b, :])
            K[i : i + step_a, j : j + step_b] = block.sum(axis=2, dtype=np.float32)
    return K


def kernel_matrix(A: np.ndarray, B: np.ndarray, kernel: str, gamma: float) -> np.ndarray:
    if kernel == "gaussian":
        return gaussian_kernel(A, B, gamma)
    if kernel == "intersection":
        return intersection_kernel(A, B)
    raise ValueError(f"unknown kernel {kernel!r}; expected 'gaussian' or 'intersection'")
