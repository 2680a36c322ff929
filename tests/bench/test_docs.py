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


def test_a_figure_measured_again_on_a_busy_machine_keeps_its_quiet_figure_beside_it():
    def run(time, value, noisy):
        return results.rows([record("fit", value, "s")], benchmark="ridge", scale="small",
                            time=time, noisy=noisy, **COLUMNS)  # fmt: skip

    merged = results.merge(run("t1", 2.0, False), run("t2", 3.0, True))
    assert [(r["time"], r["noisy"]) for r in merged] == [("t1", False), ("t2", True)]
    merged = results.merge(merged, run("t3", 4.0, True))  # the older noisy one goes
    assert [(r["time"], r["noisy"]) for r in merged] == [("t1", False), ("t3", True)]
    merged = results.merge(merged, run("t4", 2.1, False))  # a quiet one replaces both
    assert [(r["time"], r["noisy"]) for r in merged] == [("t4", False)]


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


OLD_COLUMNS = ["benchmark", "name", "value", "unit", "peer_value", "ratio", "scale", "machine",
               "imgscale_version", "commit", "time", "peer", "command", "detail"]  # fmt: skip


def test_rows_keep_the_spread_of_repetitions_and_a_figure_measured_once_has_none():
    repeated = {"name": "fit", "value": 2.0, "unit": "s", "value_min": 1.8, "value_max": 2.5,
                "repeats": 3, "peer_value": 8.0, "ratio": 0.25, "ratio_min": 0.22,
                "ratio_max": 0.3, "rows": 5}  # fmt: skip
    (row,) = _rows("ridge", "small", "t", repeated)
    assert (row["value_min"], row["value_max"], row["repeats"]) == (1.8, 2.5, 3)
    assert (row["ratio_min"], row["ratio_max"]) == (0.22, 0.3)
    assert row["detail"] == '{"rows": 5}'
    (once,) = _rows("ridge", "small", "t", record("rate", 0.75, "rate", 0.5))
    assert (once["value_min"], once["value_max"], once["repeats"]) == (0.75, 0.75, 1)
    assert (once["ratio_min"], once["ratio_max"]) == (1.5, 1.5)


def test_a_table_written_before_the_spread_reads_as_figures_measured_once(tmp_path):
    old = {"benchmark": "ridge", "name": "fit", "value": 2.0, "unit": "s", "peer_value": 8.0,
           "ratio": 0.25, "scale": "small", "machine": "m", "imgscale_version": "0.1.0",
           "commit": "abc", "time": "t", "peer": "sklearn", "command": "cmd",
           "detail": "{}"}  # fmt: skip
    pq.write_table(pa.Table.from_pylist([old]), tmp_path / "old.parquet")
    (row,) = results.read(tmp_path / "old.parquet")
    assert row == {
        **old, "value_min": 2.0, "value_max": 2.0, "repeats": 1, "ratio_min": 0.25,
        "ratio_max": 0.25, "noisy": None, "load_max": None, "calibration_drift": None,
        "code_hash": None, "other_cores": None, "gemm_gflops": None,
    }  # fmt: skip
    pq.write_table(pa.Table.from_pylist([{k: old[k] for k in OLD_COLUMNS[1:]}]), tmp_path / "x.pq")
    with pytest.raises(ValueError, match="missing columns benchmark"):
        results.read(tmp_path / "x.pq")


def test_documents_show_a_repeated_figure_as_its_median_and_extremes(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    fit = {"name": "ridge fit, 8-value rho grid, wall", "value": 2.0, "unit": "s",
           "value_min": 1.8, "value_max": 2.5, "repeats": 3, "peer_value": 8.0, "ratio": 0.25,
           "ratio_min": 0.22, "ratio_max": 0.3, "peer": "sklearn"}  # fmt: skip
    rows = _rows("ridge", "medium", "t1", fit, record("rows", 10.0, "rows"))
    results.write(run / "results.parquet", rows)
    site = tmp_path / "docs"
    docs.add(site, run / "results.parquet")
    docs.write(site)
    speed = (site / "benchmarks.md").read_text()
    assert "| 2 (1.8–2.5) | s | sklearn | 8 | 0.250 (0.220–0.300) |" in speed
    assert "| rows | 10 | rows |" in speed  # measured once: no spread
    assert "| 2 (1.8–2.5) s | sklearn | 8 | 0.25 (0.22–0.3) |" in speed  # the summary's row
    page = (site / "README.md").read_text()
    assert "| 2 (1.8–2.5) s | sklearn | 8 s | 0.25 (0.22–0.3) | 4.0× faster |" in page


def test_a_noisy_run_is_said_to_be_and_never_gives_a_headline(tmp_path):
    name = "ridge fit, 8-value rho grid, wall"
    quiet = results.rows([record(name, 2.0, "s", 8.0, peer="sklearn")], benchmark="ridge",
                         scale="medium", time="t1", noisy=False, load_max=0.5,
                         calibration_drift=0.01, **COLUMNS)  # fmt: skip
    busy = results.rows([record(name, 4.0, "s", 8.0, peer="sklearn")], benchmark="ridge",
                        scale="medium", time="t2", noisy=True, load_max=7.25,
                        calibration_drift=0.3, **COLUMNS)  # fmt: skip
    results.write(tmp_path / docs.TABLE_FILE, quiet + busy)
    docs.write(tmp_path)
    speed = (tmp_path / "benchmarks.md").read_text()
    assert "**Noisy:** load up to 7.25, calibration moved 30% from before to after" in speed
    assert speed.count("**Noisy:**") == 1
    page = (tmp_path / "README.md").read_text()
    assert "| 2 s | sklearn | 8 s | 0.25 |" in page and "| 4 s |" not in page
    # Measured only on a busy machine: no headline at all.
    results.write(tmp_path / docs.TABLE_FILE, busy)
    docs.write(tmp_path)
    assert name not in (tmp_path / "README.md").read_text()
    assert "| [ridge](#ridge):" not in (tmp_path / "benchmarks.md").read_text()
