"""ingest → train → evaluate → predict through the installed CLI on a real multi-process cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from imgscale.pipeline.classify import NearestClassMean, RidgeClassifier
from imgscale.pipeline.metrics import per_class_rate, top_k_error

IMGSCALE = str(Path(sys.executable).with_name("imgscale"))


def imgscale(*args, env: dict | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [IMGSCALE, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )
    assert result.returncode == 0, result.stderr
    return result


def load_split(paths: dict, split: str) -> tuple[np.ndarray, np.ndarray]:
    with np.load(paths[split]) as data:
        return data["X"], data["y"]


@pytest.fixture(scope="module")
def digits_store(tmp_path_factory, digits_splits) -> Path:
    store = tmp_path_factory.mktemp("e2e") / "digits.zarr"
    for split, path in digits_splits.items():
        imgscale("ingest", path, store, "--y-key", "y", "--split", split)
    return store


@pytest.mark.slow
def test_ridge_through_cli_on_cluster_equals_in_process_fit(
    tmp_path, digits_store, digits_splits, scheduler_address
):
    model = tmp_path / "ridge.model"
    imgscale("train", digits_store, model, "--method", "ridge", "--scheduler", scheduler_address)
    result = json.loads(
        imgscale("evaluate", model, digits_store, "--json", "--scheduler", scheduler_address).stdout
    )

    (X, y), (X_val, y_val), (X_test, y_test) = (
        load_split(digits_splits, s) for s in ("train", "val", "test")
    )
    reference = RidgeClassifier().fit(X, y, X_val=X_val, y_val=y_val)
    top5 = reference.predict_top_k(X_test, k=5)
    assert result["rows"] == len(y_test)
    assert result["per_class_rate"] == pytest.approx(per_class_rate(y_test, top5[:, 0]), abs=1e-9)
    assert result["top1_error"] == pytest.approx(top_k_error(y_test, top5, 1), abs=1e-9)
    assert result["top5_error"] == pytest.approx(top_k_error(y_test, top5, 5), abs=1e-9)
    assert result["per_class_rate"] > 0.9  # linear ridge on raw digits pixels


@pytest.mark.slow
def test_ncm_uses_scheduler_from_environment_and_predict_writes_every_row(
    tmp_path, digits_store, digits_splits, scheduler_address
):
    env = {"DASK_SCHEDULER_ADDRESS": scheduler_address}
    model, out = tmp_path / "ncm.model", tmp_path / "predictions.parquet"
    train = imgscale("train", digits_store, model, "--method", "ncm", env=env)
    assert scheduler_address.split("://")[1] in train.stderr  # connected, no LocalCluster
    imgscale("predict", model, digits_store, out, "--split", "test", env=env)

    X, y = load_split(digits_splits, "train")
    X_test, _ = load_split(digits_splits, "test")
    expected = NearestClassMean().fit(X, y).predict(X_test)
    table = pq.read_table(out)
    assert table.num_rows == len(X_test)
    assert table.column("label").to_pylist() == expected.tolist()
    assert len(set(table.column("id").to_pylist())) == len(X_test)
