"""The sufficient statistics (`pipeline.reductions.RowStats`) that a closed-form classifier
keeps as fitted attributes, so that `partial_fit` adds rows to them instead of refitting, and
`changed_stats` adds and subtracts the rows a store gained and lost (`imgscale update`), in one
pass over them however many sides and splits change (`row_change`, `computed`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dask
import numpy as np

from imgscale.pipeline.classify._base import encode_labels, unique_labels
from imgscale.pipeline.compute import compute
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


@dataclass
class RowChange:
    """The statistics of the rows added to a fit and of the rows removed from it, indexed by
    ``space``: the fit's classes and every label of those rows, sorted. ``added`` and
    ``removed`` are RowStats, passes not yet run (`computed` runs them), or None (no rows)."""

    space: np.ndarray
    added: Any
    removed: Any


def row_change(
    classes: np.ndarray,
    stats_of: Callable[[Any, np.ndarray, int], Any],
    added: tuple[Any, np.ndarray],
    removed: tuple[Any, np.ndarray],
) -> RowChange:
    """The change of a fit indexed by ``classes`` when ``added`` and ``removed`` ((rows, labels)
    pairs; label -1: unlabelled, counted for centring only) are added and removed, each summed
    by ``stats_of(rows, class_index, n_classes)``, which may return a pass not yet run."""
    (X_add, y_add), (X_removed, y_removed) = added, removed
    space = np.union1d(classes, np.union1d(unique_labels(y_add), unique_labels(y_removed)))

    def stats(X: Any, y: np.ndarray) -> Any:
        return stats_of(X, encode_labels(y, space), len(space)) if len(y) else None

    return RowChange(space, stats(X_add, y_add), stats(X_removed, y_removed))


def computed(*changes: RowChange) -> list[RowChange]:
    """``changes`` with every pass not yet run run, all in one graph: one pass over the changed
    rows of them all, not one per side and per change."""
    sides = [side for change in changes for side in (change.added, change.removed)]
    pending = [i for i, side in enumerate(sides) if dask.is_dask_collection(side)]
    for i, value in zip(pending, compute(*(sides[i] for i in pending)), strict=True):
        sides[i] = value
    return [
        RowChange(change.space, sides[2 * i], sides[2 * i + 1]) for i, change in enumerate(changes)
    ]


def apply_change(
    kept: RowStats, classes: np.ndarray, change: RowChange
) -> tuple[RowStats, np.ndarray, np.ndarray]:
    """The statistics of a fit's rows after a computed ``change``, without its rows.

    ``kept`` are the statistics of the fit, indexed by ``classes``. Returns the statistics over
    the classes left with rows, those classes sorted as `fit` sorts them (so the result is
    indexed as a fit from scratch on the rows as they now are), and the classes of ``classes``
    left with none. ValueError if a class's row count goes negative: the removed rows were not
    all rows of the fit.
    """
    space = change.space
    index = np.searchsorted(space, classes)
    total = RowStats.zeros(kept.feature_sum.shape[0], len(space), gram=kept.gram is not None)
    total.n_rows = kept.n_rows
    total.feature_sum = kept.feature_sum.copy()
    total.gram = None if kept.gram is None else kept.gram.copy()
    total.class_sums[index] = kept.class_sums
    total.class_counts[index] = kept.class_counts
    if change.added is not None:
        total = total + change.added
    if change.removed is not None:
        total = total - change.removed
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


def changed_stats(
    kept: RowStats,
    classes: np.ndarray,
    stats_of: Callable[[Any, np.ndarray, int], Any],
    added: tuple[Any, np.ndarray],
    removed: tuple[Any, np.ndarray],
) -> tuple[RowStats, np.ndarray, np.ndarray]:
    """`apply_change` of the rows ``added`` and ``removed`` (`row_change`), both summed in one
    pass."""
    (change,) = computed(row_change(classes, stats_of, added, removed))
    return apply_change(kept, classes, change)
