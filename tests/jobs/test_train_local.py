"""`imgscale train --method local` (paper 004): binary and multi-class stores train on the test
cluster, save without pickle, and evaluate and predict what the estimator fitted in-process
predicts."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from imgscale.jobs import models
from imgscale.jobs.cli import cli
from imgscale.pipeline.classify import PredictedNeighbourhoodClassifier
from imgscale.storage import create_store

DIM = 6


def _rows(n_classes: int, seed: int, n: int):
    """Each class is two blobs (multi-modal), as in the paper's tasks."""
    centres = 3 * np.random.default_rng(0).normal(size=(2 * n_classes, DIM))
    rng = np.random.default_rng(seed)
    mode = rng.integers(0, 2 * n_classes, n)
    return (rng.normal(size=(n, DIM)) + centres[mode]).astype(np.float32), mode % n_classes


def _invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.mark.slow
@pytest.mark.parametrize("n_classes", [2, 3])
def test_local_trains_on_the_cluster_and_predicts_as_in_process(
    tmp_path, scheduler_address, n_classes
):
    names = [f"c{i}" for i in range(n_classes)]
    splits = {"train": _rows(n_classes, 1, 300), "test": _rows(n_classes, 2, 60)}
    store = create_store(tmp_path / "s.zarr", DIM, class_names=names, rows_per_chunk=128)
    for split, (X, y) in splits.items():
        store.append(split, X, y, split=split)
    path = tmp_path / "local.model"
    result = _invoke(
        "train", store.path, path, "--method", "local", "--neighbourhoods", 60,
        "--sizes", "12,24", "--samples", 3, "--scheduler", scheduler_address,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    model = models.load(path)[0]
    assert isinstance(model, PredictedNeighbourhoodClassifier)
    X, y = splits["train"]
    alone = PredictedNeighbourhoodClassifier(
        n_neighbourhoods=60, sizes=(12, 24), n_samples=3, compression=0.15, random_state=0
    ).fit(X, y)
    np.testing.assert_array_equal(model.neighbourhood_members_, alone.neighbourhood_members_)
    Xt, yt = splits["test"]
    expected = alone.predict(Xt)
    out = tmp_path / "predictions.parquet"
    result = _invoke(
        "predict", path, store.path, out, "--split", "test", "--top-k", 1,
        "--scheduler", scheduler_address,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    predicted = pq.read_table(out).column("label").to_pylist()
    assert predicted == [names[c] for c in expected]
    result = _invoke("evaluate", path, store.path, "--split", "test", "--json",
                     "--scheduler", scheduler_address)  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["top1_error"] == pytest.approx(np.mean(expected != yt))


def test_local_sizes_that_are_not_integers_are_one_line_errors(tmp_path, scheduler_address):
    X, y = _rows(2, 1, 100)
    store = create_store(tmp_path / "s.zarr", DIM, class_names=["a", "b"], rows_per_chunk=128)
    store.append("train", X, y, split="train")
    result = _invoke(
        "train", store.path, tmp_path / "m.model", "--method", "local", "--sizes", "10,x",
        "--scheduler", scheduler_address,
    )  # fmt: skip
    assert result.exit_code != 0
    assert "--sizes '10,x': expected integers" in str(result.exception)
    assert not (tmp_path / "m.model").exists()


def _compressed(compression: float, n: int = 300) -> PredictedNeighbourhoodClassifier:
    X, y = _rows(2, 1, n)
    return PredictedNeighbourhoodClassifier(
        n_neighbourhoods=40, sizes=(12, 24), n_samples=2, compression=compression, random_state=0
    ).fit(X, y)


def _bytes_on_disk(path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def test_a_compressed_model_saves_the_seed_of_its_signs_and_predicts_the_same_loaded(tmp_path):
    """The D × M signs are drawn again from their seed on load: the file grows with D by the
    regression's (d + 1) × D float32 numbers, not by the D × M signs (M × D / 8 bytes at least,
    one random bit each, however the store compresses them)."""
    n = 1_200
    Xt, _ = _rows(2, 2, 60)
    sizes = {}
    for compression in (0.2, 0.8):
        model = _compressed(compression, n)
        path = tmp_path / f"{compression}.model"
        models.save(model, path)
        sizes[compression] = _bytes_on_disk(path)
        loaded = models.load(path)[0]
        assert "sensing_signs_" not in vars(loaded)
        np.testing.assert_array_equal(loaded.sensing_matrix(), model.sensing_matrix())
        np.testing.assert_array_equal(loaded.predict_proba(Xt), model.predict_proba(Xt))
    added = round(0.8 * n) - round(0.2 * n)
    assert sizes[0.8] - sizes[0.2] < 2 * (DIM + 1) * 4 * added < n * added / 8


def test_a_model_saved_with_its_signs_loads_and_scores_with_them(tmp_path):
    """A model saved before the seed kept its signs (``sensing_signs_``): they, not a seed's,
    score its queries after loading."""
    model = _compressed(0.3)
    signs = -model.sensing_matrix()
    del model.sensing_seed_
    model.sensing_signs_ = signs
    Xt, _ = _rows(2, 2, 60)
    before = model.predict_proba(Xt)
    models.save(model, tmp_path / "old.model")
    loaded = models.load(tmp_path / "old.model")[0]
    np.testing.assert_array_equal(loaded.sensing_matrix(), signs)
    np.testing.assert_array_equal(loaded.predict_proba(Xt), before)
    assert not np.array_equal(before, _compressed(0.3).predict_proba(Xt))
