"""The results table and the documents regenerated from it."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from imgscale.bench import docs, results
from imgscale.bench.common import record

COLUMNS = {"machine": "m", "imgscale_version": "0.1.0", "commit": "abc", "command": "cmd"}


def _rows(benchmark, scale, time, *records):
    return results.rows(list(records), benchmark=benchmark, scale=scale, time=time, **COLUMNS)


def test_rows_keep_the_ratio_and_the_extra_keys():
    (row,) = _rows("ridge", "small", "t", record("fit", 2.0, "s", 8.0, peer="sklearn", rows=5))
    assert (row["value"], row["peer_value"], row["ratio"], row["peer"]) == (
        2.0,
        8.0,
        0.25,
        "sklearn",
    )
    assert row["detail"] == '{"rows": 5}'


def test_table_round_trips_and_a_foreign_parquet_is_refused(tmp_path):
    rows = _rows("ridge", "small", "t", record("fit", 2.0, "s"), record("rss", 1.5, "GiB", 2.0))
    results.write(tmp_path / "r.parquet", rows)
    assert results.read(tmp_path / "r.parquet") == [
        {name: row.get(name) for name in results.SCHEMA.names} for row in rows
    ]
    pq.write_table(pa.table({"value": [1.0]}), tmp_path / "other.parquet")
    with pytest.raises(ValueError, match=r"other\.parquet: not a results table"):
        results.read(tmp_path / "other.parquet")


def test_merge_replaces_a_figure_measured_again_at_the_same_scale_only():
    old = _rows("ridge", "small", "t1", record("fit", 2.0, "s"), record("rss", 1.0, "GiB"))
    old += _rows("ridge", "medium", "t1", record("fit", 9.0, "s"))
    new = _rows("ridge", "small", "t2", record("fit", 3.0, "s"))
    merged = results.merge(old, new)
    assert sorted((r["scale"], r["name"], r["value"]) for r in merged) == [
        ("medium", "fit", 9.0), ("small", "fit", 3.0), ("small", "rss", 1.0),
    ]  # fmt: skip


def test_documents_show_each_figure_beside_its_peer_and_the_plots(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    rows = _rows("ridge", "small", "t1", record("ridge fit", 2.0, "s", 8.0, peer="sklearn"))
    rows += _rows("accuracy", "small", "t1", record("usps linear 3", 0.75, "rate"))
    results.write(run / "results.parquet", rows)
    (run / "ridge-ratios.png").write_bytes(b"png")
    site = tmp_path / "docs"
    assert docs.add(site, run / "results.parquet") == 2
    docs.write(site)
    speed = (site / "benchmarks.md").read_text()
    accuracy = (site / "results.md").read_text()
    assert "| ridge fit | 2 | s | sklearn | 8 | 0.250 |" in speed
    assert "Command: `cmd`" in speed and "Machine: m." in speed
    assert "![ridge-small-ratios](images/ridge-small-ratios.png)" in speed
    assert (site / "images" / "ridge-small-ratios.png").read_bytes() == b"png"
    assert "usps linear 3" in accuracy and "usps linear 3" not in speed
    assert "Findings" not in speed

    (site / "findings").mkdir()
    (site / "findings" / "ridge.md").write_text("**Findings.** Ridge streams.\n")
    docs.write(site)
    speed = (site / "benchmarks.md").read_text()
    assert "## ridge" in speed and "**Findings.** Ridge streams." in speed
    assert speed.index("**Findings.**") < speed.index("| ridge fit |")

    results.write(
        run / "results.parquet", _rows("ridge", "small", "t2", record("ridge fit", 4.0, "s"))
    )
    docs.add(site, run / "results.parquet")
    docs.write(site)
    speed = (site / "benchmarks.md").read_text()
    assert "| ridge fit | 4 | s |" in speed and "| ridge fit | 2 |" not in speed


def test_a_benchmark_whose_name_prefixes_another_gets_only_its_own_plots(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    rows = _rows("ale", "small", "t1", record("fit", 1.0, "s"))
    rows += _rows("ale-ssl", "small", "t1", record("usps 3", 0.6, "rate"))
    results.write(run / "results.parquet", rows)
    (run / "ale-ratios.png").write_bytes(b"ale")
    (run / "ale-ssl-growing-sets.png").write_bytes(b"ssl")
    site = tmp_path / "docs"
    docs.add(site, run / "results.parquet")
    assert sorted(p.name for p in (site / "images").iterdir()) == [
        "ale-small-ratios.png", "ale-ssl-small-growing-sets.png",
    ]  # fmt: skip


def test_an_accuracy_run_keeps_the_machine_limits_measured_beside_the_speed_figures(tmp_path):
    quiet = _rows("machine", "medium", "t1", record("memory bandwidth (copy)", 25.0, "GB/s"))
    quiet += _rows("ridge", "medium", "t1", record("ridge fit throughput", 8.0, "rows/s"))
    results.write(tmp_path / docs.TABLE_FILE, quiet)
    busy = _rows("machine", "medium", "t2", record("memory bandwidth (copy)", 9.0, "GB/s"))
    (tmp_path / "accuracy").mkdir()
    results.write(tmp_path / "accuracy" / "r.parquet", busy + _rows(
        "natural-ncm", "medium", "t2", record("NCM, l2: top-1 error", 0.5, "error")))  # fmt: skip
    assert docs.add(tmp_path, tmp_path / "accuracy" / "r.parquet") == 1
    limits = [r for r in results.read(tmp_path / docs.TABLE_FILE) if r["benchmark"] == "machine"]
    assert [r["value"] for r in limits] == [25.0]
    (tmp_path / "speed").mkdir()
    results.write(tmp_path / "speed" / "r.parquet", busy + _rows(
        "ridge", "medium", "t2", record("ridge fit throughput", 9.0, "rows/s")))  # fmt: skip
    assert docs.add(tmp_path, tmp_path / "speed" / "r.parquet") == 2
    limits = [r for r in results.read(tmp_path / docs.TABLE_FILE) if r["benchmark"] == "machine"]
    assert [r["value"] for r in limits] == [9.0]
