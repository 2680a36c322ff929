"""`remove-batch` of a middle batch, seen by the commands (issue 28, "Remove any batch"): training
and scoring on the store give what they give on a store built without the batch (the dense
reference), and a model trained before the removal says which of its batches are gone each time
it is evaluated, predicts or gets a class."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from imgscale.jobs.cli import cli


def _imgscale(*args) -> tuple[dict, str]:
    """The command's --json summary, and its stderr."""
    result = CliRunner().invoke(cli, [*map(str, args), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


@pytest.fixture(scope="module")
def parts(tmp_path_factory, digits_splits) -> dict[str, Path]:
    """Digits' train rows in three files (the middle one: the batch to remove), val and test."""
    root = tmp_path_factory.mktemp("parts")
    with np.load(digits_splits["train"]) as train:
        X, y = train["X"], train["y"]
    files = {}
    pieces = np.split(np.arange(len(y)), [400, 700])
    for name, rows in zip(("first", "middle", "last"), pieces, strict=True):
        files[name] = root / f"{name}.npz"
        np.savez(files[name], X=X[rows], y=y[rows])
    return {**files, "val": digits_splits["val"], "test": digits_splits["test"]}


def _build(path: Path, parts: dict[str, Path], batches: list[str]) -> Path:
    for name in batches:
        split = name if name in ("val", "test") else "train"
        _imgscale("ingest", parts[name], path, "--y-key", "y", "--split", split, "--batch-id", name)
    return path


@pytest.fixture(scope="module")
def stores(tmp_path_factory, parts) -> dict[str, Path]:
    """``removed``: every batch ingested, the middle one removed, with ``before``, a model
    trained before the removal; ``reference``: the same batches but the middle one."""
    root = tmp_path_factory.mktemp("stores")
    removed = _build(root / "removed.zarr", parts, ["first", "middle", "val", "last", "test"])
    _imgscale("train", removed, root / "before.model", "--method", "ncm")
    summary, _ = _imgscale("remove-batch", removed, "middle")
    assert summary == {"batch_id": "middle", "rows": 300}
    reference = _build(root / "reference.zarr", parts, ["first", "val", "last", "test"])
    return {"removed": removed, "reference": reference, "before": root / "before.model"}


@pytest.mark.parametrize("method", ["ncm", "ridge"])
def test_training_and_scoring_equal_a_store_built_without_the_batch(tmp_path, stores, method):
    results = {}
    for name in ("removed", "reference"):
        model = tmp_path / f"{name}.model"
        trained, _ = _imgscale("train", stores[name], model, "--method", method)
        evaluated, warned = _imgscale("evaluate", model, stores[name])
        assert "warning" not in warned  # trained after the removal: nothing changed since
        _imgscale("predict", model, stores[name], tmp_path / f"{name}.parquet")
        predictions = pq.read_table(tmp_path / f"{name}.parquet").to_pydict()
        results[name] = (trained["rows"], trained["rho"], evaluated, predictions)
    assert results["removed"] == results["reference"]
    assert results["removed"][0] == 778  # 1078 train rows less the middle batch's 300


def test_a_model_trained_before_the_removal_names_the_removed_batch(tmp_path, stores):
    warning = (
        f"imgscale: warning: model {stores['before']} was trained when store {stores['removed']} "
        "held batches it no longer holds as they were (removed since: 'middle'); train it again "
        "to learn from the store as it is"
    )
    _, warned = _imgscale("evaluate", stores["before"], stores["removed"])
    assert warning in warned.splitlines()
    _, warned = _imgscale("predict", stores["before"], stores["removed"], tmp_path / "p.parquet")
    assert warning in warned.splitlines()
    summary, warned = _imgscale(
        "add-class", stores["before"], stores["removed"], "--label", "3", "--replace",
        "--out", tmp_path / "replaced.model",
    )  # fmt: skip
    assert warning in warned.splitlines()
    assert summary["store_changes"] == warning.removeprefix("imgscale: warning: ")
    # Another store, even with the same batches, is not the store the model was trained on.
    _, warned = _imgscale("evaluate", stores["before"], stores["reference"])
    assert "warning" not in warned


def test_a_batch_ingested_again_with_other_rows_is_named(tmp_path, parts):
    store = _build(tmp_path / "s.zarr", parts, ["first", "val", "test"])
    model = tmp_path / "m.model"
    _imgscale("train", store, model, "--method", "ncm")
    _imgscale("remove-batch", store, "first")
    # The same batch id (so the same row ids) with other rows: the middle file's.
    _imgscale("ingest", parts["middle"], store, "--y-key", "y", "--batch-id", "first")
    _, warned = _imgscale("evaluate", model, store)
    assert "(ingested again with other rows since: 'first')" in warned
