"""Every parquet file the commit record names (rows, class table, rejects) carries a crc32c in the
record: a flipped bit or a deleted file is refused by name, never read as other labels or as a
store without classes (issue 28, findings 1 and 3)."""

import hashlib
import json

import numpy as np
import pytest

from imgscale.storage import StoreError, create_store, open_store
from imgscale.storage.layout import write_classes


@pytest.fixture
def store(tmp_path):
    store = create_store(tmp_path / "s.zarr", 4)
    X = np.random.default_rng(0).normal(size=(50, 4)).astype(np.float32)
    store.append("a", X, ["cat", "dog"] * 25, [f"r{i}" for i in range(50)])
    return store


def flip_one_bit(file, at: float = 0.5) -> None:
    data = bytearray(file.read_bytes())
    data[int(len(data) * at)] ^= 0x01
    file.write_bytes(bytes(data))


def test_a_flipped_bit_in_a_rows_file_is_refused_by_name(store):
    (rows_file,) = (store.path / "rows").glob("*.parquet")
    flip_one_bit(rows_file)
    with pytest.raises(StoreError, match=rf"{rows_file.name} fails its crc32c checksum"):
        open_store(store.path).labels()
    with pytest.raises(StoreError, match="crc32c"):
        open_store(store.path).verify()


def test_a_deleted_class_table_of_a_labelled_store_is_refused(store):
    (table,) = (store.path / "classes").glob("*.parquet")
    table.unlink()
    with pytest.raises(StoreError, match=r"class table: .* is missing; the store is damaged"):
        _ = open_store(store.path).class_names
    # ... and the next ingest of new names does not rename the committed rows.
    with pytest.raises(StoreError, match="missing"):
        open_store(store.path).append("b", np.zeros((1, 4), np.float32), ["bird"], ["r50"])
    assert open_store(store.path).committed_rows == 50


def test_a_damaged_class_table_is_refused(store):
    (table,) = (store.path / "classes").glob("*.parquet")
    flip_one_bit(table, at=0.3)
    with pytest.raises(StoreError, match="fails its crc32c checksum"):
        _ = open_store(store.path).class_names


def test_new_classes_are_a_new_table_and_the_old_one_stays_readable(store):
    first = read_record(store.path)["classes"]["file"]
    open_store(store.path).append("b", np.zeros((1, 4), np.float32), ["bird"], ["r50"])
    second = read_record(store.path)["classes"]["file"]
    assert second != first and (store.path / first).exists()
    assert open_store(store.path).class_names == ["cat", "dog", "bird"]


def test_a_damaged_rejects_file_is_refused(tmp_path):
    store = create_store(tmp_path / "s.zarr", 4)
    with store.writer("b") as writer:
        writer.reject(["bad.jpg"], [hashlib.sha256(b"x").digest()], ["truncated JPEG"])
    (file,) = (store.path / "rejected").glob("*.parquet")
    flip_one_bit(file)
    with pytest.raises(StoreError, match="fails its crc32c checksum"):
        open_store(store.path).rejected()


def test_a_store_written_before_checksums_still_reads(store):
    """The format before: no crc32c in the record, one classes.parquet at the root."""
    meta_file = store.path / "zarr.json"
    meta = json.loads(meta_file.read_text())
    record = meta["attributes"]["imgscale"]
    classes = record.pop("classes")
    (store.path / classes["file"]).rename(store.path / "classes.parquet")
    for batch in record["batches"]:
        del batch["crc32c"]
    meta_file.write_text(json.dumps(meta))
    reopened = open_store(store.path)
    assert reopened.class_names == ["cat", "dog"]
    assert reopened.labels().tolist() == [0, 1] * 25
    reopened.append("b", np.zeros((1, 4), np.float32), ["bird"], ["r50"])
    assert open_store(store.path).class_names == ["cat", "dog", "bird"]


def read_record(path):
    return json.loads((path / "zarr.json").read_text())["attributes"]["imgscale"]


def test_a_class_table_a_killed_writer_left_is_removed_by_the_next(store):
    with pytest.raises(RuntimeError):
        with store.writer("b") as writer:
            writer.write(np.zeros((1, 4), np.float32), ["bird"], ["r50"])
            # as a commit killed after writing its class table, before its record
            write_classes(store.path, ["cat", "dog", "bird"], {})
            raise RuntimeError("killed")
    assert len(list((store.path / "classes").glob("*.parquet"))) == 1
    assert open_store(store.path).class_names == ["cat", "dog"]
