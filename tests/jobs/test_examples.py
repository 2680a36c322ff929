"""Every spec in examples/ runs as a user would run it, in the order they build on each other."""

from __future__ import annotations

import re
import shutil
import tomllib
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from sklearn.datasets import load_digits

from imgscale.jobs import models
from imgscale.jobs.cli import cli
from imgscale.storage import Ledger, open_store

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# Each spec uses what the ones before it made.
ORDER = ["ingest", "compress", "train", "evaluate", "predict", "embed", "add-class"]


def test_every_example_is_run_by_this_module():
    # images.toml runs under `imgscale schedule` in test_schedule_images.py, on images it makes.
    assert sorted(p.stem for p in EXAMPLES.glob("*.toml")) == sorted([*ORDER, "images"])


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """The examples beside the files the README's tour makes, made as it makes them: digits
    without the nines as train/val/test .npz, and the nines apart, labelled by name."""
    folder = tmp_path_factory.mktemp("examples")
    for spec in EXAMPLES.glob("*.toml"):
        shutil.copy(spec, folder)
    digits = load_digits()
    X, y = digits.data.astype(np.float32), digits.target
    nine = y == 9
    X9, X, y = X[nine], X[~nine], y[~nine]
    np.savez(folder / "train.npz", X=X[:1000], y=y[:1000])
    np.savez(folder / "val.npz", X=X[1000:1300], y=y[1000:1300])
    np.savez(folder / "test.npz", X=X[1300:], y=y[1300:])
    np.savez(folder / "nines.npz", X=X9[:120], y=np.array(["9"] * 120))
    return folder


@pytest.mark.slow
def test_the_examples_run_in_order_and_make_what_they_describe(folder, scheduler_address):
    ledger = folder / "ledger"
    for name in ORDER:
        result = CliRunner().invoke(
            cli,
            ["run", str(folder / f"{name}.toml"), "--scheduler", scheduler_address,
             "--ledger", str(ledger)],
        )  # fmt: skip
        assert result.exit_code == 0, f"{name}.toml: {result.output}"
    records = Ledger(ledger).runs()
    assert {r["outcome"] for r in records} == {"ok"}
    assert [r["kind"] for r in records] == [
        *["ingest"] * 3, "compress", *["train"] * 3, "evaluate", "predict", "embed", "ingest",
        "add-class",
    ]  # fmt: skip
    assert open_store(folder / "digits.zarr").committed_rows == 1617
    assert open_store(folder / "digits-pq.zarr").committed_rows == 1617
    (evaluated,) = [r for r in records if r["kind"] == "evaluate"]
    assert evaluated["figures"]["rows"] == 317 and evaluated["figures"]["top1_error"] < 0.25
    assert pq.read_table(folder / "predictions.parquet").num_rows == 317
    assert open_store(folder / "digits-ale.zarr").committed_rows == 1617
    extended, provenance = models.load(folder / "ncm-10.model")
    assert len(extended.classes_) == 10
    assert provenance["class_names"][-1] == "9"


def test_the_examples_read_only_files_the_readme_tour_makes():
    tour = (EXAMPLES.parent / "README.md").read_text()
    made = set(re.findall(r"np\.savez\('([^']+)'", tour))
    assert {"train.npz", "nines.npz"} <= made
    for spec in EXAMPLES.glob("*.toml"):
        if spec.stem == "images":  # makes its own images under `imgscale schedule`
            continue
        for job in tomllib.loads(spec.read_text()).get("jobs", []):
            if job["kind"] == "ingest":
                assert job["src"] in made, f"{spec.name}: {job['src']} is not made by the tour"
