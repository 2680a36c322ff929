"""The CLI's contract: help everywhere, one-line errors, --json that scripts can rely on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import numpy as np
import pytest
from click.testing import CliRunner

from imgscale.jobs.cli import cli
from imgscale.storage import open_store

IMGSCALE = str(Path(sys.executable).with_name("imgscale"))


def all_commands(group: click.Group, prefix=()):
    for name, command in group.commands.items():
        yield (*prefix, name)
        if isinstance(command, click.Group):
            yield from all_commands(command, (*prefix, name))


@pytest.mark.parametrize("command", list(all_commands(cli)), ids=" ".join)
def test_every_command_has_help(command):
    result = CliRunner().invoke(cli, [*command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output


def run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([IMGSCALE, *map(str, args)], capture_output=True, text=True, timeout=120)


def test_failure_exits_nonzero_with_one_line_on_stderr(tmp_path):
    result = run("info", tmp_path / "missing.zarr")
    assert result.returncode != 0
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("imgscale: error:")


def test_verbose_adds_the_traceback(tmp_path):
    (tmp_path / "not-a-store").mkdir()
    quiet = run("info", tmp_path / "not-a-store")
    verbose = run("info", tmp_path / "not-a-store", "--verbose")
    assert quiet.returncode != 0 and verbose.returncode != 0
    assert "Traceback" not in quiet.stderr
    assert "Traceback" in verbose.stderr


def test_info_json_reports_rows_dim_and_label_counts(tmp_path, digits_splits):
    store = tmp_path / "s.zarr"
    runner = CliRunner()
    for split in ("train", "test"):
        args = ["ingest", str(digits_splits[split]), str(store), "--y-key", "y", "--split", split]
        assert runner.invoke(cli, args).exit_code == 0
    result = run("info", store, "--json")
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    with np.load(digits_splits["train"]) as a, np.load(digits_splits["test"]) as b:
        labels = np.concatenate([a["y"], b["y"]])
    assert info["rows"] == len(labels)
    assert info["dim"] == 64
    assert info["encoding"] == "raw"
    assert sum(info["label_counts"].values()) == len(labels)
    assert info["label_counts"]["3"] == int((labels == 3).sum())
    assert info["bytes_on_disk"] > 0


def test_ingest_of_bad_input_fails_and_changes_nothing(tmp_path, digits_splits):
    store = tmp_path / "s.zarr"
    assert run("ingest", digits_splits["train"], store, "--y-key", "y").returncode == 0
    before = open_store(store).features().compute()
    with np.load(digits_splits["test"]) as data:
        X = data["X"].copy()
    X[5, 3] = np.nan
    bad = tmp_path / "bad.npz"
    np.savez(bad, X=X)
    result = run("ingest", bad, store)
    assert result.returncode != 0
    assert str(bad) in result.stderr or "NaN" in result.stderr
    after = open_store(store)
    assert after.committed_rows == len(before)
    np.testing.assert_array_equal(after.features().compute(), before)


def test_bare_imgscale_prints_the_help_and_exits_0():
    done = subprocess.run(
        [str(Path(sys.executable).with_name("imgscale"))], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: imgscale") and "ingest" in done.stdout
    assert done.stderr == ""


def test_train_predict_and_remove_batch_print_one_json_object_with_json(tmp_path):
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(c, 1, (40, 5)) for c in range(3)]).astype(np.float32)
    np.savez(tmp_path / "a.npz", X=X, y=np.repeat(np.arange(3), 40))
    np.savez(tmp_path / "b.npz", X=X[:10] + 1, y=np.zeros(10, int))
    store, model = str(tmp_path / "s.zarr"), str(tmp_path / "r.model")

    def invoke(*args):
        result = CliRunner().invoke(cli, [*args, "--json"])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    assert invoke("ingest", str(tmp_path / "a.npz"), store)["rows"] == 120
    trained = invoke("train", store, model, "--method", "ridge")
    assert trained["rows"] == 120 and trained["rho"] > 0 and trained["method"] == "ridge"
    out = str(tmp_path / "p.parquet")
    assert invoke("predict", model, store, out)["rows"] == 120
    batch = invoke("ingest", str(tmp_path / "b.npz"), store)["batch_id"]
    assert invoke("remove-batch", store, batch) == {"batch_id": batch, "rows": 10}
    assert open_store(store).committed_rows == 120
