"""features(split) reads the rows of the split in each chunk and nothing else (SplitRows)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from imgscale.storage import StoreError, create_store
from imgscale.storage.chunks import ChunkReader, SplitRows

ROWS_PER_CHUNK = 10


@pytest.fixture
def split_store(tmp_path: Path):
    """45 rows in chunks of 10: chunk 0 all train, chunk 1 no train, chunks 2-4 mixed."""
    X = np.random.default_rng(0).standard_normal((45, 6)).astype(np.float32)
    split = np.array(["train"] * 10 + ["test"] * 10 + ["train", "test", "test"] * 8 + ["train"])
    store = create_store(tmp_path / "s.zarr", 6, rows_per_chunk=ROWS_PER_CHUNK)
    store.append("b0", X, split=split)
    return store, X, split


def test_split_chunks_stay_aligned_and_hold_the_split_rows(split_store):
    store, X, split = split_store
    train = store.features("train")
    assert train.chunks[0] == (10, 0, 4, 3, 2)
    np.testing.assert_array_equal(train.compute(), X[split == "train"])
    np.testing.assert_array_equal(store.features("test").compute(), X[split == "test"])


@pytest.mark.parametrize("rows", [slice(0, 10), slice(3, 7), slice(10, 14), slice(11, 13)])
def test_a_slice_of_a_split_chunk_equals_numpy(split_store, rows):
    """Consecutive rows (chunk 0) and rows with gaps (chunk 2), whole chunks and pieces."""
    store, X, split = split_store
    expected = X[split == "train"][rows]
    np.testing.assert_array_equal(store.features("train")[rows].compute(), expected)


def test_a_chunk_without_rows_of_the_split_is_not_read(split_store):
    store, X, split = split_store
    (store.path / "features" / "c" / "1" / "0").unlink()  # chunk 1 holds no train rows
    np.testing.assert_array_equal(store.features("train").compute(), X[split == "train"])


def test_a_read_across_chunks_is_refused(split_store):
    store, _, split = split_store
    view = SplitRows(ChunkReader(store.path, 45, 6, ROWS_PER_CHUNK), split == "train")
    with pytest.raises(ValueError, match="spans chunks"):
        view[8:12]
    with pytest.raises(ValueError, match="mask of shape"):
        SplitRows(ChunkReader(store.path, 45, 6, ROWS_PER_CHUNK), split[:-1] == "train")


def test_where_keeps_a_subset_of_the_split_rows(split_store):
    store, X, split = split_store
    train = X[split == "train"]
    where = np.arange(len(train)) % 3 != 1
    kept = store.features("train", where=where)
    assert sum(kept.chunks[0]) == where.sum() and len(kept.chunks[0]) == 5
    np.testing.assert_array_equal(kept.compute(), train[where])
    test = split == "test"
    np.testing.assert_array_equal(store.features(where=test).compute(), X[test])


def test_where_of_the_wrong_length_is_refused(split_store):
    store, _, split = split_store
    with pytest.raises(StoreError, match="one boolean per selected row"):
        store.features("train", where=np.ones(len(split), dtype=bool))
