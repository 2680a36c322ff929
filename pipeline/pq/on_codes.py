"""Math on product-quantization codes without decoding them: class sums and ADC search.

Codes are (n, M) uint8 indices into a codebook (M, 256, D/M) of float32 centroids, optionally for
rotated rows ``x @ rotation``: the codes of `pipeline.pq.codec.PQCodec`, whose ``row_stats`` is
`code_row_stats`. Both computations are per-chunk numpy kernels wired with `reduce_rows`, so over
a row-chunked dask array they are a few runs of per-chunk tasks and a tree of adds (class sums)
or merges (top-k).

Class sums (paper 002 §4.1 compresses features with PQ; class means are sums over rows): a class's
sum over its rows is Σ_rows Σ_j codebook[j, code_j] placed in sub-space j, so one pass gathering
centroids into per-class sums replaces decoding every row into a float chunk first.

ADC (Jégou, Douze & Schmid, PAMI 2011, §4.1): the squared distance of a float query q to a coded
row is Σ_j ‖q_j − codebook[j, code_j]‖², read from a per-query table of M × 256 distances;
faiss's ``IndexPQ`` scans each chunk, the running top-k merge over chunks is ours.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from imgscale.pipeline.compute import compute
from imgscale.pipeline.reductions import (
    RowStats,
    accumulating,
    check_class_index,
    reduce_rows,
    stats_chains,
)
from imgscale.pipeline.top_k import TopK

# Centroids per sub-quantizer: one for every value of a uint8 code.
KSUB = np.iinfo(np.uint8).max + 1


def _check_codes(codes: np.ndarray, m: int, row_start: int) -> np.ndarray:
    codes = np.asarray(codes)
    if codes.dtype != np.uint8 or codes.ndim != 2 or codes.shape[1] != m:
        raise ValueError(
            f"rows {row_start}..{row_start + len(codes)}: codes of shape {codes.shape} "
            f"{codes.dtype}; expected (n, {m}) uint8 for a codebook of {m} sub-quantizers"
        )
    return codes


def check_codebook(codebook: Any, rotation: Any = None) -> tuple[np.ndarray, np.ndarray | None]:
    codebook = np.asarray(codebook, dtype=np.float32)
    if codebook.ndim != 3 or codebook.shape[1] != KSUB:
        raise ValueError(f"codebook of shape {codebook.shape}; expected (M, {KSUB}, D/M)")
    if rotation is not None:
        rotation = np.asarray(rotation, dtype=np.float32)
        dim = codebook.shape[0] * codebook.shape[2]
        if rotation.shape != (dim, dim):
            raise ValueError(f"rotation of shape {rotation.shape}; expected ({dim}, {dim})")
    return codebook, rotation


# -- class sums without decoding ------------------------------------------------------------


@numba.njit(cache=True, nogil=True)
def _accumulate_code_sums(  # pragma: no cover
    codes, y_index, codebook, all_counts, class_sums, class_counts
):
    """Per-class sums of decoded rows (codebook space) and centroid counts over all rows.

    Rows are visited in class order (a counting sort of the chunk's labels), so each class's
    sum row stays in cache while its rows are added: with many classes the class sums do not
    fit in cache, and visiting rows in store order misses it on nearly every row.
    """
    m, _, dsub = codebook.shape
    n, n_classes = codes.shape[0], class_sums.shape[0]
    # end[b] after the prefix sum: one past the last row of bucket b (bucket 0: unlabelled).
    end = np.zeros(n_classes + 2, np.int64)
    for i in range(n):
        for j in range(m):
            all_counts[j, codes[i, j]] += 1
        end[y_index[i] + 2] += 1
    for b in range(n_classes + 1):
        end[b + 1] += end[b]
    order = np.empty(n, np.int64)
    for i in range(n):
        b = y_index[i] + 1
        order[end[b]] = i
        end[b] += 1
    for c in range(n_classes):
        class_counts[c] += end[c + 1] - end[c]
        for t in range(end[c], end[c + 1]):
            i = order[t]
            for j in range(m):
                k = codes[i, j]
                for d in range(dsub):
                    class_sums[c, j * dsub + d] += codebook[j, k, d]


@accumulating
def chunk_code_stats(
    codes: np.ndarray,
    y_index: np.ndarray,
    codebook: np.ndarray,
    n_classes: int,
    row_start: int = 0,
    into: RowStats | None = None,
) -> RowStats:
    """RowStats of the decoded rows of one chunk of codes, in the codebook's (rotated) space,
    added in place to `into` if given; rows with ``y_index == -1`` count only towards
    `feature_sum`.

    Class sums gather centroids straight into per-class float64 sums (Σ_j codebook[j, code_j]
    placed in sub-space j), without materialising decoded rows. A C×M×256 count table (then
    counts @ codebook) costs fewer adds per row but is 655 MB at C = 10,000, M = 64 and its
    increments miss cache: measured 0.5M rows/s at 1,000 classes against ~2.5M for this kernel.
    The feature sum uses M×256 centroid counts over all rows, converted once per chunk.
    """
    m, _, dsub = codebook.shape
    codes = _check_codes(codes, m, row_start)
    y_index = np.asarray(y_index, dtype=np.int64)
    n = len(codes)
    check_class_index(y_index, n, n_classes, row_start)
    stats = RowStats.zeros(m * dsub, n_classes, gram=False) if into is None else into
    if stats.class_sums.shape != (n_classes, m * dsub) or stats.gram is not None:
        raise ValueError("chunk_code_stats: `into` holds statistics of another shape")
    all_counts = np.zeros((m, KSUB), np.int64)
    _accumulate_code_sums(
        np.ascontiguousarray(codes),
        y_index,
        np.ascontiguousarray(codebook, dtype=np.float32),
        all_counts,
        stats.class_sums,
        stats.class_counts,
    )
    stats.n_rows += n
    stats.feature_sum += np.einsum("jk,jkd->jd", all_counts.astype(np.float64), codebook).ravel()
    return stats


def code_row_stats(
    codes: Any,
    y_index: Any,
    codebook: np.ndarray,
    n_classes: int,
    rotation: np.ndarray | None = None,
) -> RowStats:
    """RowStats of the rows that numpy or row-chunked dask ``codes`` decode to, in one pass.

    Decoding is linear (x̂ = [c_1 … c_M] · rotationᵀ), so sums of decoded rows are sums in the
    codebook space rotated back once. Chains by the partials' size (`stats_chains`): C × D
    float64 class sums are 328 MB at 10,000 classes, D = 4096.
    """
    codebook, rotation = check_codebook(codebook, rotation)
    chains = stats_chains(codebook.shape[0] * codebook.shape[2], n_classes, gram=False)
    partial = reduce_rows(
        chunk_code_stats,
        [codes, y_index],
        codebook,
        n_classes,
        chains=chains,
        blocks_per_task="auto",
    )
    stats = compute(partial)[0]
    if rotation is not None:
        back = rotation.T.astype(np.float64)
        stats.feature_sum = stats.feature_sum @ back
        stats.class_sums = stats.class_sums @ back
    return stats


# -- ADC nearest-neighbour search -----------------------------------------------------------


def index_pq(codebook: np.ndarray, codes: np.ndarray) -> Any:
    """A faiss ``IndexPQ`` over `codes` with our codebook: its search is the ADC scan."""
    import faiss

    m, _, dsub = codebook.shape
    index = faiss.IndexPQ(m * dsub, m, 8)
    faiss.copy_array_to_vector(np.ascontiguousarray(codebook).ravel(), index.pq.centroids)
    index.is_trained = True
    index.add_sa_codes(np.ascontiguousarray(codes))
    return index


def chunk_adc_top_k(
    codes: np.ndarray, queries: np.ndarray, codebook: np.ndarray, k: int, row_start: int = 0
) -> TopK:
    """TopK of one chunk of codes for every (rotated) query, row ids offset by ``row_start``.

    The scan is faiss's (per-query M × 256 distance tables, then one table lookup per code):
    22.5M codes/s on one thread against 15.7M for the numpy gather it replaced (bench pq,
    D = 512, M = 64); the tree merge across chunks is ours.
    """
    codes = _check_codes(codes, codebook.shape[0], row_start)
    keep = min(k, len(codes))
    if keep == 0:
        return TopK.empty(len(queries), k)
    distances, ids = index_pq(codebook, codes).search(queries, keep)
    return TopK.nearest(ids.astype(np.int64) + row_start, distances, k)


def adc_search(
    queries: np.ndarray,
    codes: Any,
    codebook: np.ndarray,
    k: int = 10,
    rotation: np.ndarray | None = None,
    *,
    split_every: int = 8,
) -> tuple[np.ndarray, np.ndarray]:
    """k nearest coded rows of each float query by ADC: (row ids (q, k), squared distances).

    One scan of numpy or row-chunked dask ``codes``; each chunk keeps its own top k and the
    partial results are merged in a tree, so only q·k ids per chunk travel.
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    codebook, rotation = check_codebook(codebook, rotation)
    queries = np.asarray(queries, dtype=np.float32)
    m, _, dsub = codebook.shape
    if queries.ndim != 2 or queries.shape[1] != m * dsub:
        raise ValueError(f"queries of shape {queries.shape}; expected (q, {m * dsub})")
    if rotation is not None:
        queries = queries @ rotation  # the codes quantize rotated rows
    queries = np.ascontiguousarray(queries)
    kernel_args = (queries, codebook, k)
    result = compute(reduce_rows(chunk_adc_top_k, [codes], *kernel_args, split_every=split_every))
    result = result[0]
    return result.ids, result.distances
