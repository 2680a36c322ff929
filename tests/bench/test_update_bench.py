"""`imgscale bench update` in the session's tiny run: both methods measured beside a fresh
train, the change is the one the benchmark describes, and the updated models predict as the
fresh ones."""

from __future__ import annotations

from imgscale.bench.update import BATCHES, FORGOTTEN

from .conftest import benchmark_rows

TINY_ROWS = 4_000  # bench/update.py's tiny size


def test_update_is_timed_beside_train_on_the_change_it_describes(tiny_run):
    rows = benchmark_rows(tiny_run, "update")
    assert sorted(name.split()[0] for name in rows) == ["ncm", "ridge"]
    per_batch = TINY_ROWS // BATCHES
    for r in rows.values():
        # One batch added and one removed (their train rows: 9 of every 10), and the train rows
        # among the forgotten ones.
        assert r["rows_added"] == per_batch * 9 // 10
        assert r["rows_removed"] == per_batch * 9 // 10 + FORGOTTEN * 9 // 10
        assert r["changed_rows"] == 2 * per_batch + FORGOTTEN
        assert r["prediction_agreement"] == 1.0
        assert r["peer_value"] > 0
        # Update and train in turn, round after round: the ratio is the median of the rounds'.
        assert r["repeats"] >= 2 and r["value_min"] <= r["value"] <= r["value_max"]
        assert r["ratio_min"] <= r["ratio"] <= r["ratio_max"]
        assert r["target_seconds"] == 2 * r["changed_fraction"] * r["peer_value"] + 1
