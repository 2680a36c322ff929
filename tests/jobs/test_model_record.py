"""A model's JSON record (parameters, fitted scalars, provenance with the class names) decides its
answers as much as its arrays do: an edited record is refused on load in one line naming the
model, never scored with (two swapped class names used to score with the classes exchanged).
Models saved before the record was checksummed (schema version 2) still load, with a warning."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from imgscale.jobs import models
from imgscale.jobs.cli import cli
from imgscale.pipeline.classify import NearestClassMean, RidgeClassifier
from imgscale.storage import StoreError

# Saved by imgscale at 8651735 (schema version 2: arrays checksummed, record not).
MODEL_V2 = Path(__file__).parent / "data" / "model-v2" / "ncm.model"


@pytest.fixture
def model_path(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    y = np.arange(300) % 3
    X = (rng.normal(size=(300, 8)) + 4 * np.eye(8)[y]).astype(np.float32)
    path = tmp_path / "ncm.model"
    models.save(NearestClassMean().fit(X, y), path, class_names=["cat", "dog", "eel"])
    return path


def _edit_record(model: Path, edit) -> None:
    meta_file = model / "zarr.json"
    meta = json.loads(meta_file.read_text())
    edit(meta["attributes"]["imgscale_model"])
    meta_file.write_text(json.dumps(meta, indent=2))


def _swap_class_names(record: dict) -> None:
    names = record["provenance"]["class_names"]
    names[0], names[1] = names[1], names[0]


def _change_scalar(record: dict) -> None:
    record["steps"][0]["scalars"]["n_features_in_"] = 7


def _drop_checksum(record: dict) -> None:
    del record["record_crc32c"]


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (_swap_class_names, r"zarr.json record does not match its record_crc32c [0-9a-f]{8}; "),
        (_change_scalar, r"zarr.json record does not match its record_crc32c [0-9a-f]{8}; "),
        (_drop_checksum, r"zarr.json has no record_crc32c; expected one in a schema version 3"),
    ],
)
def test_an_edited_record_is_refused_naming_the_model(model_path: Path, edit, expected) -> None:
    _edit_record(model_path, edit)
    with pytest.raises(StoreError, match=rf"^model {model_path}: {expected}") as refused:
        models.load(model_path)
    assert "\n" not in str(refused.value)


def test_evaluate_refuses_a_model_with_swapped_class_names(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    y = np.arange(300) % 3
    X = (rng.normal(size=(300, 8)) + 4 * np.eye(8)[y]).astype(np.float32)
    np.savez(tmp_path / "rows.npz", X=X, y=y)
    store, model = tmp_path / "s.zarr", tmp_path / "ncm.model"
    runner = CliRunner()
    for args in (
        ["ingest", str(tmp_path / "rows.npz"), str(store), "--split", "test"],
        ["train", str(store), str(model), "--method", "ncm", "--split", "test"],
    ):
        assert runner.invoke(cli, args).exit_code == 0
    _edit_record(model, _swap_class_names)
    result = runner.invoke(cli, ["evaluate", str(model), str(store), "--split", "test"])
    assert result.exit_code == 1, result.output
    assert str(result.exception).startswith(f"model {model}: zarr.json record does not match")


def test_an_intact_record_loads_with_its_class_names(model_path: Path) -> None:
    model, provenance = models.load(model_path)
    assert provenance["class_names"] == ["cat", "dog", "eel"]
    assert isinstance(model, NearestClassMean) and model.means_.shape == (3, 8)


def test_a_schema_version_2_model_still_loads_with_a_warning(tmp_path: Path) -> None:
    with pytest.warns(UserWarning, match=r"saved without a record checksum \(schema version 2\)"):
        model, provenance = models.load(MODEL_V2)
    assert provenance["class_names"] == ["cat", "dog", "eel"]
    assert model.means_.shape == (3, 4)
    assert model.predict(model.means_).tolist() == [0, 1, 2]


def _as_v2_copy(tmp_path: Path, edit) -> Path:
    """The version 2 fixture with its record edited: no checksum stands in the way, so what is
    left to refuse it is the check of the record against the class."""
    path = tmp_path / "v2.model"
    shutil.copytree(MODEL_V2, path)
    _edit_record(path, edit)
    return path


def _ridge_params_under_kind_ncm(record: dict) -> None:
    record["steps"][0]["params"] = RidgeClassifier().get_params()


def _scalar_named_like_a_method(record: dict) -> None:
    record["steps"][0]["scalars"]["predict"] = 1


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            _ridge_params_under_kind_ncm,
            r"step 0 \(NearestClassMean\) has parameters \[.*'rho'.*\] that NearestClassMean "
            r"does not take; expected some of \[\]",
        ),
        (
            _scalar_named_like_a_method,
            r"step 0 \(NearestClassMean\) has fitted value 'predict'; expected names ending in '_'",
        ),
    ],
)
def test_a_record_that_does_not_fit_its_class_is_refused_in_one_line(
    tmp_path: Path, edit, expected: str
) -> None:
    path = _as_v2_copy(tmp_path, edit)
    with pytest.warns(UserWarning), pytest.raises(StoreError) as refused:
        models.load(path)
    message = str(refused.value)
    assert message.startswith(f"model {path}: ") and "\n" not in message
    assert re.search(expected, message), message
