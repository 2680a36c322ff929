"""The FNV-1a hash of strings held as arrow buffers (offsets and UTF-8 bytes), compiled with
numba; a module of its own so that reading a store never imports numba."""

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def _hash(offsets: np.ndarray, data: np.ndarray, offset: np.uint64, prime: np.uint64):
    out = np.empty(len(offsets) - 1, np.uint64)
    for i in range(len(out)):
        h = offset
        for j in range(offsets[i], offsets[i + 1]):
            h = (h ^ np.uint64(data[j])) * prime
        out[i] = h
    return out


def fnv1a(offsets: np.ndarray, data: np.ndarray, offset: np.uint64, prime: np.uint64) -> np.ndarray:
    """uint64 hash of each string ``data[offsets[i]:offsets[i + 1]]`` (FNV's ``offset`` basis and
    ``prime``)."""
    return _hash(offsets, data, offset, prime)
