"""Job specs: checked in full before anything runs, one line a problem; a run equals the CLI."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from click.testing import CliRunner

from imgscale.jobs import models
from imgscale.jobs.cli import cli
from imgscale.storage import Ledger, create_store, open_store


@pytest.fixture
def folder(tmp_path, digits_splits):
    """A spec folder holding train.npz/test.npz and a small store with splits train and test."""
    for split in ("train", "test"):
        shutil.copy(digits_splits[split], tmp_path / f"{split}.npz")
    store = create_store(tmp_path / "small.zarr", 4, rows_per_chunk=16)
    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        X = rng.standard_normal((20, 4)).astype(np.float32)
        store.append(split, X, rng.integers(0, 3, 20), split=split)
    return tmp_path


def _check(folder, text: str):
    """`imgscale run --dry-run` of a spec with ``text``; returns (result, stderr problem lines)."""
    spec = folder / "job.toml"
    spec.write_text(text)
    result = CliRunner().invoke(cli, ["run", str(spec), "--dry-run"])
    return result, [line for line in result.stderr.splitlines() if line.startswith("imgscale: ")]


TRAIN = 'kind = "train"\nstore = "small.zarr"\nmodel = "m.model"\n'
EVALUATE = 'kind = "evaluate"\nmodel = "m.model"\nstore = "small.zarr"\n'

INVALID = {
    "unknown key": (TRAIN + 'metod = "ncm"', "unknown key 'metod' (did you mean 'method'?)"),
    "wrong type": (TRAIN + 'rho = "0.5"', "key 'rho' is '0.5'; expected a number"),
    "boolean for an integer": (TRAIN + "metric_dim = true", "expected an integer"),
    "choice": (TRAIN + 'method = "svm"', "key 'method' is 'svm'; expected one of ridge, ncm"),
    "missing required key": ('kind = "train"\nstore = "small.zarr"', "missing key 'model'"),
    "unknown kind": ('kind = "frobnicate"', "kind 'frobnicate'; expected one of ingest"),
    "missing store": (
        'kind = "train"\nstore = "nope.zarr"\nmodel = "m.model"',
        "key 'store': store {folder}/nope.zarr: does not exist",
    ),
    "missing model": (EVALUATE, "key 'model': model {folder}/m.model does not exist"),
    "missing file": (
        'kind = "ingest"\nsrc = "nope.npz"\nstore = "new.zarr"',
        "key 'src': {folder}/nope.npz does not exist",
    ),
    "split the store lacks": (
        TRAIN + 'split = "holdout"',
        "store {folder}/small.zarr has no split",
    ),
    "validation split the store lacks": (TRAIN + 'val_split = "val"', "has no split 'val'"),
    "model that exists": (
        'kind = "train"\nstore = "small.zarr"\nmodel = "small.zarr"',
        "key 'model': {folder}/small.zarr already exists",
    ),
    "secret": (
        TRAIN + 'aws_secret_access_key = "abc"',
        "key 'aws_secret_access_key' holds a secret; secrets go in the environment",
    ),
    "secret in a table": (
        "[[jobs]]\n" + TRAIN + '[jobs.storage_options]\ntoken = "abc"',
        "key 'jobs[1].storage_options.token' holds a secret",
    ),
    "one option under two spellings": (
        TRAIN + 'val_split = "test"\n"val-split" = "test"',
        "key 'val-split' gives 'val_split' a second time",
    ),
    "not TOML": ("kind = train", "not valid TOML"),
    "no jobs": ('scheduler = "tcp://x:8786"', "expected a top-level 'kind' (one job) or [[jobs]]"),
}


@pytest.mark.parametrize("case", list(INVALID))
def test_an_invalid_spec_is_one_line_naming_file_and_key_and_runs_nothing(folder, case):
    text, expected = INVALID[case]
    before = {p.name for p in folder.iterdir()}
    result, problems = _check(folder, text)
    assert result.exit_code != 0
    assert len(problems) == 1, result.stderr
    assert problems[0].startswith(f"imgscale: error: {folder}/job.toml: ")
    assert expected.format(folder=folder) in problems[0]
    assert result.stdout == ""
    assert {p.name for p in folder.iterdir()} == before | {"job.toml"}


def test_every_problem_of_a_spec_is_reported_together(folder):
    text = f"""
[[jobs]]
{TRAIN}metod = "ncm"
rho = "big"

[[jobs]]
kind = "evaluate"
model = "other.model"
store = "small.zarr"
"""
    result, problems = _check(folder, text)
    assert result.exit_code != 0
    assert [line.split("job.toml: ", 1)[1] for line in problems] == [
        "job 1 (train): unknown key 'metod' (did you mean 'method'?)",
        "job 1 (train): key 'rho' is 'big'; expected a number",
    ]
    # The flow checks (the missing model of job 2) come once the keys are right.
    result, problems = _check(folder, text.replace('metod = "ncm"\nrho = "big"', ""))
    assert len(problems) == 1 and "job 2 (evaluate): key 'model'" in problems[0]
    assert result.stderr.splitlines()[-1].endswith("job.toml: 1 problem; nothing was run")


def test_later_jobs_may_use_what_earlier_jobs_make(folder):
    text = """
[[jobs]]
kind = "ingest"
src = "train.npz"
store = "new.zarr"
y_key = "y"

[[jobs]]
kind = "train"
store = "new.zarr"
model = "new.model"
method = "ncm"

[[jobs]]
kind = "evaluate"
model = "new.model"
store = "new.zarr"
split = "train"
"""
    result, problems = _check(folder, text)
    assert result.exit_code == 0, result.stderr
    assert problems == []
    # The store gets split "train" only: evaluating its "test" split is an error before any run.
    result, problems = _check(folder, text.replace('split = "train"', 'split = "test"'))
    assert len(problems) == 1 and "job 3 (evaluate): key 'split'" in problems[0]
    assert not (folder / "new.zarr").exists()


def test_paths_are_relative_to_the_spec_folder_and_dry_run_prints_the_commands(
    folder, tmp_path_factory, monkeypatch
):
    monkeypatch.chdir(tmp_path_factory.mktemp("elsewhere"))
    result, _ = _check(folder, TRAIN + 'method = "ncm"')
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"imgscale train {folder}/small.zarr {folder}/m.model --method ncm"
    ]
    assert not (folder / "m.model").exists()


def test_option_names_with_dashes_are_accepted(folder):
    result, _ = _check(folder, TRAIN + '"val-split" = "test"')
    assert result.exit_code == 0, result.stderr
    assert "--val-split test" in result.stdout


def test_a_spec_run_equals_the_same_cli_commands(tmp_path, digits_splits, scheduler_address):
    for split in ("train", "val", "test"):
        shutil.copy(digits_splits[split], tmp_path / f"{split}.npz")
    store, model, cluster = tmp_path / "cli.zarr", tmp_path / "cli.model", scheduler_address
    steps = [
        *(
            ["ingest", tmp_path / f"{s}.npz", store, "--y-key", "y", "--split", s, "--batch-id", s]
            for s in ("train", "val", "test")
        ),
        ["train", store, model, "--method", "ridge", "--scheduler", cluster],
        ["evaluate", model, store, "--json", "--scheduler", cluster],
    ]
    runner = CliRunner()
    for args in steps:
        result = runner.invoke(cli, [str(a) for a in args])
        assert result.exit_code == 0, result.output
    by_cli = json.loads(result.stdout)
    jobs = "".join(
        f'[[jobs]]\nkind = "ingest"\nsrc = "{s}.npz"\nstore = "spec.zarr"\ny_key = "y"\n'
        f'split = "{s}"\nbatch_id = "{s}"\n'
        for s in ("train", "val", "test")
    )
    jobs += '[[jobs]]\nkind = "train"\nstore = "spec.zarr"\nmodel = "spec.model"\n'
    jobs += '[[jobs]]\nkind = "evaluate"\nmodel = "spec.model"\nstore = "spec.zarr"\n'
    (tmp_path / "job.toml").write_text(jobs)
    ledger = tmp_path / "ledger"
    result = runner.invoke(
        cli, ["run", str(tmp_path / "job.toml"), "--scheduler", scheduler_address,
              "--ledger", str(ledger)]
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    records = Ledger(ledger).runs()
    assert [r["kind"] for r in records] == ["ingest"] * 3 + ["train", "evaluate"]
    assert {r["outcome"] for r in records} == {"ok"}
    assert {r["spec_file"] for r in records} == {str(tmp_path / "job.toml")}
    by_spec = records[-1]["figures"]
    assert by_spec == by_cli
    cli_model, _ = models.load(tmp_path / "cli.model")
    spec_model, _ = models.load(tmp_path / "spec.model")
    np.testing.assert_array_equal(spec_model.coef_, cli_model.coef_)


def test_a_job_that_fails_stops_the_spec_and_later_jobs_do_not_run(folder):
    np.save(folder / "narrow.npy", np.zeros((5, 3), np.float32))
    jobs = "".join(
        f'[[jobs]]\nkind = "ingest"\nsrc = "{src}"\nstore = "new.zarr"\nsplit = "{split}"\n'
        for src, split in (("train.npz", "train"), ("narrow.npy", "bad"), ("test.npz", "test"))
    )
    (folder / "job.toml").write_text(
        jobs.replace('src = "train.npz"', 'src = "train.npz"\ny_key = "y"')
    )
    ledger = folder / "ledger"
    result = CliRunner().invoke(cli, ["run", str(folder / "job.toml"), "--ledger", str(ledger)])
    assert result.exit_code != 0
    assert "job 2 (ingest) failed: " in result.stderr.splitlines()[-1]
    records = Ledger(ledger).runs()
    assert [(r["kind"], r["outcome"]) for r in records] == [("ingest", "ok"), ("ingest", "failed")]
    assert records[1]["error"] in result.stderr
    assert set(open_store(folder / "new.zarr").splits()) == {"train"}


def test_without_a_scheduler_each_job_chooses_its_cluster_as_typed_commands_do(folder):
    spec = folder / "job.toml"
    spec.write_text("[[jobs]]\n" + TRAIN + 'method = "ncm"\n[[jobs]]\n' + EVALUATE)
    result = CliRunner().invoke(cli, ["run", str(spec), "--ledger", str(folder / "l-ledger")])
    assert result.exit_code == 0, result.output
    # A 20-row store: both jobs run their tasks in this process, as `imgscale train` would,
    # rather than on a multi-process cluster with a dashboard started for the spec.
    clusters = [line for line in result.stderr.splitlines() if line.startswith("dask: ")]
    assert len(clusters) == 2
    assert all("LocalCluster in this process" in line for line in clusters), clusters
