"""`imgscale add-class`: a class mean added to a saved NCM model, nothing else changed (§4.4)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from click.testing import CliRunner

from imgscale.jobs import models
from imgscale.jobs.cli import cli
from imgscale.pipeline.classify import MetricNearestClassMean
from imgscale.pipeline.pq import PQCodec
from imgscale.storage import create_coded_store, create_store, open_store

NAMES = [f"c{i}" for i in range(6)]


def _rows(seed=0, n=600):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 6, n).astype(np.int32)
    X = (rng.normal(size=(n, 16)) + 3 * rng.normal(size=(6, 16))[y]).astype(np.float32)
    return X, y


@pytest.fixture
def raw_store(tmp_path):
    X, y = _rows()
    store = create_store(tmp_path / "raw.zarr", 16, class_names=NAMES, rows_per_chunk=128)
    store.append("all", X, y)
    return store


@pytest.fixture
def model_path(raw_store, tmp_path):
    """W learned on classes c0–c4 only; c5 is the class to add."""
    X, y = _rows()
    model = MetricNearestClassMean(n_components=4, max_iter=30, validate_every=10)
    model.fit(X[y < 5], y[y < 5])
    path = tmp_path / "ncm.zarr"
    models.save(model, path, store=str(raw_store.path))
    return path


def test_add_class_from_raw_rows_keeps_w_and_other_scores_bit_identical(raw_store, model_path):
    before, _ = models.load(model_path)
    X, y = _rows()
    result = CliRunner().invoke(
        cli, ["add-class", str(model_path), str(raw_store.path), "--label", "c5", "--json"]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["class_index"] == 5 and summary["rows"] == int((y == 5).sum())
    after, provenance = models.load(model_path)
    assert provenance["added_classes"] == ["c5"]
    np.testing.assert_array_equal(after.components_, before.components_)
    np.testing.assert_array_equal(after.decision_function(X)[:, :5], before.decision_function(X))
    np.testing.assert_allclose(after.means_[5], X[y == 5].mean(axis=0), rtol=1e-5)


def test_add_class_from_pq_codes_equals_the_mean_of_decoded_rows(model_path, tmp_path):
    X, y = _rows()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fewer than 39×256 training rows
        codec = PQCodec.train(X, 8, niter=5)
    store = create_coded_store(tmp_path / "pq.zarr", codec, class_names=NAMES, rows_per_chunk=128)
    store.append("all", codec.encode(X), y)
    out = tmp_path / "ncm-plus.zarr"
    result = CliRunner().invoke(
        cli, ["add-class", str(model_path), str(store.path), "--label", "c5", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    after, _ = models.load(out)
    decoded = codec.decode(codec.encode(X[y == 5]))
    np.testing.assert_allclose(after.means_[5], decoded.mean(axis=0), rtol=1e-4, atol=1e-5)
    assert models.load(model_path)[0].means_.shape[0] == 5  # the original is untouched


def test_unknown_label_fails_and_leaves_the_model_unchanged(raw_store, model_path):
    before = sorted(p.name for p in model_path.parent.iterdir())
    result = CliRunner().invoke(
        cli, ["add-class", str(model_path), str(raw_store.path), "--label", "nope"]
    )
    assert result.exit_code != 0
    assert sorted(p.name for p in model_path.parent.iterdir()) == before
    assert open_store(raw_store.path).committed_rows == 600


def test_replacing_a_class_the_model_lacks_fails_naming_it(raw_store, model_path):
    """c5 is among the store's classes but not the model's: --replace used to add it silently."""
    before = (model_path / "zarr.json").read_bytes()
    result = CliRunner().invoke(
        cli,
        ["add-class", str(model_path), str(raw_store.path), "--label", "c5", "--replace"],
    )
    assert result.exit_code == 1, result.output
    assert str(result.exception) == (
        f"model {model_path}: has no class 'c5' to replace; expected one of "
        "['c0', 'c1', 'c2', 'c3', 'c4'] (without --replace it is added)"
    )
    assert (model_path / "zarr.json").read_bytes() == before
    assert len(models.load(model_path)[0].classes_) == 5
