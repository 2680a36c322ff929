"""The sufficient statistics (`pipeline.reductions.RowStats`) that a closed-form classifier
keeps as fitted attributes, so that `partial_fit` adds rows to them instead of refitting."""

from __future__ import annotations

from typing import Any

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
