"""Round trips, idempotent batches, commit visibility and store metadata."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import google_crc32c
import hypothesis.strategies as st
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings

from imgscale.storage import SCHEMA_VERSION, FeatureStore, StoreError, create_store, open_store
from tests.storage.conftest import DIM, ROWS_PER_CHUNK, random_rows, snapshot


def test_appended_batches_read_back_as_their_concatenation(tmp_path: Path) -> None:
    s = create_store(tmp_path / "s.zarr", DIM, rows_per_chunk=ROWS_PER_CHUNK)
    parts = [random_rows(n, seed) for seed, n in enumerate([7, 13, 1, 30])]
    for i, X in enumerate(parts):
        assert s.append(f"b{i}", X) == len(X)
    np.testing.assert_array_equal(s.features().compute(), np.concatenate(parts))
    assert s.committed_rows == 51


def test_features_chunks_align_with_zarr_chunks(store: FeatureStore) -> None:
    x = store.features()
    assert x.dtype == np.float32
    assert x.chunks == ((10, 10, 5), (DIM,))
    assert x.npartitions == 3  # one task per zarr chunk


def test_labels_ids_and_splits_stay_aligned_with_rows(store: FeatureStore) -> None:
    X = random_rows(12, 1)
    labels = np.array([0, 1] * 6)
    ids = [f"img{i}" for i in range(12)]
    split = np.array(["test", "train", "val"] * 4)
    store.append("b1", X, labels=labels, ids=ids, split=split)
    test = split == "test"
    np.testing.assert_array_equal(store.features("test").compute(), X[test])
    np.testing.assert_array_equal(store.labels("test"), labels[test])
    assert list(store.ids("test")) == [i for i, t in zip(ids, test, strict=True) if t]
    assert set(store.splits("test")) == {"test"}
    assert store.labels().dtype == np.int32
    assert len(store.labels()) == len(store.ids()) == store.committed_rows == 37


def test_a_split_keeps_one_chunk_per_zarr_chunk(store: FeatureStore) -> None:
    """A split filters each zarr chunk in place: no rows move between chunks (no shuffle)."""
    split = np.array(["test", "train", "val"] * 4)
    store.append("b1", random_rows(12, 1), split=split)
    in_test = np.concatenate([np.zeros(25, bool), split == "test"])
    x = store.features("test")
    assert x.chunks[0] == tuple(int(c.sum()) for c in np.split(in_test, [10, 20, 30]))
    np.testing.assert_array_equal(x.compute(), store.features().compute()[in_test])


def test_default_ids_name_batch_and_row(store: FeatureStore) -> None:
    assert list(store.ids()[:3]) == ["b0:0", "b0:1", "b0:2"]


def test_rows_table_has_the_documented_columns(store: FeatureStore) -> None:
    table = store.rows()
    assert table.schema.names == ["id", "label", "split", "batch_id"]
    assert table.schema.field("label").type == pa.int32()
    assert set(table.column("batch_id").to_pylist()) == {"b0"}


def test_appending_a_committed_batch_id_is_a_no_op(store: FeatureStore) -> None:
    before = snapshot(store)
    assert store.append("b0", random_rows(5, 9)) == 0
    assert snapshot(store) == before
    assert store.has_batch("b0") and not store.has_batch("b1")


def test_each_batch_writes_one_rows_file(store: FeatureStore) -> None:
    store.append("b1", random_rows(4, 1))
    files = sorted(p.name for p in (store.path / "rows").iterdir())
    assert files == ["000000000000.parquet", "000000000025.parquet"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cuts=st.lists(st.integers(0, 57), max_size=8),
    committed=st.integers(0, 23),
    rows_per_chunk=st.integers(1, 16),
)
def test_any_block_split_of_a_batch_reads_back_identically(
    tmp_path_factory: pytest.TempPathFactory, cuts: list[int], committed: int, rows_per_chunk: int
) -> None:
    s = create_store(tmp_path_factory.mktemp("h") / "s.zarr", 3, rows_per_chunk=rows_per_chunk)
    first = random_rows(committed, 1, dim=3)
    s.append("first", first)
    X = random_rows(57, 2, dim=3)
    labels = np.arange(57) % 4 - 1
    bounds = [0, *sorted(cuts), 57]
    with s.writer("streamed") as w:
        for a, b in itertools.pairwise(bounds):
            w.write(X[a:b], labels[a:b])
    np.testing.assert_array_equal(s.features().compute(), np.concatenate([first, X]))
    np.testing.assert_array_equal(s.labels()[committed:], labels)
    assert list(s.ids()[committed:]) == [f"streamed:{i}" for i in range(57)]


def test_readers_never_see_rows_of_an_open_writer(store: FeatureStore) -> None:
    before = snapshot(store)
    with store.writer("b1") as w:
        w.write(random_rows(40, 1))  # fills several chunks on disk
        assert snapshot(FeatureStore(store.path)) == before
    assert FeatureStore(store.path).committed_rows == 65


def test_an_exception_inside_the_writer_commits_nothing(store: FeatureStore) -> None:
    before = snapshot(store)
    with pytest.raises(KeyError), store.writer("b1") as w:
        w.write(random_rows(30, 1))
        raise KeyError("caller failed mid-batch")
    assert snapshot(store) == before
    store.append("b1", random_rows(3, 2))
    np.testing.assert_array_equal(store.features().compute()[25:], random_rows(3, 2))


def test_a_later_bad_block_commits_none_of_the_batch(store: FeatureStore) -> None:
    before = snapshot(store)
    bad = random_rows(5, 2)
    bad[3, 1] = np.nan
    with pytest.raises(StoreError), store.writer("b1") as w:
        w.write(random_rows(30, 1))
        w.write(bad)
    assert snapshot(store) == before


def test_a_rejected_block_leaves_the_writer_usable(store: FeatureStore) -> None:
    with store.writer("b1") as w:
        with pytest.raises(StoreError):
            w.write(random_rows(4, 1)[:, :3])
        w.write(random_rows(4, 1))
    np.testing.assert_array_equal(store.features().compute()[25:], random_rows(4, 1))


def test_stale_partial_files_are_removed_when_a_writer_starts(store: FeatureStore) -> None:
    stale = store.path / "features" / "c" / "2" / "0.deadbeef.partial"
    stale.write_bytes(b"half a chunk")
    store.append("b1", random_rows(2, 1))
    assert not stale.exists()


def test_orphan_rows_file_of_a_dead_writer_is_not_read(store: FeatureStore) -> None:
    orphan = store.path / "rows" / "000000000025.parquet"
    orphan.write_bytes(b"left by a killed writer")
    assert len(store.rows()) == 25
    store.append("b1", random_rows(2, 1))
    assert store.ids()[-1] == "b1:1"


def test_create_refuses_a_non_empty_path(tmp_path: Path) -> None:
    (tmp_path / "s.zarr").mkdir()
    (tmp_path / "s.zarr" / "x").write_text("")
    with pytest.raises(StoreError, match="not empty"):
        create_store(tmp_path / "s.zarr", 4)


def test_default_chunk_is_about_64_mib(tmp_path: Path) -> None:
    assert create_store(tmp_path / "s.zarr", 512).rows_per_chunk == 64 * 2**20 // (4 * 512)


def test_open_refuses_a_missing_path_and_a_non_store(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        open_store(tmp_path / "nope")
    (tmp_path / "plain").mkdir()
    with pytest.raises(StoreError, match=r"no zarr\.json"):
        open_store(tmp_path / "plain")


def test_open_refuses_another_schema_version(store: FeatureStore) -> None:
    meta_file = store.path / "zarr.json"
    meta = json.loads(meta_file.read_text())
    meta["attributes"]["imgscale"]["schema_version"] = 99
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(StoreError) as err:
        open_store(store.path)
    assert str(meta_file) in str(err.value)
    assert "99" in str(err.value) and f"expected {SCHEMA_VERSION}" in str(err.value)


def test_record_holds_provenance_and_batches(store: FeatureStore) -> None:
    record = json.loads((store.path / "zarr.json").read_text())["attributes"]["imgscale"]
    assert record["dtype"] == "float32" and record["encoding"] == "raw"
    assert set(record["created"]) >= {"id", "time", "imgscale_version", "host"}
    rows_file = "rows/000000000000.parquet"
    assert record["batches"] == [
        {
            "batch_id": "b0",
            "start": 0,
            "stop": 25,
            "rows_file": rows_file,
            "crc32c": google_crc32c.value((store.path / rows_file).read_bytes()),
        }
    ]


def test_class_names_can_only_be_extended(store: FeatureStore) -> None:
    store.set_class_names(["cat", "dog", "eel"])
    assert store.class_names == ["cat", "dog", "eel"]
    with pytest.raises(StoreError, match="relabel"):
        store.set_class_names(["dog", "cat", "eel"])
    store.set_class_names(["cat"])  # a prefix keeps everything as it is
    assert store.class_names == ["cat", "dog", "eel"]


def test_info_counts_labels_by_class_name(store: FeatureStore) -> None:
    info = store.info()
    assert info["rows"] == 25 and info["dim"] == DIM
    assert info["batches"] == [{"batch_id": "b0", "rows": 25, "split": "train"}]
    assert info["splits"] == {"train": 25}
    assert info["classes"] == ["cat", "dog"]
    assert info["label_counts"] == {"unlabelled": 9, "cat": 8, "dog": 8}
    assert info["bytes_on_disk"] > 0
    assert json.loads(json.dumps(info)) == info


def test_integer_labels_without_class_names_name_classes_by_number(tmp_path: Path) -> None:
    s = create_store(tmp_path / "s.zarr", 2)
    s.append("b", random_rows(5, 0, dim=2), labels=[2, 2, -1, 0, 1])
    assert s.class_names == ["0", "1", "2"]
    assert s.info()["classes"] == ["0", "1", "2"]
    assert s.info()["label_counts"] == {"unlabelled": 1, "0": 1, "1": 1, "2": 2}


def test_empty_store_reads_as_zero_rows(tmp_path: Path) -> None:
    s = create_store(tmp_path / "s.zarr", 3)
    assert s.features().compute().shape == (0, 3)
    assert len(s.rows()) == 0 and s.info()["label_counts"] == {}
    s.verify()


def test_rows_keep_the_schema_types_and_select_columns(store: FeatureStore) -> None:
    """Splits are dictionary-encoded in memory, but rows() gives the stored schema's types."""
    import pyarrow as pa

    full = store.rows()
    assert full.column_names == ["id", "label", "split", "batch_id"]
    assert full.schema.field("split").type == pa.string()
    assert full.schema.field("batch_id").type == pa.string()
    some = store.rows("train", columns=["label"])
    assert some.column_names == ["label"]
    expected = [r["label"] for r in full.to_pylist() if r["split"] == "train"]
    assert some.column("label").to_pylist() == expected
    assert list(store.splits()) == full.column("split").to_pylist()


def test_two_stores_made_in_the_same_second_have_different_stamps(tmp_path) -> None:
    """A model recognises the store it was trained on by this stamp (its warnings when batches
    changed); the time alone, to the second, made two stores of one test look like one."""
    first = create_store(tmp_path / "a.zarr", 4, class_names=["x"], rows_per_chunk=4)
    second = create_store(tmp_path / "b.zarr", 4, class_names=["x"], rows_per_chunk=4)
    assert first.created != second.created
