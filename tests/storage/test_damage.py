"""A missing, truncated or corrupted chunk file is reported by name, never read as data."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from imgscale.storage import FeatureStore, StoreError


def _chunk(store: FeatureStore, index: int) -> Path:
    return store.path / "features" / "c" / str(index) / "0"


def _truncate(file: Path) -> None:
    data = file.read_bytes()
    file.write_bytes(data[: len(data) // 2])


def _forget_rows_checksums(store: FeatureStore) -> None:
    """Make the store's commit record as stores made before checksums were kept."""
    import json

    meta_file = store.path / "zarr.json"
    meta = json.loads(meta_file.read_text())
    for batch in meta["attributes"]["imgscale"]["batches"]:
        del batch["crc32c"]
    meta_file.write_text(json.dumps(meta))


def _flip_a_byte(file: Path) -> None:
    data = bytearray(file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    file.write_bytes(bytes(data))


DAMAGE = {"deleted": Path.unlink, "truncated": _truncate, "corrupted": _flip_a_byte}


@pytest.mark.parametrize("damage", DAMAGE)
def test_damaged_chunk_fails_features_read_naming_the_chunk(
    store: FeatureStore, damage: str
) -> None:
    DAMAGE[damage](_chunk(store, 1))
    with pytest.raises(StoreError) as err:
        store.features().compute()
    assert str(_chunk(store, 1)) in str(err.value) and "rows 10–19" in str(err.value)


@pytest.mark.parametrize("damage", DAMAGE)
def test_damaged_chunk_fails_verify_naming_the_chunk(store: FeatureStore, damage: str) -> None:
    DAMAGE[damage](_chunk(store, 2))
    with pytest.raises(StoreError, match=re.escape(str(_chunk(store, 2)))):
        store.verify()


def test_intact_store_verifies(store: FeatureStore) -> None:
    store.verify()


def test_chunks_outside_the_damage_still_read(store: FeatureStore) -> None:
    _chunk(store, 1).unlink()
    assert store.features()[:10].compute().shape == (10, 6)


def test_missing_rows_file_is_reported(store: FeatureStore) -> None:
    (store.path / "rows" / "000000000000.parquet").unlink()
    with pytest.raises(StoreError, match="rows 0–24"):
        FeatureStore(store.path).rows()


@pytest.mark.parametrize("column", ["label", "split"])
def test_rows_file_column_of_another_type_is_reported(store: FeatureStore, column: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    file = store.path / "rows" / "000000000000.parquet"
    table = pq.read_table(file)
    retyped = table.set_column(
        table.schema.get_field_index(column), column, pa.array([1.5] * table.num_rows)
    )
    pq.write_table(retyped, file)
    reopened = FeatureStore(store.path)
    # The file no longer matches the crc32c its commit record holds.
    with pytest.raises(StoreError, match=f"{re.escape(str(file))} fails its crc32c checksum"):
        reopened.labels() if column == "label" else reopened.splits()
    # A store written before rows files were checksummed: the column's type is checked.
    _forget_rows_checksums(store)
    reopened = FeatureStore(store.path)
    with pytest.raises(StoreError, match=f"{re.escape(str(file))}.*column '{column}' is double"):
        reopened.labels() if column == "label" else reopened.splits()
