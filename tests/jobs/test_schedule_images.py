"""examples/images.toml under `imgscale schedule`: new images dropped into a folder between
turns (one of them broken) appear exactly once in the store, the embedded store and the
predictions, and nothing else does."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from PIL import Image
from sklearn.datasets import load_digits

from imgscale.jobs.cli import cli
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


def test_each_turn_adds_exactly_the_new_images_to_store_embedding_and_predictions(
    tmp_path, scheduler_address
):
    shutil.copy(SPEC, tmp_path)
    digits = load_digits()
    labelled = np.concatenate([np.flatnonzero(digits.target == c)[:12] for c in range(3)])
    save_digits(tmp_path / "photos", labelled, lambda r: f"{digits.target[r]}/{r}.jpg")
    unseen = np.flatnonzero(digits.target < 3)[-20:]
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    photos, embedded = str(tmp_path / "photos.zarr"), tmp_path / "photos-ale.zarr"
    cluster = ["--scheduler", scheduler_address]
    invoke("ingest", str(tmp_path / "photos"), photos, "--features", "gist-tiny,color", *cluster)
    invoke("train", photos, str(tmp_path / "ale.model"), "--embedding", "ale",
           "--n-components", "16", "--method", "ssl", *cluster)  # fmt: skip

    def turn() -> None:
        spec, lock = str(tmp_path / "images.toml"), str(tmp_path / "turn.lock")
        invoke("schedule", "--every", "1s", "--max-runs", "1", "--lock", lock, "--",
               "run", spec, *cluster)  # fmt: skip

    first = save_digits(incoming, unseen[:4], lambda r: f"new-{r}.jpg")
    turn()
    store = open_store(photos)
    assert store.committed_rows == 36 + 4
    assert sorted(store.ids(split="incoming")) == sorted(f"incoming/{key}" for key in first)
    assert list(open_store(embedded).ids()) == list(store.ids())
    parts = predicted_ids(tmp_path / "predictions")
    assert parts == [list(store.ids(split="incoming"))]  # the new rows, not the training rows

    second = save_digits(incoming, unseen[4:7], lambda r: f"new-{r}.jpg")
    (incoming / "broken.jpg").write_bytes((incoming / second[0]).read_bytes()[:200])
    turn()
    store = open_store(photos)
    assert store.committed_rows == 40 + 3
    assert sorted(store.ids()[40:]) == sorted(f"incoming/{key}" for key in second)
    assert [r["key"] for r in store.rejected().to_pylist()] == ["incoming/broken.jpg"]
    assert list(open_store(embedded).ids()) == list(store.ids())
    parts = predicted_ids(tmp_path / "predictions")
    assert len(parts) == 2 and sorted(parts[1]) == sorted(f"incoming/{key}" for key in second)

    turn()  # nothing new: nothing added anywhere
    assert open_store(photos).committed_rows == 43
    assert open_store(embedded).committed_rows == 43
    assert len(predicted_ids(tmp_path / "predictions")) == 2
