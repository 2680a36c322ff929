"""The k largest scores of each row, without sorting a row: top-k classes, nearest neighbours.

Classifiers rank classes with it (`predict_top_k`), the kNN bandwidth rule ranks rows by distance
(`pipeline.embed`), and `jobs.evaluate` ranks a model's scores. `TopK` keeps the k nearest rows
of each query over the chunks of a scan (kNN's, and ADC search on PQ codes).
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

# Columns per block of the top-k scan: a block is skipped when its maximum (a vectorised
# reduction) cannot enter the current k best, which is almost every block once k ≪ C.
_SCAN_BLOCK = 16


@numba.njit(cache=True, nogil=True, fastmath=True, inline="always")
def _block_max(row: np.ndarray, offsets: np.ndarray, start: int) -> float:
    best = row[start] - offsets[start]
    for c in range(start + 1, start + _SCAN_BLOCK):
        v = row[c] - offsets[c]
        best = v if v > best else best
    return best


@numba.njit(cache=True, nogil=True, inline="always")
def _insert(values: np.ndarray, columns: np.ndarray, j: int, v: float, c: int) -> None:
    # Strict comparison: an equal score seen earlier (lower column) stays ahead.
    while j > 0 and values[j - 1] < v:
        values[j] = values[j - 1]
        columns[j] = columns[j - 1]
        j -= 1
    values[j] = v
    columns[j] = c


@numba.njit(cache=True, nogil=True)
def _top_k_scan(scores: np.ndarray, offsets: np.ndarray, out: np.ndarray) -> None:
    n, n_columns = scores.shape
    k = out.shape[1]
    values = np.empty(k, dtype=scores.dtype)
    for i in range(n):
        row, columns = scores[i], out[i]
        for c in range(k):
            v = row[c] - offsets[c]
            _insert(values, columns, c, -np.inf if v != v else v, c)  # NaN ranks last
        start = k
        while start < n_columns:
            stop = min(start + _SCAN_BLOCK, n_columns)
            if stop - start < _SCAN_BLOCK or _block_max(row, offsets, start) > values[k - 1]:
                for c in range(start, stop):
                    v = row[c] - offsets[c]
                    if v > values[k - 1]:
                        _insert(values, columns, k - 1, v, c)
            start = stop


def top_k_columns(scores: np.ndarray, k: int, offsets: np.ndarray | None = None) -> np.ndarray:
    """Column indices (n, min(k, C)) of the k largest ``scores - offsets`` per row, best first,
    ties to the lower column: the first k of a stable argsort of the negated scores.

    One pass per row keeping the k best by insertion (almost every score only meets one
    comparison), so selecting from 10,000 classes costs a read of the scores, not a sort.
    """
    n, n_columns = scores.shape
    if offsets is None:
        offsets = np.zeros(n_columns, dtype=scores.dtype)
    out = np.empty((n, min(k, n_columns)), dtype=np.int64)
    _top_k_scan(np.ascontiguousarray(scores), offsets.astype(scores.dtype, copy=False), out)
    return out


@dataclass
class TopK:
    """The k nearest rows found so far for each query, nearest first; merging is ``+``."""

    ids: np.ndarray  # (q, ≤k) int64 row ids
    distances: np.ndarray  # (q, ≤k) float32 squared distances
    k: int

    @classmethod
    def empty(cls, n_queries: int, k: int) -> TopK:
        """No rows found yet (a chunk without rows)."""
        return cls(np.empty((n_queries, 0), np.int64), np.empty((n_queries, 0), np.float32), k)

    @classmethod
    def nearest(cls, ids: np.ndarray, distances: np.ndarray, k: int) -> TopK:
        """The k smallest distances per query, ties broken by the lower row id."""
        keep = min(k, distances.shape[1])
        if keep < distances.shape[1]:
            part = np.argpartition(distances, keep - 1, axis=1)[:, :keep]
            ids = np.take_along_axis(ids, part, axis=1)
            distances = np.take_along_axis(distances, part, axis=1)
        order = np.lexsort((ids, distances), axis=1)
        return cls(
            np.take_along_axis(ids, order, axis=1), np.take_along_axis(distances, order, axis=1), k
        )

    def __add__(self, other: TopK) -> TopK:
        return TopK.nearest(
            np.concatenate([self.ids, other.ids], axis=1),
            np.concatenate([self.distances, other.distances], axis=1),
            self.k,
        )
