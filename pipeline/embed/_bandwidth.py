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

from imgscale.pipeline.compute import compute
from imgscale.pipeline.reductions import reduce_rows
from imgscale.pipeline.rows import sample_rows
from imgscale.pipeline.top_k import top_k_columns

# Rows compared to the queries at a time: a store chunk (32,768 rows at D = 512) in one block
# bounds the queries × rows float32 scores at 64 MB for 500 queries. One selection per chunk
# rather than per smaller block matters: `top_k_columns` skips most columns only once its k best
# are good, so every fresh block pays for a warm-up.
_KNN_ROWS = 32768


@dataclass
class NearestSquaredDistances:
    """The `k` smallest squared distances seen so far from each query, sorted (queries × k)."""

    values: np.ndarray

    def __add__(self, other: NearestSquaredDistances) -> NearestSquaredDistances:
        both = np.hstack([self.values, other.values])
        k = max(self.values.shape[1], other.values.shape[1])
        return NearestSquaredDistances(np.sort(both, axis=1)[:, :k])


def chunk_nearest(
    X: np.ndarray, queries: np.ndarray, k: int, row_start: int = 0
) -> NearestSquaredDistances:
    """The k smallest squared distances from each query to the rows of one chunk, float32.

    ‖q − x‖² = ‖q‖² − (2qᵀx − ‖x‖²), so a query's k nearest rows are the k largest
    2qᵀx − ‖x‖²: one GEMM per block of rows, then `top_k_columns` with ‖x‖² as offsets, which
    touches each score once and skips 16-column runs that cannot enter the k best. A per-row
    `np.partition` of the same block cost as much as the GEMM.
    """
    X = np.asarray(X, dtype=np.float32)
    queries = np.asarray(queries, dtype=np.float32)
    # Rows whose distances overflow float32 give inf or NaN here, and `knn_bandwidth` refuses
    # the bandwidth they make, so numpy's warnings would only repeat it.
    with np.errstate(over="ignore", invalid="ignore"):
        query_norms = np.einsum("ij,ij->i", queries, queries)[:, None]
        doubled = 2 * queries
        best = NearestSquaredDistances(np.full((len(queries), k), np.inf, dtype=np.float32))
        for start in range(0, len(X), _KNN_ROWS):
            block = X[start : start + _KNN_ROWS]
            scores = doubled @ block.T
            norms = np.einsum("ij,ij->i", block, block)
            columns = top_k_columns(scores, k, norms)
            d2 = query_norms - (np.take_along_axis(scores, columns, axis=1) - norms[columns])
            best += NearestSquaredDistances(np.maximum(d2, 0, out=d2))  # clip rounding below 0
    return best


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
    if not np.isfinite(sigma):
        raise ValueError(
            f"RBF bandwidth σ (mean distance to the {k - 1}th neighbour) is {sigma}; expected a "
            "finite distance (rows whose squared distances overflow float32? scale them, or "
            "pass gamma)"
        )
    if not sigma > 0:
        raise ValueError("all sampled rows coincide with their neighbours: bandwidth is 0")
    return sigma


def check_gamma(gamma: Any) -> float:
    """``gamma`` as a float if it is a finite positive RBF bandwidth parameter 1/σ²."""
    if gamma is None or not np.isfinite(gamma) or not gamma > 0:
        raise ValueError(f"gamma must be positive and finite or None, got {gamma}")
    return float(gamma)


def rbf_gamma(
    X: Any, gamma: float | None, n_neighbors: int, n_queries: int, random_state: Any
) -> float:
    """γ = 1/σ² of the Gaussian kernel exp(−γ‖x − y‖²): ``gamma`` if given, else σ the mean
    distance from ``n_queries`` sampled rows to their ``n_neighbors``-th neighbour among all rows
    of X (paper 000 §4.1), one pass over X."""
    if gamma is not None:
        return check_gamma(gamma)
    return check_gamma(1.0 / knn_bandwidth(X, n_neighbors, n_queries, random_state) ** 2)
