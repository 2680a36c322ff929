"""Stores and models on an S3-compatible server (moto, a process on 127.0.0.1): the same rows as
on a local disk, and the commit protocol's guarantees where nothing renames and nothing locks
(storage/commit_log.py): a writer killed before its commit changes nothing and the next writer
proceeds; of writers racing for one commit number one wins and the other gets one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import dask.array as da
import fsspec
import numpy as np
import pytest

from imgscale.storage import (
    SavedStep,
    StoreError,
    commit_log,
    create_store,
    load_model,
    location,
    open_store,
    save_model,
)
from imgscale.storage.layout import read_record, write_record
from tests.conftest import wait_for_report

RNG = np.random.default_rng(0)
X1 = RNG.standard_normal((7, 4)).astype(np.float32)
X2 = RNG.standard_normal((5, 4)).astype(np.float32)
Y1 = np.array([0, 1, 0, 1, 0, 1, 0])
Y2 = np.array([1, 1, 0, 0, 1])


def _filled(path):
    store = create_store(path, 4, rows_per_chunk=3, class_names=["a", "b"])
    store.append("b1", X1, labels=Y1)
    store.append("b2", X2, labels=Y2, split="test")
    return store


def _keys(url: str, folder: str) -> list[str]:
    fs = fsspec.filesystem("s3")
    fs.invalidate_cache()
    return sorted(k.rsplit("/", 1)[-1] for k in fs.find(f"{url}/{folder}"))


def test_a_store_on_s3_holds_what_a_local_store_holds(s3_bucket, tmp_path):
    _filled(f"{s3_bucket}/a.zarr")
    local = _filled(tmp_path / "a.zarr")
    reopened = open_store(f"{s3_bucket}/a.zarr")
    np.testing.assert_array_equal(reopened.features().compute(), np.concatenate([X1, X2]))
    assert reopened.rows().equals(local.rows())
    assert reopened.class_names == ["a", "b"]
    np.testing.assert_array_equal(reopened.labels("test"), Y2)
    reopened.verify()
    info, expected = reopened.info(), local.info()
    assert {k: v for k, v in info.items() if k != "bytes_on_disk"} == {
        k: v for k, v in expected.items() if k != "bytes_on_disk"
    }
    # Three commits, each a create-only record: creation, then one per batch.
    assert _keys(s3_bucket + "/a.zarr", "commits") == [f"{n:012d}.json" for n in range(3)]
    assert reopened.remove_batch("b2") == 5
    np.testing.assert_array_equal(open_store(f"{s3_bucket}/a.zarr").features().compute(), X1)
    assert _keys(s3_bucket + "/a.zarr", "claims") == []  # every claim was released


def test_only_the_latest_commit_records_are_kept(s3_bucket, monkeypatch):
    monkeypatch.setattr(commit_log, "KEEP_COMMITS", 2)
    url = f"{s3_bucket}/p.zarr"
    store = create_store(url, 4, rows_per_chunk=3)
    for i in range(4):
        store.append(f"b{i}", X1 + i)
    assert _keys(url, "commits") == [f"{n:012d}.json" for n in (3, 4)]
    expected = np.concatenate([X1 + i for i in range(4)])
    np.testing.assert_array_equal(open_store(url).features().compute(), expected)


def test_a_prefix_without_a_commit_is_not_a_store(s3_bucket):
    fsspec.filesystem("s3").pipe_file(f"{s3_bucket}/half.zarr/zarr.json", b"{}")
    with pytest.raises(StoreError, match=r"half.zarr: no commits/ record"):
        open_store(f"{s3_bucket}/half.zarr")


# The child opens the store, writes a batch (row chunks and rows file) and stops at the commit:
# `write_commit` reports and sleeps, so the parent kills it with everything but the commit done.
KILLED_WRITER = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    import imgscale.storage.layout as layout
    from imgscale.storage import open_store

    url, progress = sys.argv[1], sys.argv[2]

    def stall(path, record):
        with open(progress, "a") as f:
            f.write("committing\\n")
        time.sleep(600)

    layout.write_commit = stall
    store = open_store(url)
    store.append("doomed", np.full((8, 4), 7.0, np.float32), labels=np.zeros(8, int))
    """
)


@pytest.mark.slow
def test_a_writer_killed_mid_commit_leaves_the_previous_commit_and_the_next_writer_proceeds(
    s3_bucket, tmp_path
):
    url = f"{s3_bucket}/k.zarr"
    store = _filled(url)
    before = store.features().compute()
    progress = tmp_path / "progress"
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, url, str(progress)], env=os.environ.copy()
    )
    try:
        wait_for_report(progress, "committing", child, timeout=120, who="the writer")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    # The dead writer's claim and rows file are there; its rows are not committed.
    assert len(_keys(url, "claims")) == 1
    assert "000000000012.parquet" in _keys(url, "rows")
    reopened = open_store(url)
    assert reopened.committed_rows == 12
    np.testing.assert_array_equal(reopened.features().compute(), before)
    reopened.verify()
    # The next writer sees the claim's process gone, takes over, and clears what it left.
    X3 = np.arange(8, dtype=np.float32).reshape(2, 4)
    assert reopened.append("next", X3, labels=[1, 0]) == 2
    after = open_store(url)
    np.testing.assert_array_equal(after.features().compute(), np.concatenate([before, X3]))
    assert [b["batch_id"] for b in after.info()["batches"]] == ["b1", "b2", "next"]
    after.verify()
    assert _keys(url, "claims") == []


def test_two_writers_racing_for_one_commit_one_wins_the_other_gets_one_line(s3_bucket):
    url = f"{s3_bucket}/r.zarr"
    store = _filled(url)
    with store.writer("first") as first:
        first.write(X1, labels=Y1)
        with pytest.raises(StoreError) as refused:
            with open_store(url).writer("second") as second:
                second.write(X2, labels=Y2)
        message = str(refused.value)
        assert "\n" not in message
        assert "another writer is writing commit 3" in message and f"pid {os.getpid()}" in message
    assert open_store(url).info()["batches"][-1]["batch_id"] == "first"
    # Later the second writer proceeds.
    assert open_store(url).append("second", X2, labels=Y2) == 5
    assert open_store(url).committed_rows == 24


# The child holds the claim on the next commit, stopped just before its commit until told to go.
STALLED_WRITER = textwrap.dedent(
    """
    import os, sys, time
    import numpy as np
    import imgscale.storage.layout as layout
    from imgscale.storage import open_store

    url, progress, go = sys.argv[1], sys.argv[2], sys.argv[3]
    commit = layout.write_commit

    def stall(path, record):
        with open(progress, "a") as f:
            f.write("committing\\n")
        while not os.path.exists(go):
            time.sleep(0.05)
        commit(path, record)

    layout.write_commit = stall
    open_store(url).append("child", np.full((8, 4), 7.0, np.float32), labels=np.zeros(8, int))
    """
)


@pytest.mark.slow
def test_a_cli_writer_racing_another_process_for_its_commit_fails_in_one_line(s3_bucket, tmp_path):
    url = f"{s3_bucket}/race.zarr"
    _filled(url)
    progress, go = tmp_path / "progress", tmp_path / "go"
    child = subprocess.Popen(
        [sys.executable, "-c", STALLED_WRITER, url, str(progress), str(go)], env=os.environ.copy()
    )
    try:
        wait_for_report(progress, "committing", child, timeout=120, who="the writer")
        np.savez(tmp_path / "more.npz", X=X2, y=Y2)
        imgscale = [str(Path(sys.executable).with_name("imgscale")), "ingest"]
        args = [*imgscale, str(tmp_path / "more.npz"), url, "--y-key", "y"]
        lost = subprocess.run(args, capture_output=True, text=True, timeout=300)
        assert lost.returncode == 1
        assert lost.stderr.count("\n") == 1, lost.stderr
        assert "another writer is writing commit 3" in lost.stderr
        assert f"pid {child.pid}" in lost.stderr
        go.touch()
        assert child.wait(timeout=120) == 0
    finally:
        child.kill()
    assert open_store(url).info()["batches"][-1]["batch_id"] == "child"
    assert subprocess.run(args, capture_output=True, timeout=300).returncode == 0
    assert open_store(url).committed_rows == 12 + 8 + 5


def test_the_commit_record_is_created_only_once_by_the_server(s3_bucket):
    """Two records built on the same commit: the server refuses the second PUT."""
    url = location(f"{s3_bucket}/c.zarr")
    _filled(url)
    base = read_record(url)
    first, second = dict(base), dict(base)
    first["pq"] = {"note": "first"}
    write_record(url, first)
    with pytest.raises(StoreError, match="commit 3 was made by another writer first"):
        write_record(url, second)
    committed = json.loads(
        fsspec.filesystem("s3").cat_file(f"{url.path}/commits/000000000003.json")
    )
    assert committed["pq"] == {"note": "first"}
    assert read_record(url)["commit"] == 3


def test_a_model_on_s3_loads_as_saved_and_is_replaced_whole(s3_bucket, tmp_path):
    weights = RNG.standard_normal((3, 5))
    reference = da.from_array(RNG.standard_normal((10, 2)), chunks=4)
    steps = [SavedStep("NearestClassMean", {"a": 1}, {"w": weights, "r": reference}, {"s": 2})]
    url = f"{s3_bucket}/m.model"
    save_model(url, steps, {"run": 1})
    loaded, provenance = load_model(url)
    np.testing.assert_array_equal(loaded[0].arrays["w"], weights)
    np.testing.assert_array_equal(loaded[0].arrays["r"], reference.compute())
    assert provenance == {"run": 1}
    with pytest.raises(StoreError, match="already exists"):
        save_model(url, steps, {"run": 2})
    steps[0].arrays["w"] = weights + 1
    save_model(url, steps, {"run": 2}, replace=True)
    loaded, provenance = load_model(url)
    np.testing.assert_array_equal(loaded[0].arrays["w"], weights + 1)
    assert provenance == {"run": 2}
    # One version of the arrays is left: the old one went after the new root was written.
    versions = {k.split("/")[2] for k in fsspec.filesystem("s3").find(f"{url[5:]}")}
    assert len(versions - {"zarr.json"}) == 1


def test_an_object_store_without_an_atomic_create_is_refused_before_writing():
    from imgscale.storage.fs import put_object

    with pytest.raises(StoreError, match=r"http:// has no atomic create-only write"):
        put_object(location("http://127.0.0.1:1/x.zarr/commits/0.json"), b"{}", create_only=True)
