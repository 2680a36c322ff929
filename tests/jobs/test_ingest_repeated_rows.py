"""Rows given again (another file, dtype, order or split) are recognised by their values."""

from __future__ import annotations

import hashlib

import numpy as np

from imgscale.jobs.ingest import ingest_file


def _rows(n: int = 40, dim: int = 6, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, dim)).astype(np.float32), rng.integers(0, 3, n)


def test_each_row_is_committed_with_the_first_16_bytes_of_the_sha256_of_its_float32_values(
    tmp_path,
):
    X, y = _rows()
    np.savez(tmp_path / "a.npz", X=X.astype(np.float64), y=y)
    result = ingest_file(tmp_path / "a.npz", tmp_path / "s.zarr", y_key="y")
    hashes = result.store.content_hashes()
    expected = [hashlib.sha256(row.astype(np.float32).tobytes()).digest()[:16] for row in X]
    assert hashes.column("sha256").to_pylist() == expected
    assert result.repeated == {}


def test_the_same_rows_in_another_dtype_order_and_split_are_counted_by_their_first_split(
    tmp_path,
):
    X, y = _rows()
    np.savez(tmp_path / "test.npz", X=X, y=y)
    ingest_file(tmp_path / "test.npz", tmp_path / "s.zarr", y_key="y", split="test")
    extra, extra_y = _rows(5, seed=1)
    order = np.random.default_rng(2).permutation(len(X))
    again = np.concatenate([X[order].astype(np.float64), extra])
    np.savez(tmp_path / "train.npz", X=again, y=np.concatenate([y[order], extra_y]))
    result = ingest_file(tmp_path / "train.npz", tmp_path / "s.zarr", y_key="y", split="train")
    assert not result.skipped and result.rows == 45
    assert result.repeated == {"test": 40}
    # A third file repeating five train rows and three test rows: each counted where it was.
    np.savez(tmp_path / "more.npz", X=np.concatenate([extra, X[:3]]), y=np.zeros(8, int))
    result = ingest_file(tmp_path / "more.npz", tmp_path / "s.zarr", y_key="y", split="val")
    assert result.repeated == {"test": 3, "train": 5}


def test_rows_that_only_look_alike_are_not_counted(tmp_path):
    X, y = _rows()
    np.savez(tmp_path / "a.npz", X=X, y=y)
    ingest_file(tmp_path / "a.npz", tmp_path / "s.zarr", y_key="y")
    nudged = X.copy()
    nudged[:, 0] = np.nextafter(nudged[:, 0], np.float32(np.inf))  # one ulp in one value a row
    np.savez(tmp_path / "b.npz", X=nudged, y=y)
    result = ingest_file(tmp_path / "b.npz", tmp_path / "s.zarr", y_key="y", split="test")
    assert result.repeated == {}
