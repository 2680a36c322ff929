"""The sufficient statistics (`pipeline.reductions.RowStats`) that a closed-form classifier
keeps as fitted attributes, so that `partial_fit` adds rows to them instead of refitting, and
`changed_stats` adds and subtracts the rows a store gained and lost (`imgscale update`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from imgscale.pipeline.classify._base import encode_labels, unique_labels
from imgscale.pipeline.reductions import RowStats


def row_stats_attributes(stats: RowStats) -> dict[str, Any]:
    """`n_rows_`, `feature_sum_`, `gram_`, `class_sums_` and `class_counts_` of `stats`."""
    return {
        "n_rows_": int(stats.n_rows),
        "feature_sum_": stats.feature_sum,
        "gram_": stats.gram,
        "class_sums_": stats.class_sums,
        "class_counts_": stats.class_counts,
    }


class RowStatsMixin:
    """`_row_stats()`: the statistics stored by `row_stats_attributes`, to add new rows to."""

    def _row_stats(self) -> RowStats:
        return RowStats(
            n_rows=self.n_rows_,
            feature_sum=self.feature_sum_,
            class_sums=self.class_sums_,
            class_counts=self.class_counts_,
            gram=self.gram_,
        )


def changed_stats(
    kept: RowStats,
    classes: np.ndarray,
    stats_of: Callable[[Any, np.ndarray, int], RowStats],
    added: tuple[Any, np.ndarray],
    removed: tuple[Any, np.ndarray],
) -> tuple[RowStats, np.ndarray, np.ndarray]:
    """The statistics of a fit's rows after rows were added and removed, without its rows.

    ``kept`` are the statistics of the fit, indexed by ``classes``; ``added`` and ``removed``
    are (rows, labels) pairs (label -1: unlabelled, counted for centring only), each summed once
    by ``stats_of(rows, class_index, n_classes)``. Returns the statistics over the classes left
    with rows, those classes sorted as `fit` sorts them (so the result is indexed as a fit from
    scratch on the rows as they now are), and the classes of ``classes`` left with none.
    ValueError if a class's row count goes negative: the removed rows were not all rows of the
    fit.
    """
    (X_add, y_add), (X_removed, y_removed) = added, removed
    space = np.union1d(classes, np.union1d(unique_labels(y_add), unique_labels(y_removed)))
    index = np.searchsorted(space, classes)
    total = RowStats.zeros(kept.feature_sum.shape[0], len(space), gram=kept.gram is not None)
    total.n_rows = kept.n_rows
    total.feature_sum = kept.feature_sum.copy()
    total.gram = None if kept.gram is None else kept.gram.copy()
    total.class_sums[index] = kept.class_sums
    total.class_counts[index] = kept.class_counts
    if len(y_add):
        total = total + stats_of(X_add, encode_labels(y_add, space), len(space))
    if len(y_removed):
        total = total - stats_of(X_removed, encode_labels(y_removed, space), len(space))
    if (total.class_counts < 0).any():
        below = space[total.class_counts < 0]
        raise ValueError(
            f"removing rows the fit never counted (classes {below[:10].tolist()} go below zero "
            "rows); the removed rows must be rows of the fit"
        )
    live = total.class_counts > 0
    dropped = space[~live & np.isin(space, classes)]
    return (
        RowStats(
            n_rows=total.n_rows,
            feature_sum=total.feature_sum,
            class_sums=total.class_sums[live],
            class_counts=total.class_counts[live],
            gram=total.gram,
        ),
        space[live],
        dropped,
    )
