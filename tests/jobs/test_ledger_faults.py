"""The ledger records jobs; it never decides them. A ledger that cannot take a job's outcome after
its work is done (disk full, read-only) gets a warning, and the job still succeeds (it used to
exit 1, its work done, and stay 'running' then 'lost'); a read-only ledger is still listed by
`imgscale runs`, its dead runs as lost (no reader writes that)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import imgscale.jobs.ingest
from imgscale.jobs.cli import cli
from imgscale.storage import Ledger, open_store

IMGSCALE = str(Path(sys.executable).with_name("imgscale"))


@pytest.fixture
def make_read_only() -> Iterator:
    """Makes a ledger folder read-only for this user (root ignores modes, so root sets the
    immutable attribute), and writable again at the end so the temp folder can be removed."""
    done: list[Path] = []

    def read_only(ledger: Path) -> None:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-R", "+i", str(ledger)], check=True)
        else:
            subprocess.run(["chmod", "-R", "a-w", str(ledger)], check=True)
        done.append(ledger)

    yield read_only
    for ledger in done:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-R", "-i", str(ledger)], check=True)
        else:
            subprocess.run(["chmod", "-R", "u+w", str(ledger)], check=True)


def test_a_ledger_failing_after_the_work_is_done_warns_and_the_job_succeeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_read_only
) -> None:
    np.savez(tmp_path / "rows.npz", X=np.ones((8, 3), np.float32), y=np.arange(8) % 2)
    ledger = tmp_path / "ledger"
    ingest_file = imgscale.jobs.ingest.ingest_file

    def ingest_then_lose_the_ledger(*args, **kwargs):
        done = ingest_file(*args, **kwargs)
        make_read_only(ledger)
        return done

    monkeypatch.setattr(imgscale.jobs.ingest, "ingest_file", ingest_then_lose_the_ledger)
    store = tmp_path / "s.zarr"
    result = CliRunner().invoke(
        cli, ["ingest", str(tmp_path / "rows.npz"), str(store), "--ledger", str(ledger)]
    )
    assert result.exit_code == 0, result.output
    assert open_store(store).committed_rows == 8
    (warning,) = [line for line in result.stderr.splitlines() if "warning" in line]
    assert warning.startswith("imgscale: warning: outcome 'ok' of run ")
    assert f"not recorded (ledger {ledger}: cannot write (" in warning


def test_runs_lists_a_read_only_ledger(tmp_path: Path, make_read_only) -> None:
    ledger = tmp_path / "ledger"
    # A process that records a start and ends without an outcome, as a killed job does.
    subprocess.run(
        [sys.executable, "-c", "import sys; from imgscale.storage import Ledger; "
         "Ledger(sys.argv[1]).start({'run_id': 'gone', 'kind': 'train', 'spec': {}, "
         "'command': ['imgscale', 'train'], 'versions': {}})", str(ledger)],
        check=True,
    )  # fmt: skip
    make_read_only(ledger)
    listed = subprocess.run(
        [IMGSCALE, "runs", "--ledger", str(ledger)], capture_output=True, text=True, timeout=120
    )
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith("gone  train     lost")
    assert listed.stderr == ""
    assert [r["outcome"] for r in Ledger(ledger).runs()] == ["lost"]
