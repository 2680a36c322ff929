"""Labels under an unexpected name are not dropped silently: an .npz without a 'y' member whose
other members hold one value per row is refused unless the rows are said to be unlabelled (it
used to be ingested unlabelled without a word, and the ingest with the right key then committed
every row a second time)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from imgscale.jobs.cli import cli
from imgscale.storage import StoreError
from imgscale.storage.formats import open_source

X = np.random.default_rng(0).normal(size=(30, 4)).astype(np.float32)
LABELS = np.arange(30) % 3


def test_ingest_refuses_labels_under_another_name(tmp_path: Path) -> None:
    np.savez(tmp_path / "l.npz", X=X, labels=LABELS)
    store = tmp_path / "s.zarr"
    result = CliRunner().invoke(cli, ["ingest", str(tmp_path / "l.npz"), str(store)])
    assert result.exit_code == 1, result.output
    assert str(result.exception) == (
        f"{tmp_path / 'l.npz'}: no labels array 'y', but ['labels'] hold one value per row; "
        "expected labels named: --y-key labels (y_key), or rows said to be unlabelled: "
        "--unlabelled (unlabelled=True)"
    )
    assert not store.exists()
    named = CliRunner().invoke(
        cli, ["ingest", str(tmp_path / "l.npz"), str(store), "--y-key", "labels"]
    )
    assert named.exit_code == 0, named.output
    info = json.loads(CliRunner().invoke(cli, ["info", str(store), "--json"]).output)
    assert info["label_counts"] == {"0": 10, "1": 10, "2": 10}


def test_unlabelled_rows_are_read_without_labels_when_said(tmp_path: Path) -> None:
    np.savez(tmp_path / "l.npz", X=X, weights=np.ones(30))
    source = open_source(tmp_path / "l.npz", unlabelled=True)
    try:
        (block,) = source.blocks(100)
    finally:
        source.close()
    assert block.labels is None
    np.testing.assert_array_equal(block.X, X)


def test_unlabelled_contradicting_a_labels_member_is_refused(tmp_path: Path) -> None:
    np.savez(tmp_path / "l.npz", X=X, y=LABELS)
    with pytest.raises(StoreError, match=r"labels 'y' found, but the rows were said to be unl"):
        open_source(tmp_path / "l.npz", unlabelled=True)


@pytest.mark.parametrize(
    "members",
    [
        {"X": X},  # nothing else
        {"X": X, "y": LABELS, "scores": np.ones(30)},  # labels present
        {"X": X, "ids": np.array([f"r{i}" for i in range(30)])},  # the ids member is used
        {"X": X, "mean": np.ones(4)},  # one value per column, not per row
    ],
)
def test_npz_files_without_a_stray_per_row_member_read_as_before(tmp_path: Path, members) -> None:
    np.savez(tmp_path / "ok.npz", **members)
    source = open_source(tmp_path / "ok.npz")
    source.close()
    assert source.shape == (30, 4)
