"""One huge but finite value decides nothing silently: a row whose squared norm overflows float32
is refused at ingest naming the row (it used to be stored, and an RBF embedding fitted on the
store then took a bandwidth of inf, gamma 0, and scored at chance with exit 0)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from imgscale.jobs.cli import cli
from imgscale.storage import StoreError, create_store


def _rows_with_one_huge_value(n: int = 40, dim: int = 8) -> np.ndarray:
    X = np.random.default_rng(0).normal(size=(n, dim)).astype(np.float32)
    X[17, 3] = 3e38  # finite in float32; its square is not
    return X


def test_ingest_refuses_a_row_whose_squared_norm_overflows_naming_it(tmp_path: Path) -> None:
    X = _rows_with_one_huge_value()
    np.savez(tmp_path / "rows.npz", X=X, y=np.arange(len(X)) % 2)
    store = tmp_path / "s.zarr"
    result = CliRunner().invoke(cli, ["ingest", str(tmp_path / "rows.npz"), str(store)])
    assert result.exit_code == 1, result.output
    message = str(result.exception)
    assert "1 rows have a squared norm beyond float32's range (first at row 17)" in message
    assert "\n" not in message
    assert not store.exists()


def test_a_row_of_values_whose_squares_add_up_past_float32_is_refused(tmp_path: Path) -> None:
    store = create_store(tmp_path / "s.zarr", dim=8)
    X = np.ones((5, 8), np.float32)
    X[2] = 1e19  # each square 1e38 is finite; their sum 8e38 is not
    with pytest.raises(StoreError, match=r"first at row 2\); expected ‖x‖² ≤ 3.4e\+38"):
        store.append("b0", X)
    assert store.committed_rows == 0


def test_rows_just_inside_float32_are_accepted(tmp_path: Path) -> None:
    store = create_store(tmp_path / "s.zarr", dim=8)
    X = np.ones((5, 8), np.float32)
    X[2] = 6e18  # ‖x‖² = 8 · 3.6e37 = 2.9e38
    store.append("b0", X)
    assert store.committed_rows == 5
