"""A damaged model file is refused on load with one line naming the model and the array; it never
answers with wrong weights (a deleted chunk used to read as zeros, flipped bytes as wrong means)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from imgscale.jobs import models
from imgscale.jobs.cli import cli, main
from imgscale.pipeline.classify import NearestClassMean
from imgscale.storage import StoreError


@pytest.fixture
def model_path(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    y = np.arange(300) % 3
    X = (rng.normal(size=(300, 8)) + 4 * np.eye(8)[y]).astype(np.float32)
    path = tmp_path / "ncm.model"
    models.save(NearestClassMean().fit(X, y), path)
    return path


def _chunk(model: Path, array: str) -> Path:
    (chunk,) = [p for p in (model / "step0" / array / "c").rglob("*") if p.is_file()]
    return chunk


def _delete_chunk(model: Path) -> None:
    _chunk(model, "means_").unlink()


def _flip_two_bytes(model: Path) -> None:
    chunk = _chunk(model, "means_")
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0xFF
    data[len(data) // 2 + 1] ^= 0x0F
    chunk.write_bytes(bytes(data))


def _truncate_chunk(model: Path) -> None:
    chunk = _chunk(model, "means_")
    chunk.write_bytes(chunk.read_bytes()[:-9])


def _delete_array(model: Path) -> None:
    shutil.rmtree(model / "step0" / "means_")


def _reshape_array(model: Path) -> None:
    meta = model / "step0" / "means_" / "zarr.json"
    record = json.loads(meta.read_text())
    record["shape"] = [2, 8]
    meta.write_text(json.dumps(record))


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (_delete_chunk, r"array step0/means_ has 0 of its 1 chunks; expected all"),
        (_flip_two_bytes, r"array step0/means_ is damaged \(.*\); expected chunks matching"),
        (_truncate_chunk, r"array step0/means_ is damaged \(.*\); expected chunks matching"),
        (_delete_array, r"array step0/means_ is missing; expected float32 of shape \(3, 8\)"),
        (_reshape_array, r"array step0/means_ is float32 of shape \(2, 8\); expected float32"),
    ],
)
def test_a_damaged_model_is_refused_naming_model_and_array(
    model_path: Path, damage, expected: str
) -> None:
    damage(model_path)
    with pytest.raises(StoreError, match=rf"^model {model_path}: {expected}"):
        models.load(model_path)


def test_the_cli_reports_a_damaged_model_in_one_line(
    model_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    _flip_two_bytes(model_path)
    monkeypatch.setattr("sys.argv", ["imgscale", "evaluate", str(model_path), str(model_path)])
    with pytest.raises(SystemExit) as exit_:
        main()
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"model {model_path}: array step0/means_ is damaged" in err


def test_an_intact_model_loads_bit_identical(model_path: Path) -> None:
    before = models.load(model_path)[0].means_.copy()
    assert CliRunner().invoke(cli, ["--help"]).exit_code == 0
    np.testing.assert_array_equal(models.load(model_path)[0].means_, before)
