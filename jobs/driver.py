"""A spec run by a driver on the cluster: the run lives on without the terminal that submitted it.

`imgscale submit` records the run in the ledger (``submitted``, its jobs already checked and
resolved) and hands the scheduler one task, `drive`, with ``fire_and_forget``: the scheduler
keeps it although no client holds its future, so the submitting CLI exits at once and a network
blip of the laptop cannot release it (distributed #5667). Where a worker offers the ``driver``
resource (`DRIVER_RESOURCE`, ``dask worker --resources driver=N``), drivers run there, N at a
time, and further ones wait in the scheduler's queue (``submitted`` in the ledger); without such
a worker any worker takes them.

The task does no work itself: it starts ``imgscale drive RUN`` as a child process and copies
the child's output into the run's log. The child is the run's client: it connects to the
scheduler and runs the spec's jobs exactly as `imgscale run` does, each recorded as its own run.
Its GIL-heavy client work never stops the worker's heartbeat (distributed #6324), and it holds
no ``worker_client`` whose futures a worker restart would erase (#4400). The two are bound: the
child asks the kernel to kill it when the worker thread that started it dies
(``PR_SET_PDEATHSIG``), checks its parent at every heartbeat, and the task waits for the child.

Each attempt (the task, for its child) first claims the run's next generation in the ledger,
create-only: a worker killed with the driver makes the scheduler run the task again elsewhere,
and the new attempt's claim fences the old one (an attempt that finds a newer generation stops
at once, writing nothing more). The child's events and the output lines the task copies are
written as that generation's, so they read in attempt order whatever the hosts' clocks. A new
attempt skips the jobs an earlier one finished ``ok`` and runs the others again, which resume
from what their stores committed (an image ingest skips committed keys, embed resumes by batch,
train restarts its pass). The child stops at its next safe point (the Ctrl-C path every command
already handles, which keeps stores consistent) when the ledger holds a cancel request. A child
that cannot reach its scheduler for `SCHEDULER_GRACE_SECONDS` records the run ``lost`` with the
reason and exits; `imgscale resume` continues it on another cluster.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

from imgscale.storage import Ledger, StoreError

DRIVER_RESOURCE = "driver"
# A child whose scheduler refuses connections this long records the run lost.
SCHEDULER_GRACE_SECONDS = 10.0
LOG_FLUSH_SECONDS = 1.0
_PR_SET_PDEATHSIG = 1


def submit_driver(client: Any, run_id: str, ledger_url: str, scheduler: str) -> str:
    """Hand the driver of run ``run_id`` to the cluster of ``client``; returns its task key."""
    from imgscale.jobs.cluster import submit_detached

    key = f"imgscale-driver-{run_id}-{uuid.uuid4().hex[:6]}"
    submit_detached(client, drive, run_id, ledger_url, scheduler, key=key, resource=DRIVER_RESOURCE)
    return key


def drive(run_id: str, ledger_url: str, scheduler: str) -> int:
    """The driver task: run ``imgscale drive`` as a child bound to this worker, copy its output
    into the run's log, and return its exit code."""
    from distributed import get_worker, secede

    # The worker's thread is free for compute tasks meanwhile (the run's own tasks may land on
    # this worker); the driver resource stays held until the task ends, so a worker started
    # with driver=N still hosts N drivers at once.
    secede()
    ledger = Ledger(ledger_url)
    worker = get_worker().address
    try:  # this attempt's generation: the child's events and the lines copied here are its
        generation = ledger.claim_generation(run_id, {"by": f"driver on {worker}"})
    except StoreError as e:  # a newer attempt holds the run
        _flush(ledger, run_id, [f"imgscale: error: {e}"])
        return 1
    argv = [
        sys.executable, "-m", "imgscale", "drive", run_id, "--ledger", ledger_url,
        "--scheduler", scheduler, "--worker", worker, "--generation", str(generation),
        "--parent", str(os.getpid()),
    ]  # fmt: skip
    child = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True
    )
    lines: list[str] = []
    reader = threading.Thread(target=_read_lines, args=(child.stdout, lines), daemon=True)
    reader.start()
    while reader.is_alive():
        reader.join(LOG_FLUSH_SECONDS)
        _flush(ledger, run_id, lines)
    code = child.wait()
    _flush(ledger, run_id, lines)
    return code


def _read_lines(stream, lines: list[str]) -> None:
    for line in stream:
        if line.strip():
            lines.append(line.rstrip("\n"))


def _flush(ledger: Ledger, run_id: str, lines: list[str]) -> None:
    taken = lines[:]
    del lines[: len(taken)]
    with contextlib.suppress(Exception):  # a missed log flush must not end the run
        ledger.log(run_id, taken)


def die_with_parent(parent: int) -> None:
    """Have the kernel kill this process when the thread that started it dies (Linux), and exit
    now if ``parent`` is already gone."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)


def scheduler_reachable(address: str) -> bool:
    """Whether the scheduler at ``address`` accepts a TCP connection."""
    from distributed.comm import parse_address, parse_host_port

    try:
        host, port = parse_host_port(parse_address(address)[1])
        socket.create_connection((host, port), timeout=5).close()
    except (OSError, ValueError):
        return False
    return True


class Watch:
    """The child's heartbeat: every few seconds, the run's progress into the ledger, and a stop
    (SIGINT to this process, the Ctrl-C path) when the run is cancelled, fenced by a newer
    generation, orphaned, or its scheduler is gone past the grace time."""

    def __init__(
        self, ledger: Ledger, run_id: str, generation: int, scheduler: str, parent: int
    ) -> None:
        self.ledger, self.run_id, self.generation = ledger, run_id, generation
        self.scheduler, self.parent = scheduler, parent
        self.stage = "starting"
        self.children: list[dict[str, Any]] = []
        # The files the run's jobs wrote, listed in its record at the end (bench's results).
        self.outputs: list[str] = []
        self.stopped_by: str | None = None
        self._unreachable_since: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Watch:
        # The heartbeat thread's first look at the scheduler imports distributed.comm: imported
        # here first, so that it never races the jobs' own first import of distributed (a
        # module half-initialised by the other thread fails to import).
        import distributed.comm  # noqa: F401

        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def beat(self) -> None:
        from imgscale.jobs.runs import active_run

        inner = active_run()
        progress = {}
        if inner is not None:
            progress = {
                "rows_done": inner.rows_done,
                "rows_total": inner.rows_total,
                "progress_unit": inner.unit,
            }
            if inner.current_pass:
                progress["pass"] = f"{self.stage}: {inner.current_pass}"
        self.ledger.beat(self.run_id, **{"pass": self.stage, **progress, "children": self.children})

    def _loop(self) -> None:
        from imgscale.jobs.runs import HEARTBEAT_SECONDS

        while not self._stop.wait(HEARTBEAT_SECONDS):
            reason = self._reason_to_stop()
            if reason is not None and self.stopped_by is None:
                self.stopped_by = reason
                os.kill(os.getpid(), signal.SIGINT)
            with contextlib.suppress(Exception):
                self.beat()

    def _reason_to_stop(self) -> str | None:
        if os.getppid() != self.parent:
            return "orphaned"
        try:
            record = self.ledger.get(self.run_id)
        except Exception:
            return None  # the ledger unreadable a moment: look again at the next beat
        if (record["generation"] or 0) > self.generation:
            return "fenced"
        if record["cancel_requested"]:
            return "cancelled"
        if scheduler_reachable(self.scheduler):
            self._unreachable_since = None
        else:
            self._unreachable_since = self._unreachable_since or time.monotonic()
            if time.monotonic() - self._unreachable_since > SCHEDULER_GRACE_SECONDS:
                return "scheduler lost"
        return None
