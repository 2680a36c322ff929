"""The use cases the commands call are functions of `jobs` that do the whole job from paths and
save their own outputs: called from Python on a real cluster, they give what dense numpy gives."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from imgscale.jobs.evaluate import evaluate_saved_model
from imgscale.jobs.ingest import ingest_file
from imgscale.jobs.models import load
from imgscale.jobs.predict import predict_saved_model
from imgscale.jobs.train import train_and_save
from imgscale.storage import create_store, open_store


def dense_ncm(digits_splits) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each test row's label, NCM's label for it (nearest train class mean, numpy) and the
    train rows' count."""
    train, test = np.load(digits_splits["train"]), np.load(digits_splits["test"])
    X, y = train["X"].astype(np.float64), train["y"]
    means = np.stack([X[y == c].mean(axis=0) for c in range(10)])
    distances = ((test["X"][:, None, :] - means[None]) ** 2).sum(axis=2)
    return test["y"], distances.argmin(axis=1), len(y)


@pytest.fixture(scope="module")
def ncm_model(tmp_path_factory, digits_store, scheduler_address):
    path = tmp_path_factory.mktemp("use-cases") / "ncm.model"
    said = []
    fitted, summary = train_and_save(
        str(digits_store.path), path, "ncm", options={}, scheduler=scheduler_address,
        quiet=True, say=said.append,
    )  # fmt: skip
    return path, fitted, summary, said


def test_train_saves_the_model_with_its_record_of_the_store(ncm_model, digits_splits):
    path, fitted, summary, said = ncm_model
    _, _, train_rows = dense_ncm(digits_splits)
    assert summary["model"] == str(path) and summary["method"] == "ncm"
    assert summary["rows"] == train_rows and summary["rho"] is None
    assert said == []  # the store has a split 'val'
    loaded, provenance = load(path)
    np.testing.assert_array_equal(loaded.means_, fitted.means_)
    assert provenance["split"] == "train" and provenance["rows"] == train_rows
    assert [batch for batch, *_ in provenance["store_batches"]] == ["train", "val", "test"]
    assert provenance["class_names"] == [str(d) for d in range(10)]


def test_evaluate_and_predict_a_saved_model_as_dense_numpy_does(
    ncm_model, digits_store, digits_splits, scheduler_address, tmp_path
):
    path = str(ncm_model[0])
    truth, predicted, _ = dense_ncm(digits_splits)
    warned = []
    result = evaluate_saved_model(
        path, str(digits_store.path), "test", scheduler=scheduler_address, quiet=True,
        warn=warned.append,
    )  # fmt: skip
    assert result["rows"] == len(truth)
    assert result["top1_error"] == pytest.approx(np.mean(predicted != truth))
    out = tmp_path / "predictions.parquet"
    summary = predict_saved_model(
        path, str(digits_store.path), str(out), split="test", scheduler=scheduler_address,
        quiet=True, warn=warned.append,
    )  # fmt: skip
    assert summary == {"rows": len(truth), "first_row": 0, "out": str(out)}
    table = pq.read_table(out)
    np.testing.assert_array_equal(table.column("label").to_numpy(), predicted)
    np.testing.assert_array_equal(table.column("true_label").to_numpy(), truth)
    assert warned == []  # the store holds every batch the model learned from


def test_what_a_use_case_has_to_say_reaches_its_caller(tmp_path, digits_splits, scheduler_address):
    store = tmp_path / "digits.zarr"
    create_store(store, 64, class_names=[str(d) for d in range(10)], rows_per_chunk=256)
    for split, file in digits_splits.items():
        ingest_file(file, store, x_key="X", y_key="y", split=split, batch_id=split)
    model = tmp_path / "ncm.model"
    train_and_save(str(store), model, "ncm", options={}, scheduler=scheduler_address, quiet=True)
    open_store(store).remove_batch("val")
    warned, said = [], []
    evaluate_saved_model(
        str(model), str(store), "test", scheduler=scheduler_address, quiet=True,
        warn=warned.append,
    )  # fmt: skip
    assert len(warned) == 1 and "(removed since: 'val')" in warned[0]
    train_and_save(
        str(store), tmp_path / "ridge.model", "ridge", options={}, scheduler=scheduler_address,
        quiet=True, say=said.append,
    )  # fmt: skip
    assert said == [f"{store}: no split 'val'; ridge validates without it"]
