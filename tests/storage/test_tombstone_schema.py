"""A store with tombstones carries a schema version one later than its encoding's, so an imgscale
that predates tombstones (and knows only the earlier version) refuses it by its schema message
instead of reading the removed rows as live ones; removing the last tombstone restores it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from imgscale.storage import StoreError, create_store, open_store
from tests.storage.conftest import random_rows


def _version(path) -> int:
    return json.loads((path / "zarr.json").read_text())["attributes"]["imgscale"]["schema_version"]


def test_a_removed_middle_batch_moves_the_store_one_schema_version_on(tmp_path):
    store = create_store(tmp_path / "s.zarr", 4, class_names=["x", "y"], rows_per_chunk=4)
    for seed, name in enumerate("abc"):
        store.append(name, random_rows(6, seed, 4), np.zeros(6, dtype=np.int64), split="train")
    assert _version(store.path) == 1
    store.remove_batch("b")  # a tombstone: b's rows stay in the chunks
    assert _version(store.path) == 2
    assert len(open_store(store.path).ids()) == 12
    store.remove_batch("c")  # the row array shrinks to a: no tombstone is left
    assert _version(store.path) == 1
    assert open_store(store.path).ids().tolist() == [f"a:{i}" for i in range(6)]


def test_a_tombstoned_store_claiming_the_earlier_version_is_refused(tmp_path):
    store = create_store(tmp_path / "s.zarr", 4, class_names=["x"], rows_per_chunk=4)
    for seed, name in enumerate("ab"):
        store.append(name, random_rows(5, seed, 4), np.zeros(5, dtype=np.int64), split="train")
    store.remove_batch("a")
    meta_file = store.path / "zarr.json"
    meta = json.loads(meta_file.read_text())
    meta["attributes"]["imgscale"]["schema_version"] = 1
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(StoreError, match=r"schema_version 1, expected 2"):
        open_store(store.path)
