"""How quiet the machine was around each benchmark of a suite run, so a figure taken on a busy
machine is said to be one.

Each benchmark is bracketed by a short calibration, the probes of :mod:`imgscale.bench.machine`
at sizes that take a fraction of a second (float32 GEMM on all cores, a memory copy, a cold
sequential read of a file written once for the run), and a background thread samples, every
:data:`LOAD_INTERVAL` seconds, the 1-minute load average and the CPU time of every process on the
machine that is not this one or one of its descendants (the benchmark's cluster, its commands).

A calibration takes :data:`SHOTS` shots of each probe, interleaved, and keeps each probe's
median and range. One shot is not a measurement of the machine on a shared VM: two back-to-back
shots of the GEMM probe can differ twofold when the hypervisor takes a core for a moment, and the
cold read follows the host's storage, which wanders by a fifth within a minute on a machine no one
else is using. A probe **moved** between two calibrations when its median changed by more than
:data:`DRIFT_LIMIT` *and* the ranges of their shots do not overlap: the rule
:mod:`imgscale.bench.compare` applies to figures, a change beyond the spread.

A benchmark is **noisy** when a probe moved between the calibration before it and the one after
(something took the cores, the memory bus or the disk and kept them), or when other processes kept
more than :data:`OTHERS_LIMIT` cores busy on average while it ran. Not the load average against
the cores: the load counts the benchmark's own processes, so a benchmark running two workers
beside its client on two cores would call itself noisy on a machine no one else was using. The
highest load is still recorded. A noisy benchmark's times and rates are noisy; its accuracies,
sizes and counts, which a busy machine does not change, are not. Processes outside this one's
tree are others, whoever started them: a cluster given by ``--scheduler`` whose workers run on
this machine makes every benchmark noisy, as it should, since their CPU is not the benchmark's
alone.

The calibration after one benchmark is the calibration before the next, so a run of n benchmarks
makes n + 1. The run's limits (:func:`imgscale.bench.machine.limits`, the peers of the speed
figures) are measured once before them at full size; a calibration is compared only with its
neighbours, never used as a limit: its sizes are too small for an anchor but enough to see the
machine change.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from imgscale.bench import machine, units

DRIFT_LIMIT = 0.10
"""The largest relative change of a probe's median between before and after a quiet benchmark
(a change that stays within the shots' ranges is not a move, whatever its size)."""
SHOTS = 7
"""Shots of each probe in one calibration: the median outvotes a moment of lost core."""
OTHERS_LIMIT = 0.2
"""The most cores other processes may keep busy, on average, while a quiet benchmark runs (a
machine's own daemons and kernel threads keep a few hundredths busy)."""
LOAD_INTERVAL = 2.0
"""Seconds between two samples of the load and of the other processes' CPU time."""

MIB = 2**20
# (GEMM rows, memory-copy bytes, disk-read bytes) by scale: from small up, 2–5 s a calibration on
# a quiet machine; at tiny (CI's toy run) a fraction of a second, its copy fitting in cache.
_SIZES = {
    "tiny": (512, 16 * MIB, 16 * MIB),
    "small": (2048, 128 * MIB, 128 * MIB),
    "medium": (2048, 256 * MIB, 256 * MIB),
    "large": (2048, 256 * MIB, 256 * MIB),
}


@dataclass(frozen=True)
class Probe:
    """One probe's shots in a calibration: their median, lowest and highest."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, shots: Sequence[float]) -> Probe:
        return cls(statistics.median(shots), min(shots), max(shots))

    def change(self, after: Probe) -> float:
        """The relative change of the median from this calibration to ``after``."""
        return abs(after.median - self.median) / self.median

    def moved(self, after: Probe) -> bool:
        """Whether the probe moved from this calibration to ``after``: its median by more than
        :data:`DRIFT_LIMIT`, and beyond both shots' ranges."""
        apart = after.low > self.high or after.high < self.low
        return apart and self.change(after) > DRIFT_LIMIT


@dataclass(frozen=True)
class Calibration:
    """One short measurement of the machine."""

    gemm: Probe
    """float32 GEMM on all cores, GFLOP/s."""
    memory: Probe
    """Memory copy, GB/s (read + written)."""
    disk: Probe
    """Cold sequential read, GB/s."""

    def probes(self) -> dict[str, Probe]:
        return {"GEMM": self.gemm, "copy": self.memory, "disk": self.disk}

    def describe(self) -> str:
        return (
            f"GEMM {self.gemm.median:.3g} GFLOP/s, copy {self.memory.median:.3g} GB/s, "
            f"disk {self.disk.median:.3g} GB/s"
        )


def drift(before: Calibration, after: Calibration) -> float:
    """The largest relative change of a probe's median from ``before`` to ``after``."""
    pairs = zip(before.probes().values(), after.probes().values(), strict=True)
    return max(b.change(a) for b, a in pairs)


def moved(before: Calibration, after: Calibration) -> list[str]:
    """The probes that moved from ``before`` to ``after`` (:meth:`Probe.moved`)."""
    after_probes = after.probes()
    return [name for name, b in before.probes().items() if b.moved(after_probes[name])]


@dataclass(frozen=True)
class Conditions:
    """The machine around one benchmark: its calibrations before and after, the highest load
    and the cores other processes kept busy on average."""

    before: Calibration
    after: Calibration
    load_max: float
    other_cores: float

    @property
    def drift(self) -> float:
        return drift(self.before, self.after)

    @property
    def moved(self) -> list[str]:
        return moved(self.before, self.after)

    @property
    def noisy(self) -> bool:
        return bool(self.moved) or self.other_cores > OTHERS_LIMIT

    def columns(self, unit: str) -> dict[str, object]:
        """The results table's columns for a figure of the benchmark in ``unit``: a time or a
        rate is noisy when the benchmark is; a busy machine does not move an accuracy, a size
        or a count (:func:`imgscale.bench.units.timed`)."""
        return {
            "noisy": self.noisy and units.timed(unit),
            "load_max": round(self.load_max, 2),
            "calibration_drift": round(self.drift, 4),
            "other_cores": round(self.other_cores, 3),
            "gemm_gflops": round(self.gemm_gflops, 1),
        }

    @property
    def gemm_gflops(self) -> float:
        """The host's GEMM rate around the benchmark (the two calibrations' medians averaged):
        hosts sold as the same machine (same cores, memory and CPU name) run it at rates that
        differ by half, so a time is compared only with one taken on a host of the same rate."""
        return (self.before.gemm.median + self.after.gemm.median) / 2

    def describe(self) -> str:
        """One sentence for the run's report."""
        verdict = "**Noisy**" if self.noisy else "Quiet"
        which = ", ".join(self.moved) or "no probe"
        return (
            f"{verdict}: other processes kept {self.other_cores:.2f} cores busy (limit "
            f"{OTHERS_LIMIT:.2f}), load up to {self.load_max:.2f}; calibration "
            f"moved {self.drift:.0%} ({which} beyond its shots' range; limit {DRIFT_LIMIT:.0%}): "
            f"before {self.before.describe()}; after {self.after.describe()}."
        )


class Calibrator:
    """Short calibrations of this machine at ``scale``; the disk probe's file is written once,
    in ``workdir``, and removed when the calibrator is closed."""

    def __init__(self, workdir: Path, scale: str):
        self.rows, self.memory_bytes, disk_bytes = _SIZES[scale]
        # A name no other calibrator has: runs given one work dir each write and remove their own.
        handle, name = tempfile.mkstemp(prefix="calibration-read-", suffix=".bin", dir=workdir)
        os.close(handle)
        self.probe = Path(name)
        machine.write_file(self.probe, disk_bytes)

    def __enter__(self) -> Calibrator:
        return self

    def __exit__(self, *exc) -> None:
        self.probe.unlink(missing_ok=True)

    def measure(self, shots: int = SHOTS) -> Calibration:
        """``shots`` shots of each probe, interleaved so a moment of lost core or a slow
        stretch of the disk falls on one shot of each, not on all of one."""
        gemm, memory, disk = [], [], []
        for _ in range(shots):
            gemm.append(machine.gemm_gflops(rows=self.rows, dim=512, out=1024, repeats=3))
            memory.append(machine.memory_bandwidth(self.memory_bytes, repeats=3))
            disk.append(machine.sequential_read_rate(self.probe, cold=True))
        return Calibration(Probe.of(gemm), Probe.of(memory), Probe.of(disk))


class LoadSampler:
    """While the block runs: the highest 1-minute load average, and the cores that processes
    other than this one and its descendants kept busy on average (their CPU seconds over the
    block's wall seconds), both sampled every :data:`LOAD_INTERVAL` seconds, at its start and at
    its end. A process another one starts and reaps between two samples is not seen."""

    def __init__(self, interval: float = LOAD_INTERVAL):
        self.interval = interval
        self.peak = 0.0
        self.other_seconds = 0.0
        self._seen: dict[int, float] = {}
        self._started = 0.0
        self._ended = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> LoadSampler:
        self._started = time.monotonic()
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
        self._ended = time.monotonic()

    @property
    def other_cores(self) -> float:
        """Cores kept busy by other processes, on average over the block."""
        seconds = (self._ended or time.monotonic()) - self._started
        return self.other_seconds / seconds if seconds > 0 else 0.0

    def _sample(self) -> None:
        self.peak = max(self.peak, os.getloadavg()[0])
        cpu = other_cpu_seconds()
        # A process first seen now started since the last sample (or is the first sample's):
        # what it used before then is not this block's but cannot be told apart; it is counted
        # from the first sample on only.
        self.other_seconds += sum(
            used - self._seen[pid] for pid, used in cpu.items() if pid in self._seen
        )
        self._seen = cpu

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()


def other_cpu_seconds() -> dict[int, float]:
    """CPU seconds (user and system) so far of every process on the machine that is not this
    one or its descendant, by pid, from ``/proc`` (empty where there is none)."""
    ticks = os.sysconf("SC_CLK_TCK")
    parents, cpu = {}, {}
    try:
        entries = [e.name for e in os.scandir("/proc") if e.name.isdigit()]
    except OSError:
        return {}
    for name in entries:
        try:
            with open(f"/proc/{name}/stat", "rb") as file:
                stat = file.read()
        except OSError:  # the process ended since the listing
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()
        pid = int(name)
        parents[pid] = int(fields[1])
        cpu[pid] = (int(fields[11]) + int(fields[12])) / ticks
    ours = {os.getpid()}
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    frontier = [os.getpid()]
    while frontier:
        for child in children.get(frontier.pop(), []):
            if child not in ours:
                ours.add(child)
                frontier.append(child)
    return {pid: used for pid, used in cpu.items() if pid not in ours}
