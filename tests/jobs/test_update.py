"""`imgscale update` (issue 45): after a sequence of adds, middle-batch removals, forgets and
re-ingests, the updated model equals a model trained from scratch on the store as it now is
(predictions identical, decision values within float32 rounding), for NCM and ridge on raw and
PQ stores; it reads only the changed rows; models that cannot follow their store are refused by
name."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from imgscale.jobs import models
from imgscale.jobs.cli import cli
from imgscale.storage import create_pq_store, create_store

DIM, CHUNK, CLASSES = 8, 16, ["p", "q", "r", "s"]


def _imgscale(*args) -> dict:
    result = CliRunner().invoke(cli, [*map(str, args), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout.strip().splitlines()[-1])


def _refused(*args) -> str:
    result = CliRunner().invoke(cli, list(map(str, args)))
    assert result.exit_code != 0
    return result.stderr.strip()


def _rows(n: int, seed: int, labels: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """``n`` rows around one centre per class (some unlabelled: -1), seeded."""
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(99).normal(scale=2.0, size=(len(CLASSES), DIM))
    y = rng.choice(labels, n)
    X = centres[np.maximum(y, 0)] + rng.normal(size=(n, DIM))
    return X.astype(np.float32), y.astype(np.int32)


class Store:
    """A store of raw rows or of PQ codes, written batch by batch."""

    def __init__(self, path: Path, codec=None):
        if codec is None:
            self.store = create_store(path, DIM, class_names=CLASSES, rows_per_chunk=CHUNK)
        else:
            self.store = create_pq_store(path, codec, class_names=CLASSES, rows_per_chunk=CHUNK)
        self.codec = codec

    def append(self, batch: str, n: int, seed: int, labels: list[int], split="train") -> None:
        X, y = _rows(n, seed, labels)
        rows = X if self.codec is None else self.codec.encode(X)
        ids = [f"{batch}-{seed}:{i}" for i in range(n)]
        self.store.append(batch, rows, y, ids=ids, split=split)


def _codec():
    from imgscale.pipeline.pq_codec import PQCodec

    X, _ = _rows(800, 1000, [0, 1, 2, 3])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # few training rows: the codebook's quality is not tested
        return PQCodec.train(X, 4, seed=0, niter=4)


def _decisions(model_path: Path, store) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    model, _ = models.load(model_path)
    X = store.features("test").compute()
    return np.asarray(model.classes_), model.predict(X), model.decision_function(X)


def _assert_equal_to_fresh_train(model_path: Path, store, tmp_path: Path, method: str) -> None:
    """The updated model against `train` from scratch on the store as it now is."""
    fresh = tmp_path / f"fresh-{np.random.default_rng().integers(1 << 30)}.model"
    _imgscale("train", store.path, fresh, "--method", method)
    (classes, predicted, scores), (classes0, predicted0, scores0) = (
        _decisions(model_path, store),
        _decisions(fresh, store),
    )
    np.testing.assert_array_equal(classes, classes0)
    np.testing.assert_array_equal(predicted, predicted0)
    scale = np.abs(scores0).max()
    np.testing.assert_allclose(scores, scores0, rtol=0, atol=4 * np.finfo(np.float32).eps * scale)
    updated, provenance = models.load(model_path)
    trained, provenance0 = models.load(fresh)
    for key in ("rows", "store_batches", "class_names", "committed_rows"):
        assert provenance[key] == provenance0[key], key
    if method == "ridge":
        assert updated.rho_ == trained.rho_ and updated.rho_selection_ == "validation"
        np.testing.assert_allclose(updated.mean_, trained.mean_, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("coded", [False, True], ids=["raw", "pq"])
@pytest.mark.parametrize("method", ["ncm", "ridge"])
def test_an_updated_model_equals_a_model_trained_from_scratch(tmp_path, method, coded):
    s = Store(tmp_path / "s.zarr", _codec() if coded else None)
    s.append("a", 40, 0, [-1, 0, 1])
    s.append("b", 30, 1, [0, 1, 2])
    s.append("val", 60, 2, [0, 1, 2], split="val")
    s.append("c", 25, 3, [1, 2, -1])
    s.append("test", 50, 4, [0, 1, 2, 3], split="test")
    store = s.store
    model = tmp_path / "m.model"
    _imgscale("train", store.path, model, "--method", method)

    # 1. Rows added (a class never seen: "s"), a middle batch removed, rows forgotten.
    s.append("d", 35, 5, [0, 3, -1])
    s.append("val-s", 15, 7, [3], split="val")
    store.remove_batch("b")
    ids = store.ids("train")
    store.forget([ids[0], ids[7], ids[-1]], reason="mislabelled")
    summary = _imgscale("update", model, store.path)
    assert summary["batches_added"] == ["d", "val-s"] and summary["batches_removed"] == ["b"]
    assert summary["rows_added"] == 35 - 1 and summary["rows_removed"] == 30 + 2
    assert summary["forgotten_rows"] == 2  # of "a"; the row of "d" was never in the model
    assert summary["classes_added"] == ["s"] and summary["classes_removed"] == []
    _assert_equal_to_fresh_train(model, store, tmp_path, method)

    # 2. A batch ingested again with other rows; rows forgotten from a batch added since.
    store.remove_batch("c")
    s.append("c", 20, 6, [1, 2])
    store.forget([store.ids("train")[-2]])
    summary = _imgscale("update", model, store.path, "--out", tmp_path / "m2.model")
    assert summary["batches_added"] == ["c"] and summary["batches_removed"] == ["c"]
    assert summary["rows_added"] == 19 and summary["rows_removed"] == 25
    _assert_equal_to_fresh_train(tmp_path / "m2.model", store, tmp_path, method)

    # 3. Every row of a class removed: the class leaves the model, and is said.
    store.forget(_ids_of(store, 3))
    store.remove_batch("val-s")  # ridge validates on classes it has: as `train` does
    summary = _imgscale("update", tmp_path / "m2.model", store.path)
    assert summary["classes_removed"] == ["s"]
    _assert_equal_to_fresh_train(tmp_path / "m2.model", store, tmp_path, method)


def _ids_of(store, label: int) -> list[str]:
    return store.ids("train")[store.labels("train") == label].tolist()
