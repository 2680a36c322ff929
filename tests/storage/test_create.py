"""Storage verbs other layers use instead of store internals: create-or-open with cleanup,
PQ statistics in the commit record, atomic model replacement, the file lock."""

from __future__ import annotations

import subprocess
import sys
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from imgscale.pipeline.pq import PQCodec
from imgscale.storage import (
    FileLock,
    SavedStep,
    StoreError,
    create_coded_store,
    create_or_open,
    create_store,
    load_model,
    open_store,
    save_model,
)
from imgscale.storage.layout import read_record
from tests.storage.conftest import DIM, random_rows

make = partial(create_store, dim=DIM, rows_per_chunk=64)


class Planted(Exception):
    pass


def test_a_created_store_is_removed_when_the_first_write_fails(tmp_path):
    path = tmp_path / "s.zarr"
    with pytest.raises(Planted), create_or_open(path, make) as (store, created):
        assert created and store.committed_rows == 0
        raise Planted
    assert not path.exists()
    assert list(tmp_path.iterdir()) == []


def test_an_empty_directory_given_stays_after_a_failed_first_write(tmp_path):
    path = tmp_path / "s.zarr"
    path.mkdir()
    with pytest.raises(Planted), create_or_open(path, make) as (_, created):
        assert created
        raise Planted
    assert path.is_dir() and not any(path.iterdir())


def test_an_existing_store_is_opened_and_kept_when_the_block_fails(tmp_path):
    path = tmp_path / "s.zarr"
    make(path).append("first", random_rows(10, 0))
    with pytest.raises(Planted), create_or_open(path, make) as (store, created):
        assert not created and store.committed_rows == 10
        raise Planted
    assert open_store(path).committed_rows == 10


def test_a_created_store_with_rows_committed_meanwhile_is_kept(tmp_path):
    path = tmp_path / "s.zarr"
    with pytest.raises(Planted), create_or_open(path, make):
        open_store(path).append("other", random_rows(5, 1))
        raise Planted
    assert open_store(path).committed_rows == 5


def test_an_existing_store_is_refused_without_exist_ok(tmp_path):
    path = tmp_path / "s.zarr"
    make(path).append("first", random_rows(10, 0))
    before = read_record(path)
    with pytest.raises(StoreError, match="refusing to overwrite"):
        with create_or_open(path, make, exist_ok=False):
            pass
    assert read_record(path) == before


def test_a_creator_failing_half_way_leaves_neither_store_nor_scratch(tmp_path):
    path = tmp_path / "s.zarr"

    def half_way(scratch: Path):
        make(scratch)
        raise Planted

    with pytest.raises(Planted), create_or_open(path, half_way):
        pass
    assert list(tmp_path.iterdir()) == []


def test_no_creation_lock_stays_beside_a_created_store(tmp_path):
    with create_or_open(tmp_path / "s.zarr", make) as (store, created):
        store.append("first", random_rows(3, 0))
    assert created
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.zarr"]


def test_the_lock_of_a_creator_killed_while_holding_it_neither_blocks_nor_stays(tmp_path):
    lock = tmp_path / ".s.zarr.create.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from imgscale.storage import FileLock; "
         f"FileLock({str(lock)!r}).acquire(); print('held', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline() == "held\n"
        assert not FileLock(lock).acquire(blocking=False)  # held by the creator's process
    finally:
        holder.kill()
        holder.wait()
    assert lock.exists()
    with create_or_open(tmp_path / "s.zarr", make) as (_, created):
        assert created
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.zarr"]


CREATOR = """
import sys
from functools import partial
import numpy as np
from imgscale.storage import create_or_open, create_store
make = partial(create_store, dim={dim}, rows_per_chunk=64)
with create_or_open(sys.argv[1], make) as (store, created):
    store.append(sys.argv[2], np.full((4, {dim}), float(sys.argv[3]), np.float32))
print(created)
"""


def test_concurrent_creators_make_one_store_hold_every_batch_and_leave_no_lock(tmp_path):
    path = tmp_path / "s.zarr"
    code = CREATOR.format(dim=DIM)
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    creators = [
        subprocess.Popen([sys.executable, "-c", code, str(path), f"b{i}", str(i)], **pipes)
        for i in range(4)
    ]
    outputs = [c.communicate(timeout=120) for c in creators]
    assert [c.returncode for c in creators] == [0] * 4, [err for _, err in outputs]
    assert sorted(out.strip() for out, _ in outputs) == ["False", "False", "False", "True"]
    store = open_store(path)
    assert store.committed_rows == 16
    assert sorted(b["batch_id"] for b in store.batches()) == ["b0", "b1", "b2", "b3"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.zarr"]


def test_pq_statistics_are_kept_in_the_record_beside_the_codec(tmp_path):
    X = random_rows(300, 2, dim=8)
    store = create_coded_store(tmp_path / "pq.zarr", PQCodec.train(X, 4, niter=2))
    store.append("first", store.codec.encode(X))
    store.record_pq_statistics(mse=0.25, relative_mse=0.5)
    record = read_record(store.path)
    assert record["pq"]["mse"] == 0.25 and record["pq"]["relative_mse"] == 0.5
    assert record["pq"]["m"] == 4 and record["committed_rows"] == 300


def _steps(value: float) -> list[SavedStep]:
    return [SavedStep("Kind", {"a": 1}, {"coef_": np.full((2, 3), value)}, {})]


def test_replacing_a_model_swaps_in_the_new_one(tmp_path):
    path = tmp_path / "m"
    save_model(path, _steps(1.0), {"n": 1})
    save_model(path, _steps(2.0), {"n": 2}, replace=True)
    steps, provenance = load_model(path)
    assert provenance == {"n": 2}
    np.testing.assert_array_equal(steps[0].arrays["coef_"], np.full((2, 3), 2.0))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_a_failed_replacement_leaves_the_old_model(tmp_path):
    path = tmp_path / "m"
    save_model(path, _steps(1.0), {"n": 1})
    unsavable = [SavedStep("Kind", {"a": object()}, {}, {})]
    with pytest.raises(TypeError):
        save_model(path, unsavable, {"n": 2}, replace=True)
    steps, provenance = load_model(path)
    assert provenance == {"n": 1}
    np.testing.assert_array_equal(steps[0].arrays["coef_"], np.full((2, 3), 1.0))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_only_a_model_is_replaced(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "keep.txt").write_text("mine")
    with pytest.raises(StoreError, match="not an imgscale model"):
        save_model(tmp_path / "data", _steps(1.0), {}, replace=True)
    assert (tmp_path / "data" / "keep.txt").read_text() == "mine"


def test_a_file_lock_is_exclusive_across_processes_and_dies_with_its_holder(tmp_path):
    file = tmp_path / "x.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time\n"
         f"fd = os.open({str(file)!r}, os.O_RDWR | os.O_CREAT); fcntl.flock(fd, fcntl.LOCK_EX)\n"
         "print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        assert FileLock(file).acquire(blocking=False) is False
    finally:
        holder.kill()
        holder.wait()
    lock = FileLock(file)
    assert lock.acquire(blocking=False) is True
    lock.release()
