"""One tiny run of every registered benchmark per test session, as CI runs it: the end-to-end
tests check the run as a whole, and a benchmark's own tests read its rows from the same run
rather than running it again.

The run is a process of its own that starts as soon as the tests are collected, and the tests
that read it run last: the rest of the suite runs beside it rather than after it (most of either
waits on process and cluster starts, not on the cores)."""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

# A guard against a hung benchmark, not a speed target: every registered benchmark runs, each
# starting clusters and commands of its own.
RUN_SECONDS = 1200


# Starts the run detached (its own session, not a child of the test process: tests that list
# their process's children or its listening sockets must not see it) and writes its exit code.
_LAUNCH = """
import os, subprocess, sys
root, command = sys.argv[1], sys.argv[2:]
pid = os.fork()
if pid:
    print(pid, flush=True)
    os._exit(0)
os.setsid()
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
with open(os.path.join(root, "stdout"), "w") as out, open(os.path.join(root, "stderr"), "w") as err:
    code = subprocess.call(command, cwd=os.path.join(root, "cwd"), stdout=out, stderr=err)
with open(os.path.join(root, "rc.partial"), "w") as rc:
    rc.write(str(code))
os.replace(os.path.join(root, "rc.partial"), os.path.join(root, "rc"))
"""


class TinyRun:
    """`imgscale bench --scale tiny --json` started in an empty folder of its own."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="imgscale-tiny-run-"))
        self.cwd = self.root / "cwd"
        self.cwd.mkdir()
        env = {k: v for k, v in os.environ.items()
               if k not in ("IMGSCALE_DATA", "DASK_SCHEDULER_ADDRESS")}  # fmt: skip
        env["IMGSCALE_LEDGER"] = str(self.root / "ledger.sqlite")  # not the user's ledger
        # One BLAS (and OpenMP) thread a process: the run shares the cores with the rest of the
        # suite, and OpenBLAS threads waiting for busy cores make small eigh calls tens of times
        # slower (AddKPCA's fit, 320 of 128 x 128, on a loaded machine).
        env["OPENBLAS_NUM_THREADS"] = env["OMP_NUM_THREADS"] = "1"
        self.started = time.monotonic()
        launched = subprocess.run(
            [sys.executable, "-c", _LAUNCH, str(self.root), sys.executable, "-m", "imgscale",
             "bench", "--scale", "tiny", "--out", str(self.cwd / "out"), "--workdir",
             str(self.cwd / "work"), "--json"],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        self.session = int(launched.stdout)

    def result(self) -> tuple[Path, Path, dict]:
        """(cwd, out, summary) once the run has ended; it must have succeeded."""
        rc = self.root / "rc"
        while not rc.exists():
            if time.monotonic() - self.started > RUN_SECONDS:
                self.stop()
                pytest.fail(f"the tiny run did not end within {RUN_SECONDS} s")
            time.sleep(1)
        stderr = (self.root / "stderr").read_text()
        assert rc.read_text() == "0", stderr[-3000:]
        return self.cwd, self.cwd / "out", json.loads((self.root / "stdout").read_text())

    def stop(self) -> None:
        """End the run and its cluster's processes if still running; remove its folder."""
        if not (self.root / "rc").exists():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.session, signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)


_RUN: list[TinyRun] = []


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected what they deselect
def pytest_collection_modifyitems(config, items):
    """Start the tiny run if a selected test reads it, and move the tests that read it last."""
    reading = [item for item in items if "tiny_run" in getattr(item, "fixturenames", ())]
    if not reading or _RUN or config.option.collectonly:
        return
    ids = {id(item) for item in reading}
    items[:] = [item for item in items if id(item) not in ids] + reading
    _RUN.append(TinyRun())


def pytest_unconfigure(config):
    while _RUN:
        _RUN.pop().stop()


@pytest.fixture(scope="session")
def tiny_run():
    """(cwd, out, summary) of `imgscale bench --scale tiny --json` run in an empty folder."""
    if not _RUN:  # collected without the hook (e.g. another plugin emptied the list)
        _RUN.append(TinyRun())
    return _RUN[0].result()


def benchmark_rows(run, benchmark: str) -> dict[str, dict]:
    """One benchmark's rows of the tiny run by name, each with its detail fields alongside."""
    _, out, _ = run
    rows = pq.read_table(out / "results.parquet").to_pylist()
    return {
        r["name"]: {**json.loads(r["detail"]), **r} for r in rows if r["benchmark"] == benchmark
    }
