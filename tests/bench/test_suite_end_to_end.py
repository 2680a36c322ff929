"""`imgscale bench --scale tiny`: every registered benchmark end to end at toy size, as CI runs it.

Checks that the results table, the report, the plots and the Dask performance reports are
produced and parse; nothing about speed is asserted.
"""

import matplotlib.image
import pyarrow.parquet as pq
import pytest

from imgscale.bench.registry import benchmarks
from imgscale.bench.results import SCHEMA
from tests.bench.tiny_run import RUN_SECONDS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(RUN_SECONDS + 60)]


def test_every_registered_benchmark_ran_and_none_was_skipped(tiny_run):
    _, _, summary = tiny_run
    assert summary["ran"].split(",") == list(benchmarks())
    assert summary["skipped"] == "" and summary["failed"] == ""


def test_results_table_has_the_columns_and_rows_of_every_benchmark(tiny_run):
    _, out, summary = tiny_run
    table = pq.read_table(out / "results.parquet")
    assert table.schema.names == SCHEMA.names
    rows = table.to_pylist()
    assert len(rows) == summary["rows"]
    assert {r["benchmark"] for r in rows} == {"machine", *benchmarks()}
    assert {r["scale"] for r in rows} == {"tiny"}
    # The command reruns the run without naming this machine's folders.
    assert {r["command"] for r in rows} == {"imgscale bench --scale tiny --out DIR"}
    for r in rows:
        assert r["value"] == r["value"], r  # no NaN figure
        assert r["value_min"] <= r["value"] <= r["value_max"], r
        if r["peer_value"] and r["repeats"] == 1:
            assert r["ratio"] == pytest.approx(r["value"] / r["peer_value"])
        elif r["peer_value"]:  # the median of the repetitions' ratios
            assert r["ratio_min"] <= r["ratio"] <= r["ratio_max"], r
        if r["benchmark"] != "machine":  # the machine around the benchmark, the code it ran
            assert isinstance(r["noisy"], bool) and r["load_max"] >= 0 and r["code_hash"], r
    limits = {r["name"] for r in rows if r["benchmark"] == "machine"}
    assert {"float32 GEMM, 1 core", "memory bandwidth (copy)", "disk sequential read, cold",
            "page-cache sequential read"} <= limits  # fmt: skip


def test_report_names_every_benchmark_and_embeds_plots_that_exist(tiny_run):
    _, out, _ = tiny_run
    report = (out / "report.md").read_text()
    for name in benchmarks():
        assert f"## {name}: " in report
        assert (out / f"{name}-dask.html").read_text().lstrip().lower().startswith("<!doctype html")
    images = [line.split("](", 1)[1].rstrip(")") for line in report.splitlines()
              if line.startswith("![")]  # fmt: skip
    assert images
    for image in images:
        pixels = matplotlib.image.imread(out / image)
        assert pixels.shape[0] > 100 and pixels.shape[1] > 100


def test_nothing_is_written_outside_out_and_workdir(tiny_run):
    cwd, _, _ = tiny_run
    assert sorted(p.name for p in cwd.iterdir()) == ["out", "work"]
