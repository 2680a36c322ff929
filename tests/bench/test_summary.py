"""The summary page, the headline figures it shows and the stale marks, on the committed results."""

import math
import shutil
import subprocess
from pathlib import Path

import pytest

from imgscale.bench import docs, headlines, results, staleness, summary
from imgscale.bench.common import record
from imgscale.bench.headlines import Figure

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _rows(benchmark, scale, time, *records, commit="abc"):
    columns = {"machine": "2 cores, 24 GiB", "imgscale_version": "0.1.0", "command": "cmd"}
    return results.rows(
        list(records), benchmark=benchmark, scale=scale, time=time, commit=commit, **columns
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The documents regenerated from the committed results table and plots."""
    out = tmp_path_factory.mktemp("docs")
    shutil.copyfile(DOCS / docs.TABLE_FILE, out / docs.TABLE_FILE)
    shutil.copytree(DOCS / docs.IMAGES, out / docs.IMAGES)
    docs.write(out)
    return out


def test_every_headline_row_has_a_peer_or_limit_and_a_ratio():
    rows = results.read(DOCS / docs.TABLE_FILE)
    found = headlines.headlines(rows)
    asked = [f for f in headlines.FIGURES if f.question]
    assert len(found) == len(asked), "a headline names a figure the results do not hold"
    for h in found:
        assert h["peer"], f"{h['label']}: no peer or limit named"
        assert h["peer_value"] is not None, f"{h['label']}: no peer value"
        assert h["ratio"] is not None and math.isfinite(h["ratio"]), f"{h['label']}: no ratio"
        if h["repeats"] == 1 or h["ratio_min"] is None:
            assert h["ratio"] == pytest.approx(h["value"] / h["peer_value"])
        else:  # the median of the repetitions' ratios
            assert h["ratio_min"] <= h["ratio"] <= h["ratio_max"]


def test_every_plot_the_pages_name_exists_and_the_page_is_short(site):
    for page in ("README.md", "benchmarks.md", "results.md"):
        text = (site / page).read_text()
        for image in summary.plots_named(text):
            assert (site / image).is_file(), f"{page} names {image}, which does not exist"
    page = (site / "README.md").read_text()
    assert len(page.splitlines()) < 150
    for plot in (summary.SPEED_PLOT, summary.MEMORY_PLOT, summary.ACCURACY_PLOT):
        assert f"images/{plot}" in page
    rows = results.read(DOCS / docs.TABLE_FILE)
    for h in headlines.headlines(rows):
        assert f"| {h['question']} | {h['label']} |" in page


def test_the_committed_pages_name_only_plots_that_exist():
    for page in ("README.md", "benchmarks.md", "results.md"):
        for image in summary.plots_named((DOCS / page).read_text()):
            assert (DOCS / image).is_file(), f"docs/{page} names {image}"


def test_a_figure_is_taken_from_its_newest_run_at_its_largest_scale():
    rows = _rows("ridge", "medium", "2026-01-01", record("fit", 5.0, "s", 50.0))
    rows += _rows("ridge", "small", "2026-03-01", record("fit", 1.0, "s", 4.0))
    rows += _rows("ridge", "medium", "2026-02-01", record("fit", 6.0, "s", 30.0))
    rows += _rows("ridge", "medium", "2026-02-01", record("fit", 0.5, "GB/s"))
    newest = headlines.newest(rows)
    assert sorted((r["value"], r["unit"]) for r in newest) == [(0.5, "GB/s"), (6.0, "s")]
    h = headlines.resolve(Figure("ridge", "fit", "fit", lower_is_better=True, unit="s"), rows)
    assert (h["value"], h["peer_value"], h["ratio"]) == (6.0, 30.0, 0.2)
    assert h["reading"] == "5.0× better"


def _readme_with_host_rate(site: Path, benchmark: str) -> list[str]:
    """README.md's lines regenerated from the committed results, ``benchmark``'s runs given a
    host's GEMM rate of 140.3 GFLOP/s and every other run none."""
    rows = results.read(DOCS / docs.TABLE_FILE)
    for row in rows:
        row["gemm_gflops"] = 140.3 if row["benchmark"] == benchmark else None
    results.write(site / docs.TABLE_FILE, rows)
    docs.write(site)
    return (site / "README.md").read_text().splitlines()


def test_a_headline_names_its_hosts_gemm_rate_where_its_run_measured_it(tmp_path):
    lines = _readme_with_host_rate(tmp_path, "ridge")
    ridge = [line for line in lines if "(benchmarks.md#ridge)" in line]
    others = [line for line in lines if line.startswith("| ") and "#ridge)" not in line]
    timed = [line for line in ridge if "less memory" not in line]
    assert timed and all(", GEMM 140 GFLOP/s; " in line for line in timed)
    # Not beside a size or an accuracy: a host's speed does not move them.
    assert not any("GFLOP/s" in line for line in ridge if line not in timed)
    assert others and not any("GFLOP/s;" in line for line in others)
    lines = _readme_with_host_rate(tmp_path, "ncm-metric")
    metric = [line for line in lines if "(results.md#ncm-metric)" in line]
    assert metric and not any("GFLOP/s" in line for line in metric)
    assert "AMD EPYC, GEMM 140 GFLOP/s." in (tmp_path / "results.md").read_text()


def test_the_peer_can_be_another_figure_of_the_same_run_or_a_papers():
    rows = _rows(
        "hope", "medium", "t2", record("2-D error", 2.5, "%"), record("1-NN error", 3.0, "%")
    )
    rows += _rows("hope", "small", "t1", record("1-NN error", 1.0, "%"))
    same_run = Figure("hope", "2-D error", "2-D", peer_figure="1-NN error", lower_is_better=True,
                      words=("lower error", "higher error"))  # fmt: skip
    h = headlines.resolve(same_run, rows)
    assert (h["peer_value"], h["ratio"], h["reading"]) == (3.0, 2.5 / 3.0, "1.20× lower error")
    paper = Figure("hope", "2-D error", "2-D", paper=(2.0, "paper 003 Table 3"))
    h = headlines.resolve(paper, rows)
    assert (h["peer"], h["peer_value"], h["ratio"]) == ("paper 003 Table 3", 2.0, 1.25)
    assert headlines.resolve(Figure("hope", "3-D error", "3-D"), rows) is None


def test_a_ratio_reads_as_a_factor_or_a_share():
    faster = Figure("b", "x", "x", words=("faster", "slower"), lower_is_better=True)
    assert headlines.reading(0.0741, faster) == "13× faster"
    assert headlines.reading(1.29, faster) == "1.29× slower"
    assert headlines.reading(0.99, faster) == "on par"
    assert headlines.reading(None, faster) == ""
    budget = Figure("b", "x", "x", share_of="the budget")
    assert headlines.reading(0.877, budget) == "88% of the budget"
    assert headlines.reading(2e-6, budget) == "< 1% of the budget"


def test_a_benchmark_not_named_in_headlines_is_summarised_by_its_rated_figures():
    rows = _rows("newbench", "small", "t", record("a", 1.0, "s"), record("b", 2.0, "s", 4.0))
    rows += _rows("newbench", "medium", "t", record("c", 3.0, "s", 6.0), record("d", 1.0, "s"))
    assert [h["name"] for h in headlines.summary("newbench", rows)] == ["c"]


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_figure_measured_before_its_code_changed_is_marked_stale(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    for key, value in (("user.name", "t"), ("user.email", "t@example.org")):
        _git(repo, "config", key, value)
    measured, other = repo / "ridge.py", repo / "other.py"
    measured.write_text("a = 1\n")
    other.write_text("b = 1\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "first")
    first = _git(repo, "rev-parse", "--short", "HEAD")
    other.write_text("b = 2\n")
    _git(repo, "commit", "-q", "-am", "another file")
    second = _git(repo, "rev-parse", "--short", "HEAD")
    measured.write_text("a = 2\n")
    _git(repo, "commit", "-q", "-am", "the measured code")
    third = _git(repo, "rev-parse", "--short", "HEAD")

    monkeypatch.setattr(staleness, "_checkout", lambda: repo.resolve())
    monkeypatch.setattr(staleness, "measured_files", lambda bench: [measured.resolve()])
    rows = _rows("ridge", "small", "t", record("fit", 1.0, "s"), commit=first)
    rows += _rows("ridge", "medium", "t", record("fit", 1.0, "s"), commit=second)
    rows += _rows("ridge", "large", "t", record("fit", 1.0, "s"), commit=third)
    rows += _rows("ridge", "tiny", "t", record("fit", 1.0, "s"), commit="0000000")
    known = {"ridge": object()}
    found = staleness.changes(rows, known)
    assert found == {
        ("ridge", first, ""): staleness.Change(1, third),
        ("ridge", second, ""): staleness.Change(1, third),
    }


def test_without_git_nothing_is_marked_stale(monkeypatch):
    monkeypatch.setenv("PATH", "")
    rows = _rows("ridge", "small", "t", record("fit", 1.0, "s"), commit="abc")
    assert staleness.changes(rows, {"ridge": object()}) == {}


def test_the_speed_plot_whiskers_span_the_repetitions_ratios_as_advantages():
    faster = {"ratio": 0.25, "ratio_min": 0.2, "ratio_max": 0.4, "repeats": 3,
              "lower_is_better": True}  # fmt: skip
    assert summary._advantage_spread(faster) == pytest.approx((2.5, 5.0))
    assert summary._advantage_spread({**faster, "lower_is_better": False}) == (0.2, 0.4)
    assert summary._advantage_spread({**faster, "repeats": 1}) is None
    assert summary._advantage_spread({**faster, "ratio_min": None}) is None
