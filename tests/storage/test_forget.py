"""Forgetting single rows (issue 45, "Forget one image"): every read of a store with rows
forgotten equals the same read of a store built without those rows, `info` counts them and the
bytes they still hold, a bad id changes nothing, and a writer killed with SIGKILL mid-forget
leaves the old store or the new one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from imgscale.storage import (
    CopyWriter,
    StoreError,
    create_store,
    export_rows,
    forget_rows,
    open_store,
)
from tests.conftest import wait_for_report
from tests.storage.conftest import random_rows

DIM, CHUNK = 5, 8
BATCHES = {"a": (13, "train"), "b": (11, "train"), "c": (9, "test")}
# Forgotten rows: the first row of the store, rows inside and at the end of a middle batch.
FORGET = ["a:0", "b:4", "b:10", "c:3"]


def _batch(name: str, seed: int):
    n, split = BATCHES[name]
    labels = np.random.default_rng(seed).integers(-1, 3, n)
    splits = np.where(np.arange(n) % 3 == 0, "val", split)
    ids = np.array([f"{name}:{i}" for i in range(n)])
    return random_rows(n, seed, DIM), labels, ids, splits


def _store(path: Path, without: list[str] = ()):
    """The store of `BATCHES`, built without the rows whose ids are in ``without``."""
    store = create_store(path, DIM, class_names=["x", "y", "z"], rows_per_chunk=CHUNK)
    for seed, name in enumerate(BATCHES):
        X, labels, ids, splits = _batch(name, seed)
        keep = ~np.isin(ids, list(without))
        store.append(name, X[keep], labels[keep], ids=ids[keep], split=splits[keep])
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
        "labels": labels.tolist(),
        "ids": store.ids().tolist(),
        "rows": store.rows().to_pylist(),
        "has_ids": store.has_ids(["a:0", "a:1", "b:4"]).tolist(),
        "info": {k: info[k] for k in ("rows", "splits", "label_counts", "batches")},
        "split_counts": store.split_counts(),
        "batch_rows": [b["rows"] for b in store.batches()],
    }


def test_forgotten_rows_read_as_a_store_built_without_them(tmp_path):
    store = _store(tmp_path / "s.zarr")
    assert forget_rows(store, FORGET[:2], reason="mislabelled") == 2
    assert store.forget(FORGET[2:]) == 2
    reference = _store(tmp_path / "ref.zarr", FORGET)
    assert _reads(store) == _reads(reference)
    info = open_store(store.path).info()
    assert info["forgotten_rows"] == 4
    assert info["forgotten_bytes_on_disk"] == 4 * DIM * 4
    # Models record each batch's forgotten count, in the order the rows were forgotten.
    assert [b["forgotten"] for b in open_store(store.path).batches()] == [1, 2, 1]
    record = json.loads((store.path / "zarr.json").read_text())["attributes"]["imgscale"]
    assert [b.get("forgotten") for b in record["batches"]] == [[0], [4, 10], [3]]
    assert [f["reason"] for f in record["forgets"]] == ["mislabelled", ""]
    for path, out in ((store.path, "s.npz"), (reference.path, "ref.npz")):
        export_rows(open_store(path), tmp_path / out)
    with np.load(tmp_path / "s.npz") as got, np.load(tmp_path / "ref.npz") as expected:
        for key in ("X", "y", "ids", "splits"):
            np.testing.assert_array_equal(got[key], expected[key])


def test_a_forgotten_id_can_be_committed_again_in_a_new_batch(tmp_path):
    store = _store(tmp_path / "s.zarr")
    store.forget(["b:4"])
    store.append("again", random_rows(1, 7, DIM), [1], ids=["b:4"])
    assert open_store(store.path).ids().tolist().count("b:4") == 1
    assert open_store(store.path).ids()[-1] == "b:4"


def store_of_six_digests(tmp_path, digests: np.ndarray):
    """A store of six rows i0..i5 in batch "a", row k with content digest ``digests[k]``."""
    store = create_store(tmp_path / "s.zarr", DIM, rows_per_chunk=CHUNK)
    with store.writer("a") as w:
        w.write(
            random_rows(6, 0, DIM),
            np.zeros(6, int),
            ids=[f"i{k}" for k in range(6)],
            sha256=digests,
        )
    return store


def test_forgetting_by_content_digest(tmp_path):
    digests = np.random.default_rng(0).integers(0, 256, (6, 32), dtype=np.uint8)
    store = store_of_six_digests(tmp_path, digests)
    assert store.forget(sha256=[bytes(digests[2]).hex()]) == 1
    assert open_store(store.path).ids().tolist() == ["i0", "i1", "i3", "i4", "i5"]


def test_forgetting_a_digest_whose_rows_are_all_forgotten_is_refused_and_changes_nothing(
    tmp_path,
):
    digests = np.random.default_rng(0).integers(0, 256, (6, 32), dtype=np.uint8)
    digests[4] = digests[2]  # one image committed twice, as two rows
    store = store_of_six_digests(tmp_path, digests)
    twice = bytes(digests[2]).hex()
    assert store.forget(sha256=[twice]) == 2
    before = _reads(store), store.path.joinpath("zarr.json").read_bytes()
    refused = subprocess.run(
        [sys.executable, "-m", "imgscale", "forget", str(store.path), "--sha256", twice],
        capture_output=True,
        text=True,
    )
    assert refused.returncode != 0
    assert refused.stderr.strip().splitlines() == [
        f"imgscale: error: store {store.path}: sha256 {twice} is already forgotten; "
        "nothing was forgotten"
    ]
    # Not even a record of a forget of no rows is committed.
    assert (_reads(store), store.path.joinpath("zarr.json").read_bytes()) == before
    # A digest of live rows beside it is refused with it: nothing is forgotten.
    with pytest.raises(StoreError, match="is already forgotten"):
        store.forget(sha256=[bytes(digests[0]).hex(), twice])
    assert (_reads(store), store.path.joinpath("zarr.json").read_bytes()) == before


@pytest.mark.parametrize(
    ("ids", "digests", "expected"),
    [
        (["a:1", "nope"], [], "id 'nope' names no live row; nothing was forgotten"),
        (["a:0"], [], "id 'a:0' is already forgotten; nothing was forgotten"),
        ([], ["zz"], "sha256 'zz' is not 64 hexadecimal digits; nothing was forgotten"),
        ([], ["00" * 32], f"sha256 {'00' * 32} names no live row"),
    ],
)
def test_an_id_that_names_no_live_row_is_refused_and_nothing_changes(
    tmp_path, ids, digests, expected
):
    store = _store(tmp_path / "s.zarr")
    store.forget(["a:0"])
    before = _reads(store)
    with pytest.raises(StoreError) as refused:
        store.forget(ids, sha256=digests)
    message = str(refused.value)
    assert message.startswith(f"store {store.path}: ") and expected in message
    assert "\n" not in message
    assert _reads(store) == before


def test_a_removed_batch_keeps_its_forgotten_rows_in_its_tombstone(tmp_path):
    store = _store(tmp_path / "s.zarr")
    store.forget(["b:4"])
    store.remove_batch("b")
    record = json.loads((store.path / "zarr.json").read_text())["attributes"]["imgscale"]
    assert record["removed"][0]["forgotten"] == [4]
    assert _reads(store)["ids"] == [f"a:{i}" for i in range(13)] + [f"c:{i}" for i in range(9)]


def test_a_chunk_copy_of_a_store_with_forgotten_rows_on_disk_is_refused_by_name(tmp_path):
    store = _store(tmp_path / "s.zarr")
    store.forget(["b:4"])
    copy = create_store(tmp_path / "copy.zarr", DIM, rows_per_chunk=CHUNK)
    with pytest.raises(StoreError) as refused, CopyWriter(copy, store):
        pass
    assert str(refused.value).startswith(
        f"store {store.path}: the forgotten rows of batches ['b'] still have their rows"
    )
    assert open_store(copy.path).committed_rows == 0


def test_an_imgscale_before_forgetting_refuses_the_store_by_its_schema_version(tmp_path):
    store = _store(tmp_path / "s.zarr")
    store.forget(["b:4"])
    record = json.loads((store.path / "zarr.json").read_text())["attributes"]["imgscale"]
    # One version past a store without tombstones: an older reader refuses it by that number.
    assert record["schema_version"] == 2 and "removed" not in record


CHILD = """
import sys, time
from imgscale.storage import forget as forget_module, open_store

path, progress = sys.argv[1:]
def paused(*args, **kwargs):
    with open(progress, "a") as f:
        f.write("paused\\n")
    time.sleep(60)

forget_module.write_record = paused
open_store(path).forget(["b:4"])
"""


def test_a_sigkill_mid_forget_leaves_the_old_store(tmp_path):
    store = _store(tmp_path / "s.zarr")
    before = _reads(store)
    script, progress = tmp_path / "child.py", tmp_path / "progress"
    script.write_text(CHILD)
    child = subprocess.Popen([sys.executable, str(script), str(store.path), str(progress)])
    try:
        wait_for_report(progress, "paused", child, timeout=60, who="forgetter")
        time.sleep(0.05)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    assert _reads(store) == before
    # The lock died with the child: the next forget commits.
    assert store.forget(["b:4"]) == 1
    assert _reads(store) == _reads(_store(tmp_path / "ref.zarr", ["b:4"]))


def test_forget_command_forgets_and_refuses_in_one_line(tmp_path):
    store = _store(tmp_path / "s.zarr")
    imgscale = [sys.executable, "-m", "imgscale"]
    done = subprocess.run(
        [*imgscale, "forget", str(store.path), "a:3", "c:0", "--json"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"rows": 2}
    refused = subprocess.run(
        [*imgscale, "forget", str(store.path), "a:3"], capture_output=True, text=True
    )
    assert refused.returncode != 0
    assert refused.stderr.strip().splitlines() == [
        f"imgscale: error: store {store.path}: id 'a:3' is already forgotten; nothing was forgotten"
    ]
    assert _reads(store) == _reads(_store(tmp_path / "ref.zarr", ["a:3", "c:0"]))
