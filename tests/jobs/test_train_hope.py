"""`imgscale train --method hope`: trains on a store through the CLI, saves without pickle,
reloads to the same embedding and predictions, and refuses bad exemplar counts and unlabelled
stores with a one-line error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from imgscale.jobs import models
from imgscale.jobs.cli import cli
from imgscale.pipeline.classify import ExemplarHOPE
from imgscale.storage import create_store

IMGSCALE = str(Path(sys.executable).with_name("imgscale"))
SMALL = ["--factors", 40, "--hidden-units", 20, "--max-iter", 20]


def _invoke(*args) -> str:
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_train_evaluate_predict_through_the_cli(digits_store, tmp_path, scheduler_address):
    model = tmp_path / "hope.model"
    _invoke(
        "train", digits_store.path, model, "--method", "hope", "--exemplars", 10,
        "--exemplar-init", "random", "--n-components", 3, *SMALL, "--scheduler", scheduler_address,
    )  # fmt: skip
    fitted, provenance = models.load(model)
    assert isinstance(fitted, ExemplarHOPE) and provenance["split"] == "train"
    assert fitted.embedded_exemplars_.shape == (10, 3)
    # random exemplars are training rows of their class, one per class
    X_train, y_train = digits_store.features("train").compute(), digits_store.labels("train")
    for exemplar, label in zip(fitted.exemplars_, fitted.exemplar_labels_, strict=True):
        assert (np.abs(X_train[y_train == label] - exemplar).max(axis=1) < 1e-6).any()
    report = json.loads(
        _invoke("evaluate", model, digits_store.path, "--json", "--scheduler", scheduler_address)
    )
    X_test, y_test = digits_store.features("test").compute(), digits_store.labels("test")
    assert report["top1_error"] == pytest.approx(np.mean(fitted.predict(X_test) != y_test))
    _invoke("predict", model, digits_store.path, tmp_path / "p.parquet", "--split", "test",
            "--scheduler", scheduler_address)  # fmt: skip
    table = pq.read_table(tmp_path / "p.parquet")
    np.testing.assert_array_equal(table.column("label").to_numpy(), fitted.predict(X_test))


def test_saved_model_reloads_to_the_same_embedding_and_predictions(digits_store, tmp_path):
    X, y = digits_store.features("train").compute(), digits_store.labels("train")
    params = {"n_factors": 40, "n_hidden": 20, "max_iter": 30, "random_state": 0}
    model = ExemplarHOPE(**params, exemplar_init="learned").fit(X, y)
    models.save(model, tmp_path / "m.model")
    loaded, _ = models.load(tmp_path / "m.model")
    assert loaded.get_params() == model.get_params()
    X_test = digits_store.features("test").compute()
    np.testing.assert_array_equal(loaded.transform(X_test), model.transform(X_test))
    np.testing.assert_array_equal(loaded.predict_top_k(X_test, 3), model.predict_top_k(X_test, 3))
    assert loaded.validation_error_ == model.validation_error_


def _error_line(*args) -> str:
    result = subprocess.run(
        [IMGSCALE, *map(str, args)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode != 0 and "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("imgscale:")]
    assert len(errors) == 1, result.stderr
    return errors[0]


def test_bad_exemplar_counts_are_one_line_errors(digits_store, tmp_path, scheduler_address):
    common = ["--method", "hope", *SMALL, "--scheduler", scheduler_address]
    out = tmp_path / "bad.model"
    line = _error_line("train", digits_store.path, out, "--exemplars", 0, *common)
    assert line.endswith("need at least one exemplar for each of the 10 classes")
    line = _error_line("train", digits_store.path, out, "--exemplars", 100_000, *common)
    assert "labelled rows" in line and "exemplars but it has only" in line
    assert not out.exists()


def test_a_store_without_labels_is_a_one_line_error(tmp_path, scheduler_address):
    store = create_store(tmp_path / "unlabelled.zarr", 4, class_names=["a", "b"])
    store.append("b1", np.ones((30, 4), np.float32), np.full(30, -1), split="train")
    line = _error_line(
        "train", store.path, tmp_path / "m.model", "--method", "hope", *SMALL,
        "--scheduler", scheduler_address,
    )  # fmt: skip
    assert str(store.path) in line and "0 labelled classes" in line
    assert not (tmp_path / "m.model").exists()
