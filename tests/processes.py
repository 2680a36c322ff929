"""Server processes the tests start on 127.0.0.1, each listening on a port the operating system
gives it when it binds (port 0), never on one chosen beforehand: a port found free and released
can be taken by another process (an outgoing connection's ephemeral port, another test's server)
before the server binds it, and the server then exits with "Address already in use". A process
that dies while a test waits for it is reported at once with the end of its log."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

MOTO_SERVER = str(Path(sys.executable).with_name("moto_server"))

# A started process and the file its stdout and stderr go to, by a name for messages.
Started = Mapping[str, tuple[subprocess.Popen, Path]]


def start_logged(command: list[str], log: Path, **popen) -> subprocess.Popen:
    """Start ``command`` with its stdout and stderr going to the file ``log``."""
    with open(log, "wb") as out:  # the child keeps its own copy
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, **popen)


def log_tail(log: Path, lines: int = 100) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def assert_running(started: Started) -> None:
    """Fail, naming the process and quoting its log's end, if any process has exited."""
    for name, (process, log) in started.items():
        if process.poll() is not None:
            raise AssertionError(
                f"{name} exited with {process.returncode}; the end of {log}:\n{log_tail(log)}"
            )


def wait_until(condition, what: str, started: Started, timeout: float = 120) -> None:
    """Poll ``condition`` until it holds; fail at once if a process of ``started`` exits."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert_running(started)
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout} s"
        time.sleep(0.05)


def wait_for_workers(client, count: int, started: Started, timeout: float = 120) -> None:
    """Wait until ``count`` workers are connected to ``client``'s scheduler."""
    wait_until(lambda: len(client.nthreads()) >= count, f"{count} workers", started, timeout)


def start_moto_server(
    log: Path, env: Mapping[str, str] | None = None
) -> tuple[subprocess.Popen, str]:
    """moto's S3-compatible server on a port of its own; return the process and its endpoint,
    read from the line the server prints once it listens."""
    server = start_logged([MOTO_SERVER, "-H", "127.0.0.1", "-p", "0"], log, env=env)
    found: list[str] = []

    def listening() -> bool:
        found[:] = re.findall(r"Running on (http://127\.0\.0\.1:\d+)", log.read_text())
        return bool(found)

    try:
        wait_until(listening, "moto_server listening", {"moto_server": (server, log)}, 60)
    except BaseException:
        server.kill()
        server.wait()
        raise
    return server, found[0]


def stop(*groups: list[subprocess.Popen], timeout: float = 20) -> None:
    """Terminate each group of processes together, and wait for it before the next; kill a
    process that has not exited within ``timeout``. Give the workers before their scheduler: a
    worker whose scheduler closes while it closes waits out its connection timeouts."""
    for group in groups:
        for process in group:
            if process.poll() is None:
                process.terminate()
        for process in group:
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
