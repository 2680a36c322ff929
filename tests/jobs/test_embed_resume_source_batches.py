"""`imgscale embed` resumes by source batch (issue 28, finding 8): the destination holds exactly
the embeddings of the source's live batches after a batch is removed, anywhere, or ingested again
with other rows under the same ids. Reference: the model's all-at-once `transform` of the
source's rows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from imgscale.jobs import models
from imgscale.jobs.cli import cli
from imgscale.pipeline.embed import ALE
from imgscale.storage import open_store

DIM = 10


def _npz(path: Path, n: int, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    X = rng.standard_normal((n, DIM)).astype(np.float32) + y[:, None]
    np.savez(path, X=X, y=y)
    return path


def _imgscale(*args) -> dict:
    result = CliRunner().invoke(cli, [*map(str, args), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture
def stores(tmp_path) -> tuple[Path, Path, Path]:
    """A source of three ingested batches, an ALE model fitted on its rows, and a destination
    holding every source row's embedding."""
    src, dst, model = tmp_path / "src.zarr", tmp_path / "dst.zarr", tmp_path / "ale.model"
    for name, n, seed in (("a", 120, 0), ("b", 90, 1), ("c", 60, 2)):
        _imgscale("ingest", _npz(tmp_path / f"{name}.npz", n, seed), src, "--y-key", "y",
                  "--batch-id", name)  # fmt: skip
    models.save(ALE(n_components=4).fit(open_store(src).features().compute()), model)
    assert _imgscale("embed", model, src, dst, "--batch-rows", "50")["rows_embedded"] == 270
    return src, dst, model


def _assert_embeds_the_source(src: Path, dst: Path, model: Path) -> None:
    source, embedded = open_store(src), open_store(dst)
    ale, _ = models.load(model)
    np.testing.assert_array_equal(
        embedded.features().compute(), ale.transform(source.features().compute())
    )
    assert embedded.ids().tolist() == source.ids().tolist()
    assert embedded.labels().tolist() == source.labels().tolist()
    assert embedded.splits().tolist() == source.splits().tolist()


def test_the_last_batch_ingested_again_with_other_rows_is_embedded_again(tmp_path, stores):
    src, dst, model = stores
    _imgscale("remove-batch", src, "c")
    # The same batch id, so the same row ids c:0..c:59, with other values.
    _imgscale("ingest", _npz(tmp_path / "c2.npz", 60, 7), src, "--y-key", "y", "--batch-id", "c")
    summary = _imgscale("embed", model, src, dst, "--batch-rows", "50")
    assert summary["stale_batches_removed"] == ["c"] and summary["stale_rows_removed"] == 60
    assert summary["rows_embedded"] == 60 and summary["rows_after"] == 270
    _assert_embeds_the_source(src, dst, model)


def test_a_middle_batch_removed_from_the_source_leaves_the_destination(stores):
    src, dst, model = stores
    _imgscale("remove-batch", src, "b")
    summary = _imgscale("embed", model, src, dst, "--batch-rows", "50")
    assert summary["stale_batches_removed"] == ["b"] and summary["rows_embedded"] == 0
    assert summary["rows_after"] == 180
    _assert_embeds_the_source(src, dst, model)
    again = _imgscale("embed", model, src, dst, "--batch-rows", "50")
    assert again["rows_embedded"] == 0 and again["stale_batches_removed"] == []


def test_a_destination_embedded_by_row_position_is_refused_naming_what_to_do(tmp_path, stores):
    src, _, model = stores
    dst = tmp_path / "legacy.zarr"
    _imgscale("embed", model, src, dst, "--max-rows", "50", "--batch-rows", "50")
    # As an earlier imgscale named its batches: by source rows, rows-START-STOP.
    meta_file = dst / "zarr.json"
    meta = json.loads(meta_file.read_text())
    meta["attributes"]["imgscale"]["batches"][0]["batch_id"] = "rows-0-50"
    meta_file.write_text(json.dumps(meta))
    result = CliRunner().invoke(cli, ["embed", str(model), str(src), str(dst)])
    message = str(result.exception)
    assert result.exit_code != 0 and "\n" not in message
    assert "['rows-0-50'] were embedded by row position" in message
    assert f"remove {dst} and run embed again" in message
    assert open_store(dst).committed_rows == 50
