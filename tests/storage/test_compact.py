"""Compaction (issue 45): a store rewritten without its removed and forgotten rows reads exactly
as before, holds fewer bytes, keeps its batches' ids, digests and forgotten counts, and a
process killed with SIGKILL at any point of the rewrite leaves the old store or the new one."""

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

from imgscale.storage import compact_store, open_store
from imgscale.storage.fs import tree_bytes
from tests.conftest import wait_for_report
from tests.storage.test_forget import _reads, _store
from tests.storage.test_remove_batch_any import _codec, _pq_store

SCRATCH = ".compacting-"


def _changed(path: Path):
    """The store of test_forget with rows forgotten and its middle batch removed."""
    store = _store(path)
    store.forget(["a:0", "c:3", "c:8"])
    store.remove_batch("b")
    return store


def test_a_compacted_store_reads_as_before_and_holds_fewer_bytes(tmp_path):
    store = _changed(tmp_path / "s.zarr")
    before, batches = _reads(store), open_store(store.path).batches()
    info = open_store(store.path).info()
    assert info["removed_rows_on_disk"] == 11 and info["forgotten_rows"] == 3
    summary = compact_store(store.path)
    assert summary["rows_dropped"] == 11 + 3 and summary["batches"] == 2
    assert summary["bytes_after"] < summary["bytes_before"]
    store = open_store(store.path)
    assert _reads(store) == before
    # Models refer to these: ids, digests and forgotten counts are as they were.
    assert store.batches() == batches
    info = store.info()
    assert info["removed_batches"] == [] and info["removed_rows_on_disk"] == 0
    assert info["forgotten_rows"] == 0 and info["forgotten_bytes_on_disk"] == 0
    record = json.loads((store.path / "zarr.json").read_text())["attributes"]["imgscale"]
    assert record["committed_rows"] == 13 - 1 + 9 - 2
    assert sorted(p.name for p in (store.path / "rows").iterdir()) == [
        "000000000000.parquet",
        "000000000012.parquet",
    ]
    assert not list(tmp_path.glob(f"*{SCRATCH}*"))
    # It takes rows again, and compacting a store with nothing to drop changes nothing.
    store.append("d", np.ones((2, 5), np.float32), [0, 1])
    assert compact_store(store.path)["rows_dropped"] == 0


def test_a_coded_store_compacts_its_codes(tmp_path):
    codec = _codec(10, 2)
    store = _pq_store(tmp_path / "pq.zarr", codec, ["a", "b", "c", "d"])
    store.forget(["b:1"])
    store.remove_batch("c")
    codes, features = store.codes().compute(), store.features().compute()
    compact_store(store.path)
    store = open_store(store.path)
    np.testing.assert_array_equal(store.codes().compute(), codes)
    np.testing.assert_array_equal(store.features().compute(), features)
    assert store.info()["removed_rows_on_disk"] == 0
    store.verify()


# The child compacts and stops, reporting, at a point of the rewrite: after the first batch is
# written to the scratch store, just before the swap, or just after it (before the old store
# is deleted).
CHILD = """
import sys, time
from imgscale.storage import compact as compact_module, compact_store

path, progress, point = sys.argv[1:]
def pause():
    with open(progress, "a") as f:
        f.write("paused\\n")
    time.sleep(60)

real_rows, real_exchange = compact_module._batch_rows, compact_module._exchange
calls = []
def batch_rows(*args):
    calls.append(1)
    if point == "mid_build" and len(calls) == 2:
        pause()
    return real_rows(*args)
def exchange(*args):
    if point == "before_swap":
        pause()
    real_exchange(*args)
    if point == "after_swap":
        pause()
compact_module._batch_rows, compact_module._exchange = batch_rows, exchange
compact_store(path)
"""


@pytest.mark.parametrize("point", ["mid_build", "before_swap", "after_swap"])
def test_a_sigkill_mid_compaction_leaves_the_old_or_the_new_store(tmp_path, point):
    store = _changed(tmp_path / "s.zarr")
    reads, size = _reads(store), tree_bytes(store.path)
    script, progress = tmp_path / "child.py", tmp_path / "progress"
    script.write_text(CHILD)
    child = subprocess.Popen([sys.executable, str(script), str(store.path), str(progress), point])
    try:
        wait_for_report(progress, "paused", child, timeout=60, who="compactor")
        time.sleep(0.05)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    assert _reads(open_store(store.path)) == reads
    info = open_store(store.path).info()
    assert (info["removed_rows_on_disk"] == 0) == (point == "after_swap")
    assert (tree_bytes(store.path) < size) == (point == "after_swap")
    assert len(list(tmp_path.glob(f"*{SCRATCH}*"))) == 1  # the scratch store, or the old one
    # The next writer is not stopped by the dead one's lock; the next compaction sweeps.
    store = open_store(store.path)
    store.append("e", np.ones((2, 5), np.float32), [0, 1])
    compact_store(store.path)
    assert not list(tmp_path.glob(f"*{SCRATCH}*"))
    assert open_store(store.path).info()["removed_rows_on_disk"] == 0
    assert _reads(open_store(store.path))["ids"] == [*reads["ids"], "e:0", "e:1"]


def test_compact_command(tmp_path):
    store = _changed(tmp_path / "s.zarr")
    imgscale = [sys.executable, "-m", "imgscale"]
    done = subprocess.run(
        [*imgscale, "compact", str(store.path), "--json"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["rows_dropped"] == 14 and summary["bytes_after"] < summary["bytes_before"]
