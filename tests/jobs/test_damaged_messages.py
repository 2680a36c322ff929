"""A damaged store is refused in one line naming the store, the file and what is wrong (issue 28,
"Faults and messages"): an edited row count in zarr.json (was "mask of shape (1438,) for 1538
rows", and an export pairing rows with other rows' labels, exit 0), and a class table of fewer
names than the labels (was "list index out of range", or scores with classes unnamed, exit 0)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from imgscale.jobs.cli import cli

IMGSCALE = str(Path(sys.executable).with_name("imgscale"))


@pytest.fixture(scope="module")
def intact(tmp_path_factory, digits_splits) -> tuple[Path, Path]:
    """Digits train and test as two batches, and an NCM model trained on them."""
    root = tmp_path_factory.mktemp("damaged")
    store, model = root / "digits.zarr", root / "ncm.model"
    for split in ("train", "test"):
        args = ["ingest", str(digits_splits[split]), str(store), "--y-key", "y", "--split", split]
        assert CliRunner().invoke(cli, args).exit_code == 0
    trained = CliRunner().invoke(cli, ["train", str(store), str(model), "--method", "ncm"])
    assert trained.exit_code == 0, trained.output
    return store, model


def _damaged(intact: Path, tmp_path: Path, edit) -> Path:
    store = tmp_path / "damaged.zarr"
    shutil.copytree(intact, store)
    meta_file = store / "zarr.json"
    meta = json.loads(meta_file.read_text())
    edit(store, meta["attributes"]["imgscale"])
    meta_file.write_text(json.dumps(meta))
    return store


def _refused(*args) -> str:
    result = subprocess.run(
        [IMGSCALE, *map(str, args)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("imgscale: error: ")
    return lines[-1]


def _more_rows(store: Path, record: dict) -> None:
    record["committed_rows"] += 100


def test_an_edited_row_count_is_one_line_naming_the_store_and_its_record(intact, tmp_path):
    store = _damaged(intact[0], tmp_path, _more_rows)
    expected = (
        f"store {store}: zarr.json says 1538 committed rows but its batches hold 1438; "
        "the store's commit record is damaged"
    )
    assert _refused("export", store, tmp_path / "rows.npz") == f"imgscale: error: {expected}"
    assert not (tmp_path / "rows.npz").exists()
    assert _refused("evaluate", intact[1], store) == f"imgscale: error: {expected}"
    assert _refused("info", store) == f"imgscale: error: {expected}"


def _fewer_class_names(store: Path, record: dict) -> None:
    """The class table as a store made before tables were checksummed keeps it, with 5 of the
    10 names."""
    table = pq.read_table(store / record.pop("classes")["file"])
    pq.write_table(table.slice(0, 5), store / "classes.parquet")


def test_labels_past_the_class_table_are_one_line_naming_both_files(intact, tmp_path):
    store = _damaged(intact[0], tmp_path, _fewer_class_names)
    message = _refused("evaluate", intact[1], store)
    assert f"store {store}: rows file {store}/rows/000000000000.parquet for rows 0–1077" in message
    assert f"label 9, but the class table {store}/classes.parquet names 5 classes" in message
    assert message.endswith("the store is damaged")
    assert _refused("info", store) == message
