"""`imgscale schedule`: intervals and cron times, a lock a dead holder cannot keep, and two
schedulers started at once embedding each row exactly once."""

from __future__ import annotations

import datetime as dt
import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from imgscale.jobs import models
from imgscale.jobs.schedule import (
    CronSchedule,
    default_lock_path,
    parse_every,
    run_once_locked,
    run_times,
)
from imgscale.pipeline.embed import ALE
from imgscale.storage import create_store, open_store

IMGSCALE = str(Path(sys.executable).with_name("imgscale"))


@pytest.mark.parametrize(
    ("text", "seconds"), [("90s", 90), ("10m", 600), ("1.5h", 5400), ("2d", 172800), ("30", 30)]
)
def test_intervals_parse_with_units(text, seconds):
    assert parse_every(text) == seconds


@pytest.mark.parametrize("text", ["", "0m", "-5m", "10 minutes", "m"])
def test_bad_intervals_are_rejected(text):
    with pytest.raises(ValueError, match="interval"):
        parse_every(text)


THURSDAY = dt.datetime(2026, 1, 1, 12, 3, 30)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("*/10 * * * *", dt.datetime(2026, 1, 1, 12, 10)),
        ("5 * * * *", dt.datetime(2026, 1, 1, 12, 5)),
        ("0 * * * *", dt.datetime(2026, 1, 1, 13, 0)),
        ("30 2 * * 1", dt.datetime(2026, 1, 5, 2, 30)),  # next Monday
        ("0 0 29 2 *", dt.datetime(2028, 2, 29, 0, 0)),  # next leap day
        ("0 9 1,15 * 0", dt.datetime(2026, 1, 4, 9, 0)),  # day 1 or 15 *or* Sunday, as cron
        ("0-10/5 8-9 * 1-3 7", dt.datetime(2026, 1, 4, 8, 0)),  # 7 is Sunday too
    ],
)
def test_cron_next_time_matches_cron_semantics(expression, expected):
    assert CronSchedule.parse(expression).next_after(THURSDAY) == expected


@pytest.mark.parametrize("expression", ["* * * *", "60 * * * *", "* 24 * * *", "*/0 * * * *"])
def test_bad_cron_expressions_are_rejected(expression):
    with pytest.raises(ValueError, match="cron"):
        CronSchedule.parse(expression)


def test_interval_runs_drop_ticks_missed_while_a_run_was_still_going():
    clock = [1000.0]
    times = run_times(60.0, None, now=lambda: clock[0])
    assert next(times) == 1000.0
    clock[0] = 1000.0 + 150  # the first run took 2.5 intervals
    assert next(times) == 1000.0 + 180


def test_a_turn_is_skipped_while_another_process_holds_the_lock(tmp_path):
    lock = tmp_path / "lock"
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert run_once_locked(["--version"], lock) is None


def test_a_lock_held_by_a_killed_process_is_free_again(tmp_path):
    lock = tmp_path / "lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time; f = open(sys.argv[1], 'w'); fcntl.flock(f, fcntl.LOCK_EX);"
            " print('held', flush=True); time.sleep(60)",
            str(lock),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    assert run_once_locked(["--version"], lock) is None
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    assert run_once_locked(["--version"], lock) == 0


def test_a_scheduler_removes_its_default_lock_file_when_it_ends_unless_a_run_holds_it(tmp_path):
    temp = tmp_path / "temp"
    temp.mkdir()
    lock = temp / default_lock_path(["--version"]).name  # named by the command, in $TMPDIR
    command = [IMGSCALE, "schedule", "--every", "1s", "--max-runs", "1", "--", "--version"]
    env = {**os.environ, "TMPDIR": str(temp)}
    with open(lock, "w") as held:  # another scheduler's run
        fcntl.flock(held, fcntl.LOCK_EX)
        skipped = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
        assert skipped.returncode == 0 and "skipped: another run holds" in skipped.stderr
        assert lock.exists()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "--version: exit 0" in done.stderr, done.stderr
    assert os.listdir(temp) == []


def test_two_schedulers_started_at_once_embed_each_row_once(tmp_path, scheduler_address):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((900, 10)).astype(np.float32)
    src = create_store(tmp_path / "src.zarr", 10, rows_per_chunk=200)
    src.append("first", X)
    model = tmp_path / "ale.model"
    models.save(ALE(n_components=6).fit(X), model)
    dst = tmp_path / "dst.zarr"
    command = [IMGSCALE, "schedule", "--every", "1s", "--max-runs", "2"]
    command += ["--lock", str(tmp_path / "embed.lock"), "--"]
    command += ["embed", str(model), str(src.path), str(dst), "--batch-rows", "100"]
    env = {**os.environ, "DASK_SCHEDULER_ADDRESS": scheduler_address}
    schedulers = [
        subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True) for _ in range(2)
    ]
    # New rows arriving while the schedulers run are picked up by a later turn.
    time.sleep(0.5)
    src.append("second", X[:300] + 1)
    logs = [s.communicate(timeout=120)[1] for s in schedulers]
    assert all(s.returncode == 0 for s in schedulers), logs
    assert sum(log.count("skipped: another run holds") for log in logs) >= 1, logs

    out = open_store(dst)
    assert list(out.ids()) == list(open_store(src.path).ids())  # every row once, in order
    batch_ids = out.rows().column("batch_id").to_pylist()
    assert len(set(batch_ids)) == 1200 // 100
    expected = models.load(model)[0].transform(np.vstack([X, X[:300] + 1]))
    np.testing.assert_array_equal(out.features().compute(), expected)
