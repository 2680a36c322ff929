"""A writer SIGKILLed at any moment leaves the store as it was, and the next writer succeeds."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from imgscale.storage import FeatureStore, create_store
from tests.conftest import wait_for_report
from tests.storage.conftest import random_rows, snapshot

BLOCKS, BLOCK_ROWS, DIM = 40, 23, 8

# The child appends one batch of BLOCKS blocks and reports progress in a file, so the parent can
# kill it at a chosen moment. "pause_before_commit" holds it after the rows file is written and
# just before the commit record, the narrowest window.
CHILD = f"""
import sys, time
import numpy as np
import imgscale.storage.writer
from imgscale.storage import open_store

store_path, progress, mode = sys.argv[1:]
def report(text):
    with open(progress, "a") as f:
        f.write(text + "\\n")

if mode == "pause_before_commit":
    def stalled_commit(path, record):
        report("committing")
        time.sleep(60)
    imgscale.storage.writer.write_record = stalled_commit

store = open_store(store_path)
# Without sleeps the child needs more blocks to still be writing when the kill lands.
blocks = {BLOCKS} * (10 if mode == "no_sleep" else 1)
X = np.random.default_rng(99).normal(size=(blocks * {BLOCK_ROWS}, {DIM}))
with store.writer("big") as w:
    report("started")
    for k in range(blocks):
        w.write(X[k * {BLOCK_ROWS}:(k + 1) * {BLOCK_ROWS}])
        report(f"block {{k + 1}}")
        if mode != "no_sleep":
            time.sleep(0.01)
    if mode == "pause_before_exit":
        report("all written")
        time.sleep(60)
"""


def _kill_writer_at(
    tmp_path: Path, store: FeatureStore, mode: str, line: str, delay: float
) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    progress = tmp_path / f"progress-{mode}-{line}"
    child = subprocess.Popen([sys.executable, str(script), str(store.path), str(progress), mode])
    try:
        wait_for_report(progress, line, child, timeout=30, who="writer")
        time.sleep(delay)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()


KILL_POINTS = {
    "after_1_block": ("slow", "block 1", 0.0),
    "after_7_blocks": ("slow", "block 7", 0.0),
    "after_30_blocks": ("slow", "block 30", 0.0),
    "mid_write_a": ("no_sleep", "started", 0.1),
    "mid_write_b": ("no_sleep", "block 200", 0.023),
    "all_written_before_exit": ("pause_before_exit", "all written", 0.0),
    "rows_file_written_before_commit": ("pause_before_commit", "committing", 0.0),
}


@pytest.mark.slow
@pytest.mark.parametrize("point", KILL_POINTS, ids=list(KILL_POINTS))
def test_killed_writer_leaves_store_unchanged_and_next_append_works(
    tmp_path: Path, point: str
) -> None:
    store = create_store(tmp_path / "s.zarr", DIM, rows_per_chunk=50)
    first = random_rows(75, 0, dim=DIM)  # tail chunk half full: the child rewrites it
    store.append("first", first)
    before = snapshot(store)

    _kill_writer_at(tmp_path, store, *KILL_POINTS[point])

    assert snapshot(store) == before
    with open(store.path / ".lock") as f:  # the dead writer's lock went with it
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    after = random_rows(60, 1, dim=DIM)
    assert store.append("after", after) == 60
    fresh = FeatureStore(store.path)
    np.testing.assert_array_equal(fresh.features().compute(), np.concatenate([first, after]))
    assert list(fresh.ids()[75:78]) == ["after:0", "after:1", "after:2"]
    assert not list(store.path.rglob("*.partial"))
    fresh.verify()
