"""Any batch can be removed (issue 28, "Remove any batch"): every read of a store with a middle
batch removed equals the same read of a store built without that batch, and a writer killed with
SIGKILL mid-removal leaves the old store or the new one."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from imgscale.storage import StoreError, create_coded_store, create_store, export_rows, open_store
from tests.conftest import wait_for_report
from tests.storage.conftest import random_rows

DIM, CHUNK = 5, 8
# Batches straddle chunk boundaries: the middle one starts and ends inside a chunk.
BATCHES = {
    "a": (13, "train"),
    "b": (11, "train"),
    "c": (9, "test"),
    "d": (6, "train"),
}


def _append(store, name: str, seed: int) -> None:
    n, split = BATCHES[name]
    labels = np.random.default_rng(seed).integers(-1, 3, n)
    splits = np.where(np.arange(n) % 3 == 0, "val", split)
    store.append(name, random_rows(n, seed, DIM), labels, split=splits)


def _store(path: Path, names: list[str]):
    store = create_store(path, DIM, class_names=["x", "y", "z"], rows_per_chunk=CHUNK)
    for seed, name in enumerate(BATCHES):
        if name in names:
            _append(store, name, seed)
    return store


def _reads(store) -> dict:
    """Every read of rows a user or a job makes, as plain values."""
    store = open_store(store.path)
    store.verify()
    info = store.info()
    labels = store.labels()
    return {
        "committed_rows": store.committed_rows,
        "features": store.features().compute().tobytes(),
        "test": store.features("test").compute().tobytes(),
        "labelled": store.features(where=labels >= 0).compute().tobytes(),
        "val_labelled": store.features("val", where=store.labels("val") >= 0).compute().tobytes(),
        "labels": labels.tolist(),
        "train_labels": store.labels("train").tolist(),
        "ids": store.ids().tolist(),
        "splits": store.splits().tolist(),
        "rows": store.rows().to_pylist(),
        "has_ids": store.has_ids(["b:0", "a:0", "d:5"]).tolist(),
        "info": {k: info[k] for k in ("rows", "splits", "label_counts", "batches", "classes")},
        "split_counts": store.split_counts(),
    }


def test_removing_a_middle_batch_reads_as_a_store_built_without_it(tmp_path):
    store = _store(tmp_path / "s.zarr", list(BATCHES))
    reference = _store(tmp_path / "ref.zarr", ["a", "c", "d"])
    assert store.remove_batch("b") == 11
    assert _reads(store) == _reads(reference)
    info = open_store(store.path).info()
    assert info["removed_batches"] == ["b"] and info["removed_rows_on_disk"] == 11
    # Exported rows are the reference's, values and metadata.
    for path, out in ((store.path, "s.npz"), (reference.path, "ref.npz")):
        export_rows(open_store(path), tmp_path / out)
    with np.load(tmp_path / "s.npz") as got, np.load(tmp_path / "ref.npz") as expected:
        for key in ("X", "y", "ids", "splits", "class_names"):
            np.testing.assert_array_equal(got[key], expected[key])


def test_removing_the_first_then_the_last_batch_and_ingesting_again(tmp_path):
    store = _store(tmp_path / "s.zarr", list(BATCHES))
    store.remove_batch("a")
    store.remove_batch("d")  # the last: its rows leave the row array, the tombstone stays
    _append(store, "d", 3)
    assert _reads(store) == _reads(_store(tmp_path / "ref.zarr", ["b", "c", "d"]))
    assert open_store(store.path).info()["removed_batches"] == ["a"]
    # Removing every batch leaves an empty store that takes rows again.
    for name in ("b", "c", "d"):
        store.remove_batch(name)
    record = json.loads((store.path / "zarr.json").read_text())["attributes"]["imgscale"]
    assert record["committed_rows"] == 0 and "removed" not in record
    assert open_store(store.path).committed_rows == 0
    _append(store, "a", 0)
    assert _reads(store) == _reads(_store(tmp_path / "ref2.zarr", ["a"]))


def test_a_removed_batch_no_longer_counts_as_committed_content(tmp_path):
    store = _store(tmp_path / "s.zarr", list(BATCHES))
    store.remove_batch("b")
    assert not store.has_batch("b")
    assert not store.has_ids(["b:0"]).any()
    # Its ids are free again: the batch can be committed anew, at the end of the store.
    _append(store, "b", 1)
    assert open_store(store.path).ids()[-11:].tolist() == [f"b:{i}" for i in range(11)]


def test_an_edited_row_count_is_refused_naming_the_record(tmp_path):
    store = _store(tmp_path / "s.zarr", list(BATCHES))
    store.remove_batch("b")
    meta_file = store.path / "zarr.json"
    meta = json.loads(meta_file.read_text())
    meta["attributes"]["imgscale"]["removed"] = []  # the tombstone lost: rows 13-23 unaccounted
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(StoreError) as refused:
        open_store(store.path).features()
    message = str(refused.value)
    assert "\n" not in message and str(store.path) in message
    assert "batch 'c' rows 24–32 where row 13 was expected next" in message


# The child removes batch "b" and stops, reporting, at a chosen point: inside the commit (before
# the record is replaced) or after it (before the removed batch's rows file is deleted).
CHILD = """
import sys, time
from imgscale.storage import open_store
from imgscale.storage import writer

path, progress, point = sys.argv[1:]
def report(text):
    with open(progress, "a") as f:
        f.write(text + "\\n")

def paused(*args, **kwargs):
    report("paused")
    time.sleep(60)

setattr(writer, "write_record" if point == "before_commit" else "remove_uncommitted", paused)
open_store(path).remove_batch("b")
"""


@pytest.mark.parametrize("point", ["before_commit", "after_commit"])
def test_a_sigkill_mid_removal_leaves_the_old_or_the_new_store(tmp_path, point):
    store = _store(tmp_path / "s.zarr", list(BATCHES))
    before = _reads(store)
    script, progress = tmp_path / "child.py", tmp_path / "progress"
    script.write_text(CHILD)
    child = subprocess.Popen([sys.executable, str(script), str(store.path), str(progress), point])
    try:
        wait_for_report(progress, "paused", child, timeout=60, who="remover")
        time.sleep(0.05)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    after = _reads(store)
    if point == "before_commit":
        assert after == before
    else:
        assert after == _reads(_store(tmp_path / "ref.zarr", ["a", "c", "d"]))
        assert (store.path / "rows" / "000000000013.parquet").exists()  # left by the killed one
    # The next writer sweeps what the killed one left, and appends normally; the removed batch's
    # rows file stays, named by its tombstone, for models that subtract its rows (issue 45).
    (store.path / "rows" / "stray.parquet").write_bytes(b"left by a killed writer")
    store.append("e", random_rows(4, 9, DIM), [0, 1, 2, 0])
    assert not (store.path / "rows" / "stray.parquet").exists()
    assert (store.path / "rows" / "000000000013.parquet").exists()
    assert open_store(store.path).committed_rows == (43 if point == "before_commit" else 32)


def _pq_store(path: Path, codec, names: list[str]):
    store = create_coded_store(path, codec, class_names=["x", "y", "z"], rows_per_chunk=CHUNK)
    for seed, name in enumerate(BATCHES):
        if name in names:
            n, split = BATCHES[name]
            codes = codec.encode(random_rows(n, seed, DIM * 2))
            store.append(name, codes, np.arange(n) % 3, split=split)
    return store


def _codec(dim: int, m: int):
    from imgscale.pipeline.pq import PQCodec

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # few training rows: the codebook's quality is not tested
        return PQCodec.train(random_rows(600, 99, dim), m, seed=0, niter=4)


def test_a_coded_store_reads_codes_and_decoded_rows_without_the_batch(tmp_path):
    codec = _codec(DIM * 2, 2)
    store = _pq_store(tmp_path / "pq.zarr", codec, list(BATCHES))
    reference = _pq_store(tmp_path / "ref.zarr", codec, ["a", "c", "d"])
    store.remove_batch("b")
    for split in (None, "train", "test"):
        np.testing.assert_array_equal(
            store.codes(split).compute(), reference.codes(split).compute()
        )
        np.testing.assert_array_equal(
            store.features(split).compute(), reference.features(split).compute()
        )
    assert store.labels().tolist() == reference.labels().tolist()
    store.verify()


def test_a_chunk_copy_of_a_store_with_removed_rows_on_disk_is_refused_by_name(tmp_path):
    from imgscale.storage import CopyWriter

    store = _store(tmp_path / "s.zarr", list(BATCHES))
    store.remove_batch("b")
    codec = _codec(DIM, 1)
    copy = create_coded_store(tmp_path / "copy.zarr", codec, rows_per_chunk=CHUNK)
    with pytest.raises(StoreError) as refused, CopyWriter(copy, store):
        pass
    message = str(refused.value)
    assert message.startswith(f"store {store.path}: removed batches ['b'] still have their rows")
    assert open_store(copy.path).committed_rows == 0


def test_a_store_written_before_tombstones_loses_its_first_batch_exactly(tmp_path):
    # tests/fixtures/pq-store-v2 was written at 7b97115 (tests/storage/test_pq_fixture.py): two
    # batches, 'first' of rows 0-199 and 'second' of rows 200-299; beside it, what it reads.
    fixtures = Path(__file__).parents[1] / "fixtures"
    shutil.copytree(fixtures / "pq-store-v2", tmp_path / "old")
    store = open_store(tmp_path / "old")
    assert store.info()["removed_batches"] == [] and store.committed_rows == 300
    assert store.remove_batch("first") == 200
    store = open_store(tmp_path / "old")
    codes = np.load(fixtures / "pq-store-v2-codes.npy")[200:]
    features = np.load(fixtures / "pq-store-v2-features.npy")[200:]
    np.testing.assert_array_equal(store.codes().compute(), codes)
    # Decoded through the rotation: equal to the rounding of a float32 product.
    np.testing.assert_allclose(store.features().compute(), features, rtol=0, atol=1e-5)
    assert store.committed_rows == 100 and store.ids()[-1] == "s99"
    assert [b["batch_id"] for b in store.batches()] == ["second"]
    store.verify()
