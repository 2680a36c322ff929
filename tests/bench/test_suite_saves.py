"""A suite that is stopped part-way keeps the results and report of the benchmarks it finished."""

import pyarrow.parquet as pq
import pytest

from imgscale.bench.common import record
from imgscale.bench.registry import Benchmark
from imgscale.bench.suite import REPORT_FILE, RESULTS_FILE, run_suite


def test_results_and_report_are_written_after_each_benchmark(tmp_path):
    out = tmp_path / "out"
    seen_by_second = {}

    def first(ctx):
        return [record("first figure", 1.5, "s")]

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
    assert [r["value"] for r in table if r["benchmark"] == "first"] == [1.5]
    assert "first figure" in (out / REPORT_FILE).read_text()
