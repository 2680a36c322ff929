"""Math on product-quantization codes without decoding them: class sums and ADC search.

Codes are (n, M) uint8 indices into a codebook (M, 256, D/M) of float32 centroids, optionally for
rotated rows ``x @ rotation`` (the storage layer's PQ codec). Both computations are per-chunk numpy
kernels wired with `reduce_rows`, so over a row-chunked dask array they are one task per chunk
and a tree of adds (counts) or merges (top-k).

Class sums (paper 002 §4.1 compresses features with PQ; class means are sums over rows): a class's
sum over its rows is Σ_j Σ_k count[c, j, k] · codebook[j, k] placed in sub-space j, so one pass
counting (class, sub-quantizer, centroid) triples replaces decoding every row. The count table
is held sparse (CSR, classes × M·256): a chunk adds at most rows·M entries, so 10,000 classes
with M = 64 cost what the chunk's codes cost, not 10,000 × 16,384 dense counters.

ADC (Jégou, Douze & Schmid, PAMI 2011, §4.1): the squared distance of a float query q to a coded
row is Σ_j ‖q_j − codebook[j, code_j]‖², read from a per-query table of M × 256 distances.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import sparse

from pipeline._compute import compute
from pipeline.reductions import check_class_index, reduce_rows

KSUB = 256
# Rows scanned at a time by an ADC chunk kernel: bounds the (queries × rows) distance buffer.
_ADC_ROWS = 16_384


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


# -- class sums from a count table ---------------------------------------------------------


@dataclass
class CodeCounts:
    """How often each centroid occurs, per class and over all rows; additive over row sets.

    `table[c, 256·j + k]` counts labelled rows of class c whose code j is k; `all_counts` counts
    every row (unlabelled too, for the feature sum).
    """

    n_rows: int
    table: sparse.csr_array
    class_counts: np.ndarray
    all_counts: np.ndarray

    def with_n_classes(self, n_classes: int) -> CodeCounts:
        extra = n_classes - self.table.shape[0]
        if extra <= 0:
            return self
        table = sparse.vstack([self.table, sparse.csr_array((extra, self.table.shape[1]))])
        return CodeCounts(
            self.n_rows,
            sparse.csr_array(table, dtype=np.int64),
            np.concatenate([self.class_counts, np.zeros(extra, np.int64)]),
            self.all_counts,
        )

    def __add__(self, other: CodeCounts) -> CodeCounts:
        n_classes = max(self.table.shape[0], other.table.shape[0])
        a, b = self.with_n_classes(n_classes), other.with_n_classes(n_classes)
        return CodeCounts(
            a.n_rows + b.n_rows,
            a.table + b.table,
            a.class_counts + b.class_counts,
            a.all_counts + b.all_counts,
        )


def chunk_code_counts(
    codes: np.ndarray, y_index: np.ndarray, m: int, n_classes: int, row_start: int = 0
) -> CodeCounts:
    """CodeCounts of one chunk; rows with ``y_index == -1`` count only towards `all_counts`."""
    codes = _check_codes(codes, m, row_start)
    y_index = np.asarray(y_index)
    n = len(codes)
    check_class_index(y_index, n, n_classes, row_start)
    width = m * KSUB
    column = codes.astype(np.int64)
    column += np.arange(m, dtype=np.int64) * KSUB  # (n, M): 256·j + code
    all_counts = np.bincount(column.ravel(), minlength=width)
    labelled = y_index >= 0
    y, column = y_index[labelled], column[labelled]
    if n_classes * width <= 8 * column.size:
        # Few classes: a dense bincount is cheaper than sorting the triples.
        dense = np.bincount((y[:, None] * width + column).ravel(), minlength=n_classes * width)
        table = sparse.csr_array(dense.reshape(n_classes, width))
    else:
        rows = np.repeat(y, m)
        ones = np.ones(rows.size, np.int64)
        table = sparse.csr_array((ones, (rows, column.ravel())), shape=(n_classes, width))
        table.sum_duplicates()
    return CodeCounts(n, table, np.bincount(y, minlength=n_classes), all_counts)


def code_counts(codes: Any, y_index: Any, m: int, n_classes: int) -> CodeCounts:
    """CodeCounts of numpy or row-chunked dask codes in one pass (tree-summed)."""
    return compute(reduce_rows(chunk_code_counts, [codes, y_index], m, n_classes))[0]


def _codebook_matrix(codebook: np.ndarray) -> sparse.csr_array:
    """(M·256, D) block-diagonal matrix: row 256·j + k holds centroid k of sub-space j."""
    m, ksub, dsub = codebook.shape
    cols = (np.arange(m)[:, None, None] * dsub + np.arange(dsub)).repeat(ksub, axis=1)
    indptr = np.arange(0, m * ksub * dsub + 1, dsub)
    return sparse.csr_array(
        (codebook.astype(np.float64).ravel(), cols.ravel(), indptr), shape=(m * ksub, m * dsub)
    )


def sums_from_counts(
    counts: Any, codebook: np.ndarray, rotation: np.ndarray | None = None
) -> np.ndarray:
    """Σ of decoded rows for each row of ``counts`` ((k, M·256), sparse or dense), float64 (k, D).

    Decoding is linear (x̂ = [c_1 … c_M] · rotationᵀ), so sums of decoded rows are counts times
    centroids, rotated back once.
    """
    sums = counts @ _codebook_matrix(codebook)
    sums = sums.toarray() if sparse.issparse(sums) else np.asarray(sums)
    if rotation is not None:
        sums = sums @ rotation.T.astype(np.float64)
    return sums


# -- ADC nearest-neighbour search -----------------------------------------------------------


@dataclass
class TopK:
    """The k nearest rows found so far for each query, nearest first; merging is ``+``."""

    ids: np.ndarray  # (q, ≤k) int64 row ids
    distances: np.ndarray  # (q, ≤k) float32 squared distances
    k: int

    def __add__(self, other: TopK) -> TopK:
        return _select(
            np.concatenate([self.ids, other.ids], axis=1),
            np.concatenate([self.distances, other.distances], axis=1),
            self.k,
        )


def _select(ids: np.ndarray, distances: np.ndarray, k: int) -> TopK:
    """The k smallest distances per query, ties broken by the lower row id."""
    keep = min(k, distances.shape[1])
    if keep < distances.shape[1]:
        part = np.argpartition(distances, keep - 1, axis=1)[:, :keep]
        ids = np.take_along_axis(ids, part, axis=1)
        distances = np.take_along_axis(distances, part, axis=1)
    order = np.lexsort((ids, distances), axis=1)
    return TopK(
        np.take_along_axis(ids, order, axis=1), np.take_along_axis(distances, order, axis=1), k
    )


def adc_tables(
    queries: np.ndarray, codebook: np.ndarray, rotation: np.ndarray | None = None
) -> np.ndarray:
    """(q, M, 256) float32: ‖q_j − codebook[j, k]‖² for each query sub-vector j and centroid k."""
    codebook, rotation = check_codebook(codebook, rotation)
    queries = np.asarray(queries, dtype=np.float32)
    m, _, dsub = codebook.shape
    if queries.ndim != 2 or queries.shape[1] != m * dsub:
        raise ValueError(f"queries of shape {queries.shape}; expected (q, {m * dsub})")
    if rotation is not None:
        queries = queries @ rotation
    sub = queries.reshape(len(queries), m, dsub)
    # ‖a − b‖² = ‖a‖² − 2 a·b + ‖b‖², one batched product per sub-space.
    tables = np.einsum("qjd,jkd->qjk", sub, codebook) * -2
    tables += np.einsum("qjd,qjd->qj", sub, sub)[:, :, None]
    tables += np.einsum("jkd,jkd->jk", codebook, codebook)[None]
    return np.maximum(tables, 0, out=tables)


def chunk_adc_top_k(codes: np.ndarray, tables: np.ndarray, k: int, row_start: int = 0) -> TopK:
    """TopK of one chunk of codes for every query, row ids offset by ``row_start``."""
    q, m, _ = tables.shape
    codes = _check_codes(codes, m, row_start)
    flat = tables.reshape(q, m * KSUB)
    best = TopK(np.empty((q, 0), np.int64), np.empty((q, 0), np.float32), k)
    offsets = np.arange(m, dtype=np.intp) * KSUB
    for start in range(0, len(codes), _ADC_ROWS):
        block = codes[start : start + _ADC_ROWS]
        distances = np.zeros((q, len(block)), np.float32)
        for j in range(m):
            distances += np.take(flat, block[:, j].astype(np.intp) + offsets[j], axis=1)
        ids = np.broadcast_to(
            np.arange(len(block), dtype=np.int64) + row_start + start, (q, len(block))
        )
        best = best + _select(ids, distances, k)
    return best


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
    tables = adc_tables(queries, codebook, rotation)
    result = compute(reduce_rows(chunk_adc_top_k, [codes], tables, k, split_every=split_every))[0]
    return result.ids, result.distances
