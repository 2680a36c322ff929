"""`imgscale train --embedding`: fitted on the train split, saved without pickle, applied on the fly
by `evaluate` and `predict`."""

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
from imgscale.jobs.models import ClassifierPipeline
from imgscale.pipeline.embed import RandomFourierFeatures
from imgscale.storage import open_store

IMGSCALE = str(Path(sys.executable).with_name("imgscale"))


@pytest.fixture(scope="module")
def digits_store(tmp_path_factory, digits_splits) -> Path:
    store = tmp_path_factory.mktemp("embed-cli") / "digits.zarr"
    for split in ("train", "val", "test"):
        args = ["ingest", str(digits_splits[split]), str(store), "--y-key", "y", "--split", split]
        assert CliRunner().invoke(cli, args).exit_code == 0
    return store


def run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([IMGSCALE, *map(str, args)], capture_output=True, text=True, timeout=300)


def test_train_with_rff_embedding_saves_a_pipeline_that_evaluate_and_predict_apply(
    tmp_path, digits_store
):
    model = tmp_path / "rff.model"
    trained = run(
        "train", digits_store, model, "--embedding", "rff", "--n-components", "300", "--method",
        "ridge",
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr
    assert "rff embedding to 300 dims" in trained.stderr

    loaded, _ = models.load(model)
    assert isinstance(loaded, ClassifierPipeline)
    rff = loaded.steps[0][1]
    assert isinstance(rff, RandomFourierFeatures) and rff.random_weights_.shape == (64, 300)
    assert loaded.steps[1][1].rho_selection_ == "validation"

    evaluated = run("evaluate", model, digits_store, "--json")
    assert evaluated.returncode == 0, evaluated.stderr
    assert json.loads(evaluated.stdout)["per_class_rate"] > 0.9

    out = tmp_path / "predictions.parquet"
    predicted = run("predict", model, digits_store, out, "--split", "test")
    assert predicted.returncode == 0, predicted.stderr
    store = open_store(digits_store)
    X_test = store.features("test").compute()
    expected = loaded.predict(X_test)
    assert pq.read_table(out).column("label").to_pylist() == expected.tolist()
    assert (expected == store.labels("test")).mean() > 0.9


def test_an_option_that_does_not_apply_to_the_embedding_is_refused(tmp_path, digits_store):
    result = run("train", digits_store, tmp_path / "m", "--embedding", "sqrt", "--gamma", "1")
    assert result.returncode != 0
    assert "--gamma does not apply" in result.stderr
    assert not (tmp_path / "m").exists()


def test_embedded_pipeline_round_trips_through_save_and_load(tmp_path, digits_store):
    from imgscale.jobs.train import make_embedding, train

    store = open_store(digits_store)
    fitted = train(store, "ridge", embedding=make_embedding("addkpca", n_components=40))
    models.save(fitted, tmp_path / "m")
    loaded, _ = models.load(tmp_path / "m")
    X = store.features("test")
    np.testing.assert_array_equal(
        loaded.predict_top_k(X, k=3).compute(), fitted.predict_top_k(X, k=3).compute()
    )
