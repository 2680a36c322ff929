"""examples/images.toml under `imgscale schedule`: new images dropped into a folder between
turns (one of them broken) appear exactly once in the store, the embedded store and the
predictions, and nothing else does; the model follows the new labelled images and a removed
batch of them, and after each turn equals the solve from scratch on the store as it now is."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from PIL import Image
from sklearn.datasets import load_digits

from imgscale.jobs import models
from imgscale.jobs.cli import cli
from imgscale.pipeline.classify import SemiSupervisedEigenSolver
from imgscale.storage import open_store

pytestmark = pytest.mark.slow
SPEC = Path(__file__).resolve().parents[2] / "examples" / "images.toml"


def save_digits(folder: Path, rows: np.ndarray, name) -> list[str]:
    digits = load_digits()
    keys = []
    for row in rows:
        grey = (digits.images[row] * 255 / 16).astype(np.uint8)
        key = name(row)
        (folder / key).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(grey).resize((32, 32)).convert("RGB").save(folder / key, quality=95)
        keys.append(key)
    return keys


def invoke(*args: str) -> None:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, f"{args}: {result.output} {result.exception!r}"


def predicted_ids(folder: Path) -> list[list[str]]:
    """The ids of each part of the predictions dataset, in row order."""
    parts = sorted(folder.glob("rows-*.parquet"))
    return [pq.read_table(p, columns=["id"]).column("id").to_pylist() for p in parts]


def assert_model_follows_the_store(model_path: Path, store) -> None:
    """The updated model against the semi-supervised solve from scratch on the store's training
    rows as they now are, under the model's kept ALE eigenfunctions (paper 001 eq. 3)."""
    model, provenance = models.load(model_path)
    embedding, solver = model.steps[0][1], model.steps[-1][1]
    U = embedding.transform(store.features("train").compute())
    reference = SemiSupervisedEigenSolver(lam=solver.lam).fit(
        U, store.labels("train"), embedding.eigenvalues_
    )
    X = embedding.transform(store.features().compute())
    np.testing.assert_array_equal(solver.classes_, reference.classes_)
    np.testing.assert_array_equal(solver.predict(X), reference.predict(X))
    scores, expected = solver.decision_function(X), reference.decision_function(X)
    atol = 4 * np.finfo(np.float32).eps * np.abs(expected).max()
    np.testing.assert_allclose(scores, expected, rtol=0, atol=atol)
    assert provenance["rows"] == len(store.labels("train"))


def test_each_turn_adds_exactly_the_new_images_to_store_embedding_and_predictions(
    tmp_path, scheduler_address
):
    shutil.copy(SPEC, tmp_path)
    digits = load_digits()
    labelled = np.concatenate([np.flatnonzero(digits.target == c)[:12] for c in range(3)])
    save_digits(tmp_path / "photos", labelled, lambda r: f"{digits.target[r]}/{r}.jpg")
    unseen = np.flatnonzero(digits.target < 3)[-20:]
    incoming, labelled_dir = tmp_path / "incoming", tmp_path / "labelled"
    incoming.mkdir()
    new_labelled = np.concatenate([np.flatnonzero(digits.target == c)[12:15] for c in range(3)])
    photos, embedded = str(tmp_path / "photos.zarr"), tmp_path / "photos-ale.zarr"
    cluster = ["--scheduler", scheduler_address]
    invoke("ingest", str(tmp_path / "photos"), photos, "--features", "gist-tiny,color", *cluster)
    invoke("train", photos, str(tmp_path / "ale.model"), "--embedding", "ale",
           "--n-components", "16", "--method", "ssl", *cluster)  # fmt: skip

    def turn() -> None:
        spec, lock = str(tmp_path / "images.toml"), str(tmp_path / "turn.lock")
        invoke("schedule", "--every", "1s", "--max-runs", "1", "--lock", lock, "--",
               "run", spec, *cluster)  # fmt: skip

    def labelled(rows):
        return save_digits(labelled_dir, rows, lambda r: f"{digits.target[r]}/new-{r}.jpg")

    first_labelled = labelled(new_labelled[[0, 1, 3, 4, 6, 7]])
    first = save_digits(incoming, unseen[:4], lambda r: f"new-{r}.jpg")
    turn()
    store = open_store(photos)
    assert store.committed_rows == 36 + 6 + 4
    assert sorted(store.ids(split="incoming")) == sorted(f"incoming/{key}" for key in first)
    assert sorted(store.ids(split="train")[36:]) == sorted(first_labelled)
    assert_model_follows_the_store(tmp_path / "ale.model", store)
    assert list(open_store(embedded).ids()) == list(store.ids())
    parts = predicted_ids(tmp_path / "predictions")
    assert parts == [list(store.ids(split="incoming"))]  # the new rows, not the training rows

    second_labelled = labelled(new_labelled[[2, 5, 8]])
    second = save_digits(incoming, unseen[4:7], lambda r: f"new-{r}.jpg")
    (incoming / "broken.jpg").write_bytes((incoming / second[0]).read_bytes()[:200])
    turn()
    store = open_store(photos)
    assert store.committed_rows == 46 + 3 + 3
    new_ids = [f"incoming/{key}" for key in second]
    assert sorted(store.ids()[46:]) == sorted(new_ids + second_labelled)
    assert [r["key"] for r in store.rejected().to_pylist()] == ["incoming/broken.jpg"]
    assert list(open_store(embedded).ids()) == list(store.ids())
    parts = predicted_ids(tmp_path / "predictions")
    assert len(parts) == 2 and sorted(parts[1]) == sorted(new_ids)
    assert_model_follows_the_store(tmp_path / "ale.model", store)

    # The first labelled batch was wrong: its batch removed and its images taken away.
    rows = store.rows(columns=["id", "batch_id"]).to_pylist()
    (batch,) = {r["batch_id"] for r in rows if r["id"] in first_labelled}
    invoke("remove-batch", photos, batch)
    for key in first_labelled:
        (labelled_dir / key).unlink()
    # Nothing new: the model subtracts the removed batch and embed drops its rows; predict
    # --new --split incoming counts the incoming split's rows, which the removal left as they
    # were, so it has nothing to add.
    turn()
    store = open_store(photos)
    assert store.committed_rows == 52 - 6
    assert not set(first_labelled) & set(store.ids())
    assert list(open_store(embedded).ids()) == list(store.ids())
    assert len(predicted_ids(tmp_path / "predictions")) == 2
    assert_model_follows_the_store(tmp_path / "ale.model", store)
