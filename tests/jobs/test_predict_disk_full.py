"""`imgscale predict` on a full disk: one line naming the output and the file being written."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from imgscale.jobs import models
from imgscale.jobs.cli import cli
from imgscale.pipeline.classify import NearestClassMean
from imgscale.storage import create_store


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_disk_is_one_line_naming_the_predictions_and_leaves_no_file(tmp_path):
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((50, 4)).astype(np.float32), np.arange(50) % 3
    store = create_store(tmp_path / "s.zarr", 4)
    store.append("all", X, y, split="test")
    model = tmp_path / "m.model"
    models.save(NearestClassMean().fit(X, y), model)
    out = tmp_path / "out" / "predictions.parquet"
    out.parent.mkdir()
    # The partial file predict writes first is /dev/full: every write fails with ENOSPC.
    (out.parent / f".{out.name}.{os.getpid()}.partial").symlink_to("/dev/full")
    result = CliRunner().invoke(cli, ["predict", str(model), str(store.path), str(out)])
    assert result.exit_code != 0
    message = str(result.exception)
    assert message.startswith(f"predictions {out}: No space left on device (writing ")
    assert not out.exists() and list(out.parent.iterdir()) == []
