"""Evaluation measures of the papers: numpy in, numbers out.

`evaluate_top_k` is the streaming form used by evaluation jobs: per-class hit counts are a row
reduction (`pipeline.reductions.reduce_rows`), so n rows never reach the client.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from imgscale.pipeline.compute import compute
from imgscale.pipeline.reductions import reduce_rows


def per_class_rate(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Mean over the classes present in y_true of the fraction of their rows predicted right.

    Paper 000 §4 ("average per-class classification rate").
    """
    y_true, y_pred = np.asarray(y_true).ravel(), np.asarray(y_pred).ravel()
    classes, index = np.unique(y_true, return_inverse=True)
    correct = np.bincount(index, weights=y_true == y_pred, minlength=len(classes))
    return float(np.mean(correct / np.bincount(index)))


def top_k_error(y_true: np.ndarray, top_k_labels: np.ndarray, k: int) -> float:
    """Fraction of rows whose label is not among the first k predicted labels.

    Paper 002 §4 ("flat error" of ILSVRC'10).
    """
    top_k_labels = np.asarray(top_k_labels)
    if top_k_labels.ndim != 2 or top_k_labels.shape[1] < k:
        raise ValueError(f"need at least {k} predicted labels per row, got {top_k_labels.shape}")
    hit = (top_k_labels[:, :k] == np.asarray(y_true).ravel()[:, None]).any(axis=1)
    return float(1.0 - hit.mean())


def _rank(relevant: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Relevance in order of decreasing score; ties keep input order (stable sort)."""
    relevant, scores = np.asarray(relevant, dtype=bool), np.asarray(scores, dtype=np.float64)
    if relevant.shape != scores.shape or relevant.ndim != 1:
        raise ValueError(f"relevant {relevant.shape} and scores {scores.shape} must be equal 1-D")
    return relevant[np.argsort(-scores, kind="stable")]


def precision_at_k(relevant: np.ndarray, scores: np.ndarray, k: int = 100) -> float:
    """Fraction of relevant items among the k best-scored (ties in input order).

    Paper 000 §4.4 (precision of the top 100 returned images).
    """
    return float(_rank(relevant, scores)[:k].mean())


def interpolated_average_precision(relevant: np.ndarray, scores: np.ndarray) -> float:
    """Mean, over the ranks of relevant items, of the best precision at that recall or beyond.

    Paper 001 §3 (MiAP). Items are ranked by decreasing score, ties in input order (stable).
    """
    ranked = _rank(relevant, scores)
    if not ranked.any():
        raise ValueError("no relevant items: average precision is undefined")
    precision = np.cumsum(ranked) / np.arange(1, len(ranked) + 1)
    interpolated = np.maximum.accumulate(precision[::-1])[::-1]
    return float(interpolated[ranked].mean())


def mean_interpolated_average_precision(Y_relevant: np.ndarray, scores: np.ndarray) -> float:
    """Interpolated AP averaged over the columns (concepts) that have a relevant item.

    Paper 001 §3 (MiAP).
    """
    Y_relevant, scores = np.asarray(Y_relevant, dtype=bool), np.asarray(scores)
    if Y_relevant.shape != scores.shape or Y_relevant.ndim != 2:
        raise ValueError(f"Y_relevant {Y_relevant.shape} and scores {scores.shape} must be n×C")
    columns = np.flatnonzero(Y_relevant.any(axis=0))
    if len(columns) == 0:
        raise ValueError("no column has a relevant item: MiAP is undefined")
    return float(
        np.mean([interpolated_average_precision(Y_relevant[:, c], scores[:, c]) for c in columns])
    )


def class_hit_counts(
    y_true: np.ndarray, top_k_labels: np.ndarray, classes: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per class of `classes` (sorted): rows right at top 1, right in top k, and rows.

    Labels not in `classes` (e.g. -1 for unlabelled) are not counted.
    """
    y_true, top_k_labels = np.asarray(y_true).ravel(), np.asarray(top_k_labels)
    index = np.searchsorted(classes, y_true).clip(0, max(len(classes) - 1, 0))
    known = np.asarray(classes)[index] == y_true if len(classes) else np.zeros(len(y_true), bool)
    index, top_k_labels, y_true = index[known], top_k_labels[known], y_true[known]
    n_classes = len(classes)
    top1 = np.bincount(index, weights=top_k_labels[:, 0] == y_true, minlength=n_classes)
    in_top_k = (top_k_labels == y_true[:, None]).any(axis=1)
    topk = np.bincount(index, weights=in_top_k, minlength=n_classes)
    totals = np.bincount(index, minlength=n_classes)
    return top1.astype(np.int64), topk.astype(np.int64), totals.astype(np.int64)


def _hit_counts_chunk(
    top_k_labels: np.ndarray, y_true: np.ndarray, classes: np.ndarray, row_start: int = 0
) -> np.ndarray:
    return np.stack(class_hit_counts(y_true, top_k_labels, classes))


def evaluate_top_k(y_true: np.ndarray, top_k: Any) -> dict[str, float | int]:
    """Per-class rate, top-1 and top-5 flat errors of numpy or dask top-k labels (best first).

    Rows labelled -1 are skipped. With fewer than 5 columns (fewer than 5 classes), `top5_error`
    uses all of them. Paper 000 §4 and paper 002 §4.
    """
    y_true = np.asarray(y_true).ravel()
    if top_k.ndim != 2 or len(top_k) != len(y_true):
        raise ValueError(f"top_k {top_k.shape} must be n×k for {len(y_true)} labels")
    classes = np.unique(y_true)
    classes = classes[classes != -1] if classes.dtype.kind in "iuf" else classes
    hits = reduce_rows(_hit_counts_chunk, [top_k[:, :5], y_true], classes, blocks_per_task="auto")
    counts = compute(hits)[0]
    top1, top5, totals = counts
    rows = int(totals.sum())
    if rows == 0:
        raise ValueError("no labelled rows to evaluate")
    present = totals > 0
    return {
        "per_class_rate": float(np.mean(top1[present] / totals[present])),
        "top1_error": float(1 - top1.sum() / rows),
        "top5_error": float(1 - top5.sum() / rows),
        "rows": rows,
    }
