"""The run ledger as users see it: every command recorded, progress from another terminal,
Ctrl-C/SIGTERM cancel cleanly, a killed job becomes lost, and a run can be rerun exactly."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from imgscale.jobs import models, predict
from imgscale.jobs.cli import cli
from imgscale.jobs.predict import predict_to_parquet
from imgscale.pipeline.classify import NearestClassMean
from imgscale.pipeline.compute import compute
from imgscale.storage import Ledger, create_store, open_store
from tests.conftest import sigint_as_from_a_shell

IMGSCALE = str(Path(sys.executable).with_name("imgscale"))


def _imgscale(*args, ledger: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "IMGSCALE_LEDGER": str(ledger)}
    return subprocess.run(
        [IMGSCALE, *map(str, args)], capture_output=True, text=True, timeout=120, env=env
    )


@pytest.fixture
def ncm_model(digits_store, tmp_path):
    path = tmp_path / "ncm.model"
    model = NearestClassMean().fit(np.asarray(digits_store.features("train")),
                                   digits_store.labels("train"))  # fmt: skip
    models.save(model, path)
    return path


def test_a_clean_run_is_recorded_with_its_figures_and_reruns_to_the_same_result(
    digits_store, ncm_model, tmp_path, scheduler_address
):
    ledger = tmp_path / "ledger"
    args = ["evaluate", str(ncm_model), str(digits_store.path), "--split", "test", "--json"]
    runner = CliRunner()
    result = runner.invoke(cli, [*args, "--scheduler", scheduler_address, "--ledger", str(ledger)])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    (record,) = Ledger(ledger).runs()
    assert (record["kind"], record["outcome"], record["error"]) == ("evaluate", "ok", None)
    assert record["figures"] == printed
    assert record["rows"] == printed["rows"]
    assert record["spec"]["model"] == str(ncm_model) and record["spec"]["split"] == "test"
    assert record["scheduler"] == scheduler_address
    assert record["versions"]["numpy"] == np.__version__
    assert record["ended"] >= record["started"]
    shown = runner.invoke(cli, ["runs", "show", record["run_id"][:6], "--ledger", str(ledger)])
    assert shown.exit_code == 0, shown.output
    rerun = shown.stdout.splitlines()[-1].split("rerun: ", 1)[1].split()
    assert rerun[:2] == ["imgscale", "evaluate"] and "--json" not in rerun
    again = runner.invoke(cli, [*rerun[1:], "--json", "--ledger", str(ledger)])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout) == printed
    assert [r["outcome"] for r in Ledger(ledger).runs()] == ["ok", "ok"]


def test_a_failed_run_records_the_one_line_error_it_printed(digits_store, ncm_model, tmp_path):
    ledger = tmp_path / "ledger"
    result = _imgscale(
        "evaluate", ncm_model, digits_store.path, "--split", "nope", "--scheduler",
        "tcp://127.0.0.1:9", ledger=ledger,
    )  # fmt: skip
    assert result.returncode != 0
    (record,) = Ledger(ledger).runs()
    assert record["outcome"] == "failed"
    assert result.stderr.strip() == f"imgscale: error: {record['error']}"


def test_runs_lists_as_json_filtered_by_kind_and_start(digits_splits, tmp_path):
    ledger = tmp_path / "ledger"
    store = tmp_path / "s.zarr"
    for split in ("train", "test"):
        args = ["ingest", digits_splits[split], store, "--y-key", "y", "--split", split]
        assert _imgscale(*args, ledger=ledger).returncode == 0
    assert _imgscale("info", store, ledger=ledger).returncode == 0  # not a job: not recorded
    listed = json.loads(_imgscale("runs", "--json", ledger=ledger).stdout)
    assert [(r["kind"], r["outcome"]) for r in listed] == [("ingest", "ok")] * 2
    assert {"run_id", "kind", "outcome", "started", "ended"} <= set(listed[0])
    assert [r["rows"] for r in listed] == [
        len(np.load(digits_splits[s])["y"]) for s in ("test", "train")
    ]  # newest first
    assert json.loads(_imgscale("runs", "--json", "--kind", "train", ledger=ledger).stdout) == []
    recent = _imgscale("runs", "--json", "--since", "1h", ledger=ledger)
    assert len(json.loads(recent.stdout)) == 2
    future = _imgscale("runs", "--json", "--since", "2999-01-01", ledger=ledger)
    assert json.loads(future.stdout) == []
    bad = _imgscale("runs", "--since", "yesterday-ish", ledger=ledger)
    assert bad.returncode != 0 and bad.stderr.count("\n") == 1


def test_a_running_fit_shows_its_iterations_and_an_image_ingest_images_not_rows(tmp_path):
    from imgscale.jobs.cli.printers import fit_pass_line, images_progress_line, validation_line
    from imgscale.jobs.runs import recorded_run
    from imgscale.pipeline.classify import Validation
    from imgscale.pipeline.describe import FitPass

    ledger = Ledger(tmp_path / "ledger")

    def listed(run) -> str:
        run.beat()  # what the heartbeat thread writes every few seconds
        return CliRunner().invoke(cli, ["runs", "--ledger", ledger.url]).stdout

    with recorded_run("train", {}, ["imgscale", "train"], ledger) as run:
        validation_line("train", quiet=True)(Validation(1800, 6000, 0.4, 0.35, 1600))
        assert re.search(r"running .* train: 1800/6000 iterations$", listed(run), re.M)
        shown = CliRunner().invoke(cli, ["runs", "--ledger", ledger.url, "show", run.run_id])
        assert "progress: train: 1800/6000 iterations" in shown.stdout
    assert ledger.get(run.run_id)["rows"] is None  # iterations are not rows trained on
    with recorded_run("fit-features", {}, ["imgscale", "fit-features"], ledger) as run:
        fit_pass_line("fit-features", quiet=True)(FitPass("sift", "EM", 12, 100, -85.3))
        assert re.search(r"running .* sift EM: 12/100 iterations$", listed(run), re.M)
    with recorded_run("ingest", {}, ["imgscale", "ingest"], ledger) as run:
        images_progress_line(quiet=True)(120, 500, 117, 3)
        assert re.search(r"running .* ingest: 120/500 images$", listed(run), re.M)
        (record,) = [r for r in json.loads(CliRunner().invoke(
            cli, ["runs", "--json", "--ledger", ledger.url, "--kind", "ingest"]
        ).stdout)]  # fmt: skip
        assert (record["rows_done"], record["progress_unit"]) == (120, "images")


def test_runs_lists_each_column_at_one_offset_whatever_the_kinds_width(tmp_path):
    from imgscale.jobs.runs import recorded_run

    ledger = Ledger(tmp_path / "ledger")
    for kind in ("ingest", "fit-features", "train"):
        with recorded_run(kind, {}, ["imgscale", kind], ledger):
            pass
    lines = CliRunner().invoke(cli, ["runs", "--ledger", ledger.url]).stdout.splitlines()
    assert len(lines) == 3
    assert len({line.index(" ok ") for line in lines}) == 1, lines


@pytest.fixture
def slow_ingest(tmp_path):
    """A store with one committed batch, and a file whose ingest takes many small blocks."""
    store = create_store(tmp_path / "slow.zarr", 16, rows_per_chunk=32)
    rng = np.random.default_rng(0)
    store.append("first", rng.standard_normal((100, 16)).astype(np.float32))
    big = tmp_path / "big.npy"
    np.save(big, rng.standard_normal((300_000, 16)).astype(np.float32))
    return store, big


def _start_and_wait_for_progress(store, big, ledger: Path) -> tuple[subprocess.Popen, dict]:
    env = {**os.environ, "IMGSCALE_LEDGER": str(ledger)}
    child = subprocess.Popen(
        [IMGSCALE, "ingest", str(big), str(store.path)],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
        preexec_fn=sigint_as_from_a_shell,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert child.poll() is None, "the ingest ended before it reported progress"
        records = Ledger(ledger).runs() if ledger.exists() else []
        if records and (records[0]["rows_done"] or 0) > 0:
            return child, records[0]
        time.sleep(0.1)
    child.kill()
    raise AssertionError("the ingest never reported progress to the ledger")


@pytest.mark.slow
@pytest.mark.parametrize("sent", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_cancels_a_job_leaves_the_store_unchanged_and_the_ledger_says_cancelled(
    slow_ingest, tmp_path, sent
):
    store, big = slow_ingest
    ledger = tmp_path / "ledger"
    rows_before = store.rows()
    child, running = _start_and_wait_for_progress(store, big, ledger)
    try:
        # Progress is visible to another process (this one) while the job runs.
        listing = CliRunner().invoke(cli, ["runs", "--ledger", str(ledger)]).stdout
        assert re.search(r"running .* ingest: \d+/300000 rows", listing), listing
        assert running["outcome"] == "running" and running["rows_total"] == 300_000
    finally:
        child.send_signal(sent)
        _, stderr = child.communicate(timeout=60)
    # The shell's codes: 128 + the signal's number (130 for Ctrl-C, 143 for SIGTERM).
    assert child.returncode == 128 + sent
    assert stderr.splitlines()[-1] == "imgscale: aborted"
    (record,) = Ledger(ledger).runs()
    assert record["outcome"] == "cancelled"
    assert record["error"] == f"cancelled by {sent.name}"
    reopened = open_store(store.path)
    assert reopened.committed_rows == 100
    assert reopened.rows().equals(rows_before)
    reopened.verify()
    assert not list(store.path.rglob("*.partial"))


@pytest.mark.slow
def test_a_killed_job_reads_lost_at_once_without_any_command_writing(slow_ingest, tmp_path):
    store, big = slow_ingest
    ledger = tmp_path / "ledger"
    child, _ = _start_and_wait_for_progress(store, big, ledger)
    child.send_signal(signal.SIGKILL)
    child.communicate(timeout=60)
    (listed,) = json.loads(_imgscale("runs", "--json", ledger=ledger).stdout)
    assert listed["outcome"] == "lost"
    assert open_store(store.path).committed_rows == 100


def test_a_predict_that_fails_midway_leaves_the_earlier_output_as_it_was(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    store = create_store(tmp_path / "s.zarr", 4, rows_per_chunk=16)
    store.append("b", rng.standard_normal((400, 4)).astype(np.float32), rng.integers(0, 3, 400))
    model = NearestClassMean().fit(np.asarray(store.features()), store.labels())
    out = tmp_path / "predictions.parquet"
    out.write_bytes(b"earlier output")
    calls = []

    def cancelled_at_the_second_round(*blocks):
        calls.append(len(blocks))
        if len(calls) == 2:
            raise KeyboardInterrupt
        return compute(*blocks)

    monkeypatch.setattr(predict, "compute", cancelled_at_the_second_round)
    with pytest.raises(KeyboardInterrupt):
        predict_to_parquet(model, store, out)
    assert len(calls) == 2
    assert out.read_bytes() == b"earlier output"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["predictions.parquet", "s.zarr"]
