"""`imgscale schedule` says when its job failed and refuses cron schedules it cannot keep: a run
that exits non-zero makes the scheduler exit non-zero (it used to exit 0), a step longer than its
field (``*/61``) is refused, and a day no month of the schedule has (``0 0 31 2 *``) is refused in
one line instead of "year 10000 is out of range"."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

IMGSCALE = str(Path(sys.executable).with_name("imgscale"))


def _schedule(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    lock = ["--lock", str(tmp_path / "job.lock")]
    return subprocess.run(
        [IMGSCALE, "schedule", *lock, *args], capture_output=True, text=True, timeout=120
    )


def test_schedule_exits_non_zero_when_its_job_fails(tmp_path: Path) -> None:
    missing = tmp_path / "missing.zarr"
    done = _schedule(tmp_path, "--every", "1s", "--max-runs", "2", "--", "info", str(missing))
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last == (
        "imgscale: error: schedule: 2 of 2 runs of imgscale info failed (the last with exit 2), "
        "0 skipped; expected every run to exit 0"
    )


def test_schedule_exits_zero_when_every_run_succeeds(tmp_path: Path) -> None:
    done = _schedule(tmp_path, "--every", "1s", "--max-runs", "1", "--", "--help")
    assert done.returncode == 0, done.stderr
    assert "exit 0" in done.stderr


@pytest.mark.parametrize(
    ("cron", "expected"),
    [
        (
            "*/61 * * * *",
            "cron minute field '*/61': step 61 in '*/61' is longer than the 60 values 0–59; "
            "expected a step of at most 60",
        ),
        (
            "0 0 31 2 *",
            "cron '0 0 31 2 *': day 31 never falls in month 2; expected a day that some month of "
            "the schedule has",
        ),
        (
            "0 0 30,31 2 *",
            "cron '0 0 30,31 2 *': day 30,31 never falls in month 2; expected a day that some "
            "month of the schedule has",
        ),
    ],
)
def test_a_cron_schedule_that_cannot_be_kept_is_refused_in_one_line(
    tmp_path: Path, cron: str, expected: str
) -> None:
    done = _schedule(tmp_path, "--cron", cron, "--max-runs", "1", "--", "--help")
    assert done.returncode == 1
    assert done.stderr == f"imgscale: error: {expected}\n"
