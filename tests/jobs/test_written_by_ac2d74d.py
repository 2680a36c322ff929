"""Stores, vocabularies, models and a run ledger written by imgscale at ac2d74d open and answer
as they did then, so that moving the code that reads them strands nothing users already have.

``tests/fixtures/written-ac2d74d`` was written by that commit's command line, once:

- ``raw-store``: 420 of sklearn's digits without the nines (a seeded permutation), three ingests
  of 240 ``train``, 90 ``val`` and 90 ``test`` rows; ``pq-store``: ``compress --m 8`` of it;
- ``images-store``: 60 of the digits drawn as 32×32 JPEGs in class folders, ``--features
  gist-tiny,color`` (48 ``train``, 12 ``test``); ``bow.vocab`` (16 words) and ``fisher.vocab``
  (4 Gaussians, 8 components) fitted on those 48 photos;
- ``models/``: one model per method family, trained on ``raw-store`` (ridge, ridge on RFF, NCM,
  learned-metric NCM, metric kNN, en-HOPE, SSL on ALE, local learners), NCM on ``pq-store`` and
  NCM on ``images-store``;
- ``ledger/``: the folder ledger those 18 commands wrote, and a 19th, an ingest of a missing file.

The stores were written as ``raw.zarr``, ``pq.zarr`` and ``images.zarr`` (the names the ledger's
commands give) and renamed, since git ignores ``*.zarr``; a store does not know its own name.

``expected.npz`` holds what that commit's code read back: the stores' rows and codes, each
model's scores and labels for the ``test`` rows, and the descriptors of scikit-learn's sample
photo ``china.jpg`` through both vocabularies and the image store's recorded descriptors.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from sklearn.datasets import load_digits, load_sample_image

from imgscale.jobs import models
from imgscale.jobs.features import Features, features_of_store, parse_features
from imgscale.storage import Ledger, open_store

WRITTEN = Path(__file__).parents[1] / "fixtures" / "written-ac2d74d"
MODELS = sorted(path.name.removesuffix(".model") for path in (WRITTEN / "models").iterdir())
SYNC = {"scheduler": "synchronous"}


@pytest.fixture(scope="module")
def expected() -> dict[str, np.ndarray]:
    return dict(np.load(WRITTEN / "expected.npz"))


@pytest.fixture
def copy(tmp_path):
    """A store copied out of the fixtures (opening a store may take its lock)."""

    def copied(name: str):
        shutil.copytree(WRITTEN / name, tmp_path / name)
        return open_store(tmp_path / name)

    return copied


def digits_without_nines() -> tuple[np.ndarray, np.ndarray]:
    """The rows raw-store was made of, in their order, from scikit-learn directly."""
    X, y = load_digits(return_X_y=True)
    X, y = X.astype(np.float32)[y != 9], y[y != 9]
    order = np.random.default_rng(0).permutation(len(X))[:420]
    return X[order], y[order]


def assert_same_scores(got: np.ndarray, saved: np.ndarray) -> None:
    """The same best class, and scores equal to float32 rounding: a BLAS of another release may
    sum a float32 product in another order and change its last bits, never more."""
    np.testing.assert_array_equal(got.argmax(axis=1), saved.argmax(axis=1))
    rounding = 64 * np.finfo(np.float32).eps * max(1.0, float(np.abs(saved).max()))
    np.testing.assert_allclose(got, saved, rtol=0, atol=rounding)


def test_the_raw_store_reads_back_the_digits_it_was_made_of(copy):
    store = copy("raw-store")
    store.verify()
    X, y = digits_without_nines()
    np.testing.assert_array_equal(store.features().compute(**SYNC), X)
    np.testing.assert_array_equal(store.features("test").compute(**SYNC), X[330:])
    np.testing.assert_array_equal(store.labels(), y)
    info = store.info()
    assert (info["rows"], info["dim"], info["encoding"]) == (420, 64, "raw")
    assert info["splits"] == {"train": 240, "val": 90, "test": 90}
    assert store.class_names == [str(label) for label in range(9)]
    assert len(store.batches()) == 3


def test_the_pq_store_reads_back_its_codes_and_decodes_near_its_source(copy, expected):
    store = copy("pq-store")
    store.verify()
    np.testing.assert_array_equal(store.codes().compute(**SYNC), expected["pq_codes"])
    info = store.info()
    assert (info["rows"], info["dim"], info["encoding"]) == (420, 64, "pq")
    assert info["splits"] == {"train": 240, "val": 90, "test": 90}
    decoded = store.features().compute(**SYNC)
    source, _ = digits_without_nines()
    # Eight bytes a row of 64 pixels in 0..16 cannot be exact; they must stay near the rows.
    assert (
        np.sqrt(((decoded - source) ** 2).sum(1)).mean()
        < 0.5 * np.linalg.norm(source, axis=1).mean()
    )


def test_the_image_store_reads_back_its_rows_and_describes_a_photo_as_it_did(copy, expected):
    store = copy("images-store")
    store.verify()
    np.testing.assert_array_equal(store.features().compute(**SYNC), expected["images_features"])
    assert store.info()["splits"] == {"train": 48, "test": 12}
    assert store.class_names == [f"digit-{label}" for label in range(10)]
    features = features_of_store(store.descriptor, str(store.path))
    assert features.label == "gist-tiny,color"
    np.testing.assert_allclose(
        described_china(features), expected["images_store_china"], rtol=0, atol=1e-5
    )


@pytest.mark.parametrize("kind", ["bow", "fisher"])
def test_a_vocabulary_loads_and_describes_a_photo_as_it_did(kind, expected):
    features = parse_features(f"{kind}:{WRITTEN / f'{kind}.vocab'}")
    np.testing.assert_allclose(
        described_china(features), expected[f"{kind}_china"], rtol=0, atol=1e-5
    )


def described_china(features: Features) -> np.ndarray:
    china = Image.fromarray(load_sample_image("china.jpg"))
    image = [
        np.asarray(china.convert(request.mode).resize(request.size[::-1]))
        for request in features.requests
    ]
    return features.describe([image])


def test_every_method_family_has_a_model():
    assert MODELS == [
        "hope", "images-ncm", "knn", "local", "ncm", "ncm-metric", "ncm-pq", "ridge",
        "ridge-rff", "ssl-ale",
    ]  # fmt: skip


@pytest.mark.parametrize("name", MODELS)
def test_a_model_loads_and_scores_the_test_rows_as_it_did(name, copy, expected):
    model, provenance = models.load(WRITTEN / "models" / f"{name}.model")
    store = copy({"images-ncm": "images-store", "ncm-pq": "pq-store"}.get(name, "raw-store"))
    rows = store.features("test").compute(**SYNC)
    score = model.decision_function if hasattr(model, "decision_function") else model.predict_proba
    assert_same_scores(np.asarray(score(rows)), expected[f"{name}_scores"])
    np.testing.assert_array_equal(model.predict(rows), expected[f"{name}_labels"])
    assert provenance["rows"] == (48 if name == "images-ncm" else 240)


def test_the_ledger_lists_every_run_it_recorded():
    runs = Ledger(WRITTEN / "ledger").runs()
    assert len(runs) == 19
    kinds = sorted(run["kind"] for run in runs)
    assert kinds == sorted(["ingest"] * 6 + ["compress"] + ["fit-features"] * 2 + ["train"] * 10)
    failed = [run for run in runs if run["outcome"] != "ok"]
    assert [(run["kind"], run["outcome"]) for run in failed] == [("ingest", "failed")]
    assert "missing.npz" in failed[0]["error"]
    trained = {run["command"][3] for run in runs if run["kind"] == "train"}
    assert trained == {f"/data/v1/models/{name}.model" for name in MODELS}
