"""A suite that is stopped part-way keeps the results and report of the benchmarks it finished;
each benchmark's rows say how quiet the machine was around it and which code they measured."""

import pyarrow.parquet as pq
import pytest

from imgscale.bench import staleness
from imgscale.bench.calibration import DRIFT_LIMIT, OTHERS_LIMIT
from imgscale.bench.common import record
from imgscale.bench.registry import REPEATS, Benchmark
from imgscale.bench.suite import REPORT_FILE, RESULTS_FILE, run_suite


def test_results_and_report_are_written_after_each_benchmark(tmp_path):
    out = tmp_path / "out"
    seen_by_second = {}

    def first(ctx):
        return [
            record("first figure", 1.5, "s", repeats_asked=ctx.repeats),
            record("first accuracy", 0.75, "per-class rate"),
        ]

    def second(ctx):
        seen_by_second["names"] = pq.read_table(out / RESULTS_FILE).column("name").to_pylist()
        raise KeyboardInterrupt  # the run is stopped while the second benchmark runs

    chosen = [Benchmark("first", "finishes", first), Benchmark("second", "is stopped", second)]
    with pytest.raises(KeyboardInterrupt):
        run_suite(
            chosen, scale="tiny", out=out, workdir=tmp_path / "work", data_dir=None,
            scheduler=None, command="imgscale bench first second", log=lambda line: None,
        )  # fmt: skip
    assert "first figure" in seen_by_second["names"]
    table = pq.read_table(out / RESULTS_FILE).to_pylist()
    row, accuracy = [r for r in table if r["benchmark"] == "first"]
    assert row["value"] == 1.5 and f'"repeats_asked": {REPEATS["tiny"]}' in row["detail"]
    report = (out / REPORT_FILE).read_text()
    assert "first figure" in report

    # The machine around the benchmark, and the code it ran.
    assert row["load_max"] >= 0 and row["calibration_drift"] >= 0 and row["other_cores"] >= 0
    busy = row["other_cores"] > OTHERS_LIMIT
    if busy or row["calibration_drift"] <= DRIFT_LIMIT:  # else: moved only beyond its shots' range
        assert row["noisy"] is busy
    noisy = row["noisy"]
    assert accuracy["noisy"] is False  # a busy machine does not move an accuracy
    assert ("**Noisy**: other processes kept" if noisy else "Quiet: other processes kept") in report
    assert row["code_hash"] == staleness.code_hash(staleness.measured_files(chosen[0]))
    limits = [r for r in table if r["benchmark"] == "machine"]
    assert limits and all(r["noisy"] is None and r["code_hash"] is None for r in limits)
    assert sorted(p.name for p in (tmp_path / "work").iterdir()) == []  # the probe file is gone
