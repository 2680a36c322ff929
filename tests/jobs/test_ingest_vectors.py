"""Every ingest format round-trips against numpy; ingest is one batch, streamed, idempotent."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from imgscale.jobs.ingest import ingest_file
from imgscale.storage import FORMATS, StoreError, create_store, open_store
from tests.storage.conftest import random_rows, snapshot

N, D = 53, 5


def _labels(n: int = N) -> np.ndarray:
    return (np.arange(n) % 3).astype(np.int64)


def _write_idx(path: Path, array: np.ndarray, compress: bool) -> None:
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    opener = gzip.open if compress else open
    with opener(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def _write_vecs(path: Path, X: np.ndarray, value_dtype: str) -> None:
    rows = np.empty(len(X), np.dtype([("dim", "<i4"), ("values", value_dtype, (X.shape[1],))]))
    rows["dim"] = X.shape[1]
    rows["values"] = X
    rows.tofile(path)


def test_npy_round_trips(tmp_path: Path) -> None:
    X = random_rows(N, 0, dim=D)
    np.save(tmp_path / "x.npy", X)
    store = ingest_file(tmp_path / "x.npy", tmp_path / "s.zarr", block_rows=7).store
    np.testing.assert_array_equal(store.features().compute(), X)
    assert set(store.labels()) == {-1}


def test_npz_compressed_streams_in_blocks_with_labels_and_ids(tmp_path: Path) -> None:
    X = random_rows(N, 1, dim=D).astype(np.float64)
    ids = np.array([f"img{i:03d}" for i in range(N)])
    np.savez_compressed(tmp_path / "x.npz", X=X, y=_labels(), ids=ids)
    seen = []
    store = ingest_file(
        tmp_path / "x.npz",
        tmp_path / "s.zarr",
        block_rows=4,
        progress=lambda done, total: seen.append((done, total)),
    ).store
    np.testing.assert_array_equal(store.features().compute(), X.astype(np.float32))
    np.testing.assert_array_equal(store.labels(), _labels())
    assert list(store.ids()) == list(ids)
    assert len(seen) == 14 and seen[-1] == (N, N)  # ceil(53 / 4) blocks, one writer


def test_npz_uses_the_single_2d_array_and_explicit_keys(tmp_path: Path) -> None:
    X = random_rows(N, 2, dim=D)
    np.savez(tmp_path / "x.npz", feats=X, target=_labels())
    store = ingest_file(
        tmp_path / "x.npz", tmp_path / "s.zarr", y_key="target", block_rows=10
    ).store
    np.testing.assert_array_equal(store.features().compute(), X)
    np.testing.assert_array_equal(store.labels(), _labels())


def test_npz_object_array_is_refused(tmp_path: Path) -> None:
    np.savez(tmp_path / "x.npz", X=np.ones((3, 2)), ids=np.array(["a", 1, None], dtype=object))
    with pytest.raises(StoreError, match="object dtype"):
        ingest_file(tmp_path / "x.npz", tmp_path / "s.zarr")
    assert not (tmp_path / "s.zarr").exists()


def test_parquet_round_trips(tmp_path: Path) -> None:
    X = random_rows(N, 3, dim=D)
    features = pa.FixedSizeListArray.from_arrays(pa.array(X.ravel()), D)
    table = pa.table({"id": [f"p{i}" for i in range(N)], "vec": features, "label": _labels()})
    pq.write_table(table, tmp_path / "x.parquet", row_group_size=16)
    store = ingest_file(tmp_path / "x.parquet", tmp_path / "s.zarr", block_rows=9).store
    np.testing.assert_array_equal(store.features().compute(), X)
    np.testing.assert_array_equal(store.labels(), _labels())
    assert store.ids()[-1] == f"p{N - 1}"


@pytest.mark.parametrize("compress", [True, False], ids=["gz", "raw"])
def test_idx_images_with_idx_labels_round_trip(tmp_path: Path, compress: bool) -> None:
    images = np.random.default_rng(4).integers(0, 256, size=(N, 4, 3), dtype=np.uint8)
    suffix = ".gz" if compress else ""
    _write_idx(tmp_path / f"train-images-idx3-ubyte{suffix}", images, compress)
    _write_idx(tmp_path / f"train-labels-idx1-ubyte{suffix}", _labels(), compress)
    store = ingest_file(
        tmp_path / f"train-images-idx3-ubyte{suffix}",
        tmp_path / "s.zarr",
        labels_path=tmp_path / f"train-labels-idx1-ubyte{suffix}",
        block_rows=8,
        class_names=["zero", "one", "two"],
    ).store
    np.testing.assert_array_equal(store.features().compute(), images.reshape(N, 12))
    np.testing.assert_array_equal(store.labels(), _labels())
    assert store.class_names == ["zero", "one", "two"]


def test_idx_labels_of_another_length_are_refused(tmp_path: Path) -> None:
    _write_idx(tmp_path / "i-idx3-ubyte", np.zeros((4, 2, 2)), compress=False)
    _write_idx(tmp_path / "l-idx1-ubyte", np.zeros(3), compress=False)
    with pytest.raises(StoreError, match=r"expected \(4,\)"):
        ingest_file(
            tmp_path / "i-idx3-ubyte", tmp_path / "s.zarr", labels_path=tmp_path / "l-idx1-ubyte"
        )


def test_fvecs_round_trips(tmp_path: Path) -> None:
    X = random_rows(N, 5, dim=D)
    _write_vecs(tmp_path / "x.fvecs", X, "<f4")
    store = ingest_file(tmp_path / "x.fvecs", tmp_path / "s.zarr", block_rows=10).store
    np.testing.assert_array_equal(store.features().compute(), X)


def test_bvecs_round_trip_as_unchanged_byte_values(tmp_path: Path) -> None:
    X = np.random.default_rng(6).integers(0, 256, size=(N, D), dtype=np.uint8)
    _write_vecs(tmp_path / "x.bvecs", X, "u1")
    store = ingest_file(tmp_path / "x.bvecs", tmp_path / "s.zarr", block_rows=10).store
    np.testing.assert_array_equal(store.features().compute(), X.astype(np.float32))


def test_fvecs_row_with_another_dim_is_refused_and_commits_nothing(tmp_path: Path) -> None:
    raw = np.zeros((N, D + 1), "<i4")
    raw[:, 0] = D
    raw[:, 1:] = random_rows(N, 7, dim=D).view("<i4")
    raw[40, 0] = D + 1  # same byte length, lying dim field
    raw.tofile(tmp_path / "x.fvecs")
    store = create_store(tmp_path / "s.zarr", D, rows_per_chunk=8)
    store.append("first", random_rows(3, 8, dim=D))
    before = snapshot(store)
    with pytest.raises(StoreError, match="row 40 has dim field 6; expected 5"):
        ingest_file(tmp_path / "x.fvecs", store.path, block_rows=10)
    assert snapshot(store) == before


def test_truncated_fvecs_is_refused(tmp_path: Path) -> None:
    _write_vecs(tmp_path / "x.fvecs", random_rows(4, 0, dim=D), "<f4")
    data = (tmp_path / "x.fvecs").read_bytes()
    (tmp_path / "x.fvecs").write_bytes(data[:-3])
    with pytest.raises(StoreError, match="not a whole number of rows"):
        ingest_file(tmp_path / "x.fvecs", tmp_path / "s.zarr")


def test_reingesting_the_same_file_is_a_no_op(tmp_path: Path) -> None:
    np.save(tmp_path / "x.npy", random_rows(N, 0, dim=D))
    store = ingest_file(tmp_path / "x.npy", tmp_path / "s.zarr").store
    before = snapshot(store)
    ingest_file(tmp_path / "x.npy", tmp_path / "s.zarr")
    assert snapshot(store) == before


def test_ingest_appends_to_an_existing_store(tmp_path: Path) -> None:
    a, b = random_rows(N, 0, dim=D), random_rows(7, 1, dim=D)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    ingest_file(tmp_path / "a.npy", tmp_path / "s.zarr")
    ingest_file(tmp_path / "b.npy", tmp_path / "s.zarr", split="test")
    store = open_store(tmp_path / "s.zarr")
    np.testing.assert_array_equal(store.features().compute(), np.concatenate([a, b]))
    np.testing.assert_array_equal(store.features("test").compute(), b)


def test_bad_rows_in_a_new_store_leave_no_store(tmp_path: Path) -> None:
    X = random_rows(N, 0, dim=D)
    X[50, 0] = np.inf
    np.save(tmp_path / "x.npy", X)
    with pytest.raises(StoreError) as err:
        ingest_file(tmp_path / "x.npy", tmp_path / "s.zarr", block_rows=10)
    assert str(tmp_path / "x.npy") in str(err.value) and "rows 50–52" in str(err.value)
    assert not (tmp_path / "s.zarr").exists()


def test_unknown_extension_lists_supported_formats(tmp_path: Path) -> None:
    (tmp_path / "x.csv").write_text("1,2\n")
    with pytest.raises(StoreError) as err:
        ingest_file(tmp_path / "x.csv", tmp_path / "s.zarr")
    assert all(fmt in str(err.value) for fmt in FORMATS)


def test_npy_object_array_is_refused_without_unpickling(tmp_path: Path) -> None:
    np.save(tmp_path / "x.npy", np.array([[1, "a"]], dtype=object), allow_pickle=True)
    with pytest.raises(StoreError, match=r"not a numeric \.npy array"):
        ingest_file(tmp_path / "x.npy", tmp_path / "s.zarr")


def test_a_small_first_file_gets_chunks_of_its_size_not_64_mib(tmp_path: Path) -> None:
    X = np.ones((1000, 64), np.float32)
    np.save(tmp_path / "x.npy", X)
    store = ingest_file(tmp_path / "x.npy", tmp_path / "s.zarr").store
    assert store.rows_per_chunk == 4096  # 1000 rows rounded up to the 4096-row step
    assert store.info()["bytes_on_disk"] < 2 * 4096 * 64 * 4
    np.testing.assert_array_equal(store.features().compute(), X)
