"""The session's one tiny run of every registered benchmark (`imgscale bench --scale tiny`), shared
by the test processes of a session: the process that runs the session (xdist's controller, or
pytest itself) makes its folder and removes it after; the first test process to need the run
claims the folder and starts it; every test that reads it waits for it to end."""

from __future__ import annotations

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

import pytest

# The folder, passed from the session's process to its test processes (they inherit it).
ROOT_VARIABLE = "IMGSCALE_TEST_TINY_RUN_ROOT"
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


def make_root() -> None:
    """The session's folder for the run, named in the environment its test processes inherit."""
    os.environ[ROOT_VARIABLE] = tempfile.mkdtemp(prefix="imgscale-tiny-run-")


def start() -> None:
    """Start the run unless a test process of this session already has."""
    root = Path(os.environ[ROOT_VARIABLE])
    try:
        (root / "cwd").mkdir()  # the claim: one process of the session gets here first
    except FileExistsError:
        return
    cwd = root / "cwd"
    env = {k: v for k, v in os.environ.items()
           if k not in ("IMGSCALE_DATA", "DASK_SCHEDULER_ADDRESS")}  # fmt: skip
    env["IMGSCALE_LEDGER"] = str(root / "ledger.sqlite")  # not the user's ledger
    # One BLAS (and OpenMP) thread a process: the run shares the cores with the rest of the
    # suite, and OpenBLAS threads waiting for busy cores make small eigh calls tens of times
    # slower (AddKPCA's fit, 320 of 128 x 128, on a loaded machine).
    env["OPENBLAS_NUM_THREADS"] = env["OMP_NUM_THREADS"] = "1"
    launched = subprocess.run(
        [sys.executable, "-c", _LAUNCH, str(root), sys.executable, "-m", "imgscale", "bench",
         "--scale", "tiny", "--out", str(cwd / "out"), "--workdir", str(cwd / "work"), "--json"],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    (root / "session.partial").write_text(launched.stdout.strip())
    (root / "session.partial").replace(root / "session")


def result() -> tuple[Path, Path, dict]:
    """(cwd, out, summary) once the run has ended; it must have succeeded."""
    root = Path(os.environ[ROOT_VARIABLE])
    began = time.monotonic()
    while not (root / "rc").exists():
        if time.monotonic() - began > RUN_SECONDS:
            pytest.fail(f"the tiny run did not end within {RUN_SECONDS} s")
        time.sleep(1)
    stderr = (root / "stderr").read_text()
    assert (root / "rc").read_text() == "0", stderr[-3000:]
    return root / "cwd", root / "cwd" / "out", json.loads((root / "stdout").read_text())


def stop() -> None:
    """End the run and its cluster's processes if still running; remove its folder."""
    root = Path(os.environ.pop(ROOT_VARIABLE))
    if (root / "session").exists() and not (root / "rc").exists():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(int((root / "session").read_text()), signal.SIGKILL)
    shutil.rmtree(root, ignore_errors=True)
