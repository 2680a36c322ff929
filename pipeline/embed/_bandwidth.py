"""Gaussian bandwidth from the mean distance to the k-th nearest neighbour (paper 000 §4.1).

Query rows are a random sample; their neighbours are searched among *all* rows in one streaming
pass (`reduce_rows`): each chunk yields the k + 1 smallest squared distances from every query to
its rows, and partial results merge by keeping the k + 1 smallest. The query itself is among the
rows (distance 0), hence k + 1. Searching all rows rather than only the sample matters: the k-th
neighbour within an m-row sample of n rows is about the (k·n/m)-th neighbour of the full data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline._compute import compute
from pipeline.embed._base import sample_rows
from pipeline.reductions import reduce_rows

# Rows compared to the queries at a time: bounds the queries × rows float32 distance block.
_KNN_ROWS = 4096


@dataclass
class NearestSquaredDistances:
    """The `k` smallest squared distances seen so far from each query, sorted (queries × k)."""

    values: np.ndarray

    def __add__(self, other: NearestSquaredDistances) -> NearestSquaredDistances:
        both = np.hstack([self.values, other.values])
        k = max(self.values.shape[1], other.values.shape[1])
        return NearestSquaredDistances(np.sort(both, axis=1)[:, :k])


def squared_distances(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """‖a − b‖² for every row pair (len(A) × len(B)), float32, clipped at 0 (rounding)."""
    out = A @ B.T
    out *= -2
    out += np.einsum("ij,ij->i", A, A)[:, None]
    out += np.einsum("ij,ij->i", B, B)[None, :]
    return np.maximum(out, 0, out=out)


def chunk_nearest(
    X: np.ndarray, queries: np.ndarray, k: int, row_start: int = 0
) -> NearestSquaredDistances:
    """The k smallest squared distances from each query to the rows of one chunk."""
    best = np.full((len(queries), k), np.inf, dtype=np.float32)
    for start in range(0, len(X), _KNN_ROWS):
        d2 = squared_distances(queries, X[start : start + _KNN_ROWS])
        if d2.shape[1] > k:
            d2 = np.partition(d2, k - 1, axis=1)[:, :k]
        best = (NearestSquaredDistances(best) + NearestSquaredDistances(d2)).values
    return NearestSquaredDistances(best)


def knn_bandwidth(X: Any, n_neighbors: int, n_queries: int, random_state: Any) -> float:
    """Mean Euclidean distance from `n_queries` sampled rows to their `n_neighbors`-th neighbour.

    With fewer rows than ``n_neighbors + 1``, the farthest row is used instead.
    """
    if X.shape[0] < 2:
        raise ValueError(f"a bandwidth needs at least 2 rows, got n_samples = {X.shape[0]}")
    queries = sample_rows(X, n_queries, random_state)
    k = min(n_neighbors + 1, X.shape[0])
    nearest = compute(reduce_rows(chunk_nearest, [X], queries, k))[0]
    sigma = float(np.sqrt(nearest.values[:, k - 1].astype(np.float64)).mean())
    if not sigma > 0:
        raise ValueError("all sampled rows coincide with their neighbours: bandwidth is 0")
    return sigma
