"""`imgscale bench --compare OLD NEW` on results tables written here with pyarrow: a change beyond
the spread is flagged with its direction, a wobble inside it is not."""

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from imgscale.bench import calibration, compare, docs, headlines, results, units
from imgscale.bench.cli import bench

OLD_COLUMNS = ["benchmark", "name", "value", "unit", "peer_value", "ratio", "scale", "machine",
               "imgscale_version", "commit", "time", "peer", "command", "detail"]  # fmt: skip


def _row(
    name, value, unit, *, low=None, high=None, repeats=3, noisy=False, benchmark="ridge", gemm=None
):
    """A row as a suite run writes it: the median of ``repeats`` with its extremes."""
    return {
        "benchmark": benchmark, "name": name, "value": value, "unit": unit, "peer_value": None,
        "ratio": None, "scale": "small", "machine": "m", "imgscale_version": "0.1.0",
        "commit": "abc", "time": "t", "peer": "", "command": "cmd", "detail": "{}",
        "value_min": value if low is None else low, "value_max": value if high is None else high,
        "repeats": repeats, "ratio_min": None, "ratio_max": None, "noisy": noisy,
        "load_max": 1.0, "calibration_drift": 0.02, "code_hash": "h", "gemm_gflops": gemm,
    }  # fmt: skip


def _table(path, rows, columns=None):
    columns = columns or list(rows[0])
    pq.write_table(pa.Table.from_pylist([{c: r[c] for c in columns} for r in rows]), path)
    return path


def _verdicts(old, new, **options):
    return {(d.benchmark, d.name): d.verdict for d in compare.compare(old, new, **options)}


def test_a_planted_30_percent_regression_is_flagged_and_a_5_percent_wobble_is_not():
    old = [_row("fit", 10.0, "s", low=9.5, high=10.6), _row("read", 2.0, "GB/s", low=1.9, high=2.1)]
    new = [
        _row("fit", 13.0, "s", low=12.4, high=13.7),
        _row("read", 2.1, "GB/s", low=1.95, high=2.2),
    ]
    assert _verdicts(old, new) == {("ridge", "fit"): "worse", ("ridge", "read"): "within noise"}
    (fit, _) = compare.compare(old, new)
    assert fit.change == pytest.approx(0.3)


def test_an_improvement_is_reported_as_one_whichever_way_the_unit_points():
    old = [_row("fit", 10.0, "s", low=9.5, high=10.6), _row("read", 2.0, "GB/s", low=1.9, high=2.1)]
    new = [_row("fit", 7.0, "s", low=6.8, high=7.3), _row("read", 2.6, "GB/s", low=2.5, high=2.7)]
    assert set(_verdicts(old, new).values()) == {"better"}
    new = [
        _row("fit", 13.0, "s", low=12.0, high=14.0),
        _row("read", 1.4, "GB/s", low=1.3, high=1.5),
    ]
    assert set(_verdicts(old, new).values()) == {"worse"}


def test_intervals_that_touch_are_within_noise():
    old = [_row("fit", 10.0, "s", low=9.0, high=11.0)]
    assert _verdicts(old, [_row("fit", 12.0, "s", low=11.0, high=13.0)]) == {
        ("ridge", "fit"): "within noise"
    }
    assert _verdicts(old, [_row("fit", 12.0, "s", low=11.01, high=13.0)]) == {
        ("ridge", "fit"): "worse"
    }


def test_a_timing_measured_once_compares_within_the_stated_tolerance():
    old = [_row("fit", 10.0, "s", repeats=1)]
    assert compare.TOLERANCE == 0.10
    for value, verdict in ((10.9, "within noise"), (11.2, "worse"), (8.8, "better")):
        new = [_row("fit", value, "s", repeats=1)]
        assert _verdicts(old, new) == {("ridge", "fit"): verdict}, value
    new = [_row("fit", 10.3, "s", repeats=1)]
    assert _verdicts(old, new, tolerance=0.01) == {("ridge", "fit"): "worse"}
    # Against a spread, the single figure must stand 10% of it beyond the spread's extremes.
    new = [_row("fit", 10.5, "s", low=10.4, high=10.9)]
    assert _verdicts(old, new) == {("ridge", "fit"): "within noise"}
    new = [_row("fit", 11.5, "s", low=11.2, high=11.9)]
    assert _verdicts(old, new) == {("ridge", "fit"): "worse"}


def test_an_accuracy_measured_once_changes_when_it_moves_beyond_summation_noise():
    """Seeds are fixed and no load moves an accuracy: a point lost is a change, whatever
    ``tolerance`` (the machine's drift) allows timings."""
    old = [_row("rate", 0.80, "per-class rate", repeats=1)]
    assert compare.UNTIMED_TOLERANCE == 0.005
    for value, verdict in ((0.798, "within noise"), (0.79, "worse"), (0.81, "better")):
        new = [_row("rate", value, "per-class rate", repeats=1)]
        assert _verdicts(old, new, tolerance=0.5) == {("ridge", "rate"): verdict}, value


def test_a_figure_in_one_table_only_is_added_or_removed_and_a_noisy_one_is_said_to_be():
    old = [_row("gone", 1.0, "s"), _row("fit", 10.0, "s", low=9.5, high=10.5),
           _row("read", 1.0, "GB/s", benchmark="io")]  # fmt: skip
    new = [_row("fit", 20.0, "s", low=19.0, high=21.0, noisy=True), _row("fresh", 1.0, "s")]
    assert _verdicts(old, new) == {
        ("ridge", "fit"): "noisy", ("ridge", "fresh"): "added", ("ridge", "gone"): "removed",
        ("io", "read"): "not run",
    }  # fmt: skip


def test_of_a_figure_kept_from_a_quiet_run_beside_a_noisy_one_the_quiet_one_is_compared():
    quiet = _row("fit", 10.0, "s", low=9.5, high=10.5)
    noisy = {**_row("fit", 30.0, "s", noisy=True), "time": "t9"}
    new = [_row("fit", 13.0, "s", low=12.5, high=13.5)]
    assert _verdicts([quiet, noisy], new) == {("ridge", "fit"): "worse"}


def test_a_unit_without_a_known_direction_is_changed_not_better_or_worse():
    old = [_row("directions used", 10.0, "directions", repeats=1)]
    new = [_row("directions used", 20.0, "directions", repeats=1)]
    assert _verdicts(old, new) == {("ridge", "directions used"): "changed"}


def test_the_direction_agrees_with_every_headline_that_says_which_way_is_better():
    """One place says which way a unit points; the headlines' own reading of their ratios
    (lower_is_better) must not contradict it on the committed results."""
    rows = results.read(Path(__file__).resolve().parents[2] / "docs" / docs.TABLE_FILE)
    checked = 0
    for figure in headlines.FIGURES:
        if figure.share_of or figure.peer_figure:
            continue  # a share of a budget, a flatness: the ratio's direction, not the figure's
        row = headlines.resolve(figure, rows)
        sign = units.direction(row["unit"], row["name"]) if row else 0
        if sign:
            checked += 1
            assert (sign < 0) == figure.lower_is_better, (figure.label, row["unit"])
    assert checked >= 10


def test_the_command_compares_an_old_table_with_a_new_one_in_text_and_json(tmp_path):
    old_rows = [_row("fit", 10.0, "s", repeats=1), _row("gone", 1.0, "s", repeats=1)]
    old = _table(tmp_path / "old.parquet", old_rows, OLD_COLUMNS)  # written before the spread
    new = _table(tmp_path / "new.parquet", [
        _row("fit", 13.0, "s", low=12.5, high=13.6),
        _row("rss", 1.0, "GiB", noisy=True, benchmark="embed"),
    ])  # fmt: skip
    runner = CliRunner()
    done = runner.invoke(bench, ["--compare", str(old), str(new), "--json"])
    assert done.exit_code == 0, done.output
    found = json.loads(done.output)
    assert all(re.fullmatch(r"[a-z_]+", key) for key in found)
    assert all(not isinstance(value, dict | list) for value in found.values())
    assert (found["compared"], found["worse"], found["within_noise"]) == (1, 1, 0)
    assert found["worse_figures"] == "ridge: fit (small, s)"
    assert found["added_figures"] == "embed: rss (small, GiB)"
    assert found["removed_figures"] == "ridge: gone (small, s)"
    done = runner.invoke(bench, ["--compare", str(old), str(new)])
    assert done.exit_code == 0, done.output
    assert "worse:\n  ridge: fit (small, s): 10 → 13 (12.5–13.6), +30%\n" in done.output
    assert "0 of benchmarks NEW did not run (where a side was measured once: beyond 10%)" in (
        done.output
    )

    done = runner.invoke(bench, ["ridge", "--compare", str(old), str(new), "--json"])
    assert json.loads(done.output)["added"] == 0
    done = runner.invoke(bench, ["nope", "--compare", str(old), str(new)])
    assert done.exit_code != 0 and "neither table has a figure of nope" in done.output


def test_a_noisy_figure_names_the_table_whose_run_was_noisy(tmp_path):
    old = _table(tmp_path / "old.parquet", [_row("fit", 10.0, "s", repeats=1)])
    new = _table(tmp_path / "new.parquet", [_row("fit", 30.0, "s", repeats=1, noisy=True)])
    done = CliRunner().invoke(bench, ["--compare", str(old), str(new)])
    assert "noisy:\n  ridge: fit (small, s): 10 → 30, +200% (noisy in new)\n" in done.output


def test_hosts_differ_past_the_calibrations_limit_of_one_hosts_drift():
    assert compare.HOST_TOLERANCE == calibration.DRIFT_LIMIT


def test_a_time_from_a_host_of_another_speed_is_not_called_worse(tmp_path):
    """Recorded on two hosts both described as "2 cores, 24 GiB, AMD EPYC": bench embed's
    RFF-2000 → ridge took 34.95 s where the calibration's GEMM ran at 186 GFLOP/s and 64.1 s
    (64.1–67.7) where it ran at 140; the code it measured had not changed."""
    old = [_row("rff ridge", 34.95, "s", repeats=1, gemm=186.0),
           _row("rate", 0.7245, "fraction", repeats=1, gemm=186.0)]  # fmt: skip
    new = [_row("rff ridge", 64.11, "s", low=64.11, high=67.69, gemm=140.3),
           _row("rate", 0.7245, "fraction", repeats=1, gemm=140.3)]  # fmt: skip
    assert _verdicts(old, new) == {
        ("ridge", "rff ridge"): "other machine",
        ("ridge", "rate"): "within noise",  # no host moves an accuracy
    }
    # Within the limit of one host's drift, or with a host unknown, the times are compared.
    for gemm in (180.0, None):
        new[0]["gemm_gflops"] = gemm
        assert _verdicts(old, new)[("ridge", "rff ridge")] == "worse"
    new[0]["gemm_gflops"] = 140.3
    done = CliRunner().invoke(
        bench, ["--compare", str(_table(tmp_path / "old.parquet", old)),
                str(_table(tmp_path / "new.parquet", new))],
    )  # fmt: skip
    assert "1 other machine" in done.output
    assert (
        "other machine:\n  ridge: rff ridge (small, s): 34.95 → 64.11 (64.11–67.69), +83% "
        "(host GEMM 186 → 140 GFLOP/s)\n" in done.output
    )


def test_compare_refuses_the_options_of_a_run_and_tolerance_needs_it(tmp_path):
    table = _table(tmp_path / "t.parquet", [_row("fit", 10.0, "s")])
    runner = CliRunner()
    done = runner.invoke(bench, ["--compare", str(table), str(table), "--out", str(tmp_path)])
    assert done.exit_code == 2 and "--compare runs nothing: drop --out" in done.output
    done = runner.invoke(bench, ["--list", "--tolerance", "0.2"])
    assert done.exit_code == 2 and "--tolerance needs --compare OLD NEW" in done.output
