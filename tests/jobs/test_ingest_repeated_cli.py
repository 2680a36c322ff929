"""`imgscale ingest` says when a file's rows were committed before, under which split."""

from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner

from imgscale.jobs.cli import cli


def test_rows_committed_again_under_another_split_are_reported_by_count_and_split(tmp_path):
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((30, 5)).astype(np.float32), rng.integers(0, 3, 30)
    np.savez(tmp_path / "test.npz", X=X, y=y)
    np.savez(tmp_path / "again.npz", X=X[::-1].astype(np.float64), y=y[::-1])
    store = str(tmp_path / "s.zarr")
    runner = CliRunner()
    first = runner.invoke(cli, ["ingest", str(tmp_path / "test.npz"), store, "--split", "test"])
    assert first.exit_code == 0, first.output
    assert "warning" not in first.stderr
    again = runner.invoke(
        cli, ["ingest", str(tmp_path / "again.npz"), store, "--split", "train", "--json"]
    )
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["repeated"] == {"test": 30}
    (warning,) = [line for line in again.stderr.splitlines() if "warning" in line]
    assert "30 as split 'test'" in warning and "as split 'train'" in warning
