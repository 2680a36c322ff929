"""`export_rows`: a store's rows with their ids, labels and splits, for other tools."""

import numpy as np
import pyarrow.parquet as pq
import pytest

from imgscale.storage import StoreError, create_store, export_rows
from imgscale.storage import export as export_module


@pytest.fixture
def store(tmp_path):
    store = create_store(tmp_path / "s.zarr", 3, rows_per_chunk=4)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(10, 3)).astype(np.float32)
    store.append(
        "a", X[:6], ["cat", "dog", "cat", "dog", "cat", "dog"], [f"a{i}" for i in range(6)]
    )
    store.append("b", X[6:], [-1, 0, 1, 0], [f"b{i}" for i in range(4)], split="test")
    return store, X


def test_parquet_holds_every_row_in_order_one_row_group_a_chunk(store, tmp_path):
    store, X = store
    assert export_rows(store, tmp_path / "out.parquet") == 10
    file = pq.ParquetFile(tmp_path / "out.parquet")
    assert file.metadata.num_row_groups == 3  # chunks of 4 rows
    table = file.read()
    np.testing.assert_array_equal(np.stack(table.column("features").to_pylist()), X)
    assert table.column("id").to_pylist() == [*(f"a{i}" for i in range(6)), "b0", "b1", "b2", "b3"]
    assert table.column("label").to_pylist()[6:] == [None, "cat", "dog", "cat"]
    assert table.column("split").to_pylist() == ["train"] * 6 + ["test"] * 4


def test_npz_of_one_split(store, tmp_path):
    store, X = store
    assert export_rows(store, tmp_path / "out.npz", split="test") == 4
    with np.load(tmp_path / "out.npz", allow_pickle=False) as z:
        np.testing.assert_array_equal(z["X"], X[6:])
        assert z["y"].tolist() == [-1, 0, 1, 0]
        assert z["ids"].tolist() == ["b0", "b1", "b2", "b3"]
        assert z["class_names"].tolist() == ["cat", "dog"]


def test_npz_past_the_memory_limit_is_refused_and_nothing_is_written(store, tmp_path, monkeypatch):
    store, _ = store
    monkeypatch.setattr(export_module, "NPZ_MAX_BYTES", 100)
    with pytest.raises(StoreError, match=r"export to \.parquet"):
        export_rows(store, tmp_path / "out.npz")
    assert list(tmp_path.iterdir()) == [tmp_path / "s.zarr"]


def test_an_unknown_split_and_format_are_refused(store, tmp_path):
    store, _ = store
    with pytest.raises(StoreError, match="no split 'val'"):
        export_rows(store, tmp_path / "out.parquet", split="val")
    with pytest.raises(StoreError, match=r"\.parquet or \.npz"):
        export_rows(store, tmp_path / "out.csv")
