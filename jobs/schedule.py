"""Run an imgscale command repeatedly (every interval, or on a cron schedule), never two at once.

Mutual exclusion is an exclusive ``flock`` on a lock file, taken without waiting before each run
and inherited by the command's process: the kernel drops it when every holder has exited, so a
scheduler or command that dies (even by SIGKILL) cannot keep it. A run whose turn comes while
another holds the lock (a slow previous run, or another scheduler) is skipped, not queued. The
default lock file, one per command in the temp directory, is removed when its scheduler ends and
no run holds it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_every(text: str) -> float:
    """Seconds in an interval such as ``90s``, ``10m``, ``1.5h``, ``1d`` (bare number: seconds)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([smhd]?)\s*", text)
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"interval {text!r}: expected a positive number with unit s, m, h or d")
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]


# Longest length of each month (February in a leap year).
_DAYS = {1: 31, 2: 29, 3: 31, 4: 30, 5: 31, 6: 30, 7: 31, 8: 31, 9: 30, 10: 31, 11: 30, 12: 31}
# (name, lowest, highest) of the five cron fields; day of week 0–7, both 0 and 7 are Sunday.
_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day", 1, 31), ("month", 1, 12), ("weekday", 0, 7))


def _parse_field(text: str, name: str, low: int, high: int) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        match = re.fullmatch(r"(\*|\d+(?:-\d+)?)(?:/(\d+))?", part)
        if not match:
            raise ValueError(f"cron {name} field {text!r}: cannot parse {part!r}")
        span, step = match.group(1), int(match.group(2) or 1)
        if span == "*":
            first, last = low, high
        elif "-" in span:
            first, last = map(int, span.split("-"))
        else:
            first = int(span)
            last = high if match.group(2) else first
        if not (low <= first <= last <= high) or step < 1:
            raise ValueError(f"cron {name} field {text!r}: {part!r} outside {low}–{high}")
        if step > high - low + 1:
            raise ValueError(
                f"cron {name} field {text!r}: step {step} in {part!r} is longer than the "
                f"{high - low + 1} values {low}–{high}; expected a step of at most {high - low + 1}"
            )
        values.update(range(first, last + 1, step))
    return frozenset(values)


@dataclass(frozen=True)
class CronSchedule:
    """The five-field cron subset: ``*``, numbers, ranges ``a-b``, steps ``*/n`` and ``a-b/n``,
    lists ``x,y``; no names or ``@`` macros. Day of month and day of week follow cron: when both
    are restricted, a day matching either one matches."""

    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    day_restricted: bool
    weekday_restricted: bool

    @classmethod
    def parse(cls, expression: str) -> CronSchedule:
        fields = expression.split()
        if len(fields) != 5:
            raise ValueError(
                f"cron {expression!r}: expected 5 fields (minute hour day month weekday)"
            )
        parsed = [_parse_field(f, *spec) for f, spec in zip(fields, _FIELDS, strict=True)]
        weekdays = frozenset(d % 7 for d in parsed[4])
        days, months = parsed[2], parsed[3]
        # Only a day-of-month restriction alone can exclude every date (a weekday always comes).
        if fields[2] != "*" and fields[4] == "*" and min(days) > max(_DAYS[m] for m in months):
            raise ValueError(
                f"cron {expression!r}: day {fields[2]} never falls in month {fields[3]}; "
                "expected a day that some month of the schedule has"
            )
        return cls(*parsed[:4], weekdays, fields[2] != "*", fields[4] != "*")

    def matches(self, t: dt.datetime) -> bool:
        if t.minute not in self.minutes or t.hour not in self.hours:
            return False
        return self.day_matches(t)

    def day_matches(self, t: dt.datetime) -> bool:
        if t.month not in self.months:
            return False
        day_ok = t.day in self.days
        weekday_ok = (t.isoweekday() % 7) in self.weekdays
        if self.day_restricted and self.weekday_restricted:
            return day_ok or weekday_ok
        return day_ok and weekday_ok

    def next_after(self, t: dt.datetime) -> dt.datetime:
        """The first matching minute strictly after ``t`` (searched up to about 4 years ahead)."""
        candidate = t.replace(second=0, microsecond=0) + dt.timedelta(minutes=1)
        for _ in range(4 * 366 * 24 * 60):
            if candidate.month not in self.months:
                # Jump to the first minute of the next month.
                year, month = divmod(candidate.month, 12)
                candidate = candidate.replace(
                    year=candidate.year + year, month=month + 1, day=1, hour=0, minute=0
                )
                continue
            if not self.day_matches(candidate):
                candidate = candidate.replace(hour=0, minute=0) + dt.timedelta(days=1)
                continue
            if self.matches(candidate):
                return candidate
            if candidate.hour not in self.hours:
                candidate = candidate.replace(minute=0) + dt.timedelta(hours=1)
                continue
            candidate += dt.timedelta(minutes=1)
        raise ValueError("cron expression never matches (e.g. 31 February)")


class ScheduleFailed(RuntimeError):
    """At least one scheduled run exited non-zero."""


def run_times(
    every: float | None, cron: CronSchedule | None, now: Callable[[], float] = time.time
) -> Iterator[float]:
    """Epoch times of the runs: with ``every``, now and then on a fixed grid from now (missed
    ticks are dropped, not caught up); with ``cron``, each matching minute."""
    start = now()
    if every is not None:
        k = 0
        while True:
            yield start + k * every
            k = max(k + 1, int((now() - start) // every) + 1)
    else:
        assert cron is not None
        t = dt.datetime.fromtimestamp(start)
        while True:
            t = cron.next_after(max(t, dt.datetime.fromtimestamp(now())))
            yield t.timestamp()


def default_lock_path(command: list[str]) -> Path:
    """A lock file named by the command, with existing paths resolved, in the temp directory."""
    canonical = [os.path.realpath(arg) if os.path.exists(arg) else arg for arg in command]
    digest = hashlib.sha1("\0".join(canonical).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"imgscale-schedule-{digest}.lock"


def run_once_locked(command: list[str], lock_path: Path) -> int | None:
    """Run ``imgscale COMMAND`` holding the lock; None (and nothing run) if someone holds it."""
    from imgscale.storage import FileLock  # imports the store layout: not on every --help

    lock = FileLock(lock_path)
    if not lock.acquire(blocking=False):
        return None
    try:
        # The child inherits the locked descriptor: the lock outlives a killed scheduler for as
        # long as the command still runs, and is gone once both have exited.
        argv = [sys.executable, "-m", "imgscale", *command]
        return subprocess.run(argv, pass_fds=(lock.fileno,)).returncode
    finally:
        lock.release()


def _remove_unheld_lock(lock_path: Path) -> None:
    """Delete the lock file ``lock_path`` unless a run holds it. It is deleted while this
    process holds its lock: a process that opened it meanwhile finds, once it has the lock, that
    the file is no longer at its path, and takes the lock on the path's new file instead
    (`FileLock.acquire`), so no two runs ever hold locks on different files at once."""
    from imgscale.storage import FileLock  # imports the store layout: not on every --help

    lock = FileLock(lock_path)
    if lock.acquire(blocking=False):
        try:
            lock_path.unlink(missing_ok=True)
        finally:
            lock.release()


def schedule(
    command: list[str],
    *,
    every: float | None = None,
    cron: str | None = None,
    lock_path: Path | None = None,
    max_runs: int | None = None,
    log: Callable[[str], None] = print,
    sleep: Callable[[float], None] = time.sleep,
    now: Callable[[], float] = time.time,
) -> dict[str, int]:
    """Run ``imgscale COMMAND`` on the schedule until ``max_runs`` turns have passed (forever if
    None). Returns counts of runs that ran and were skipped (lock held); raises
    :class:`ScheduleFailed` at the end if any run failed, so the scheduler's own exit says so."""
    if (every is None) == (cron is None):
        raise ValueError("give exactly one of --every and --cron")
    if not command:
        raise ValueError("no command to schedule")
    parsed = CronSchedule.parse(cron) if cron is not None else None
    owned = lock_path is None  # the default lock file is this module's to remove
    lock_path = lock_path or default_lock_path(command)
    counts = {"ran": 0, "failed": 0, "skipped": 0}
    last_failure = 0
    try:
        for turn, at in enumerate(run_times(every, parsed, now)):
            if max_runs is not None and turn >= max_runs:
                break
            wait = at - now()
            if wait > 0:
                sleep(wait)
            stamp = dt.datetime.now().isoformat(timespec="seconds")
            code = run_once_locked(command, lock_path)
            if code is None:
                counts["skipped"] += 1
                log(f"{stamp} skipped: another run holds {lock_path}")
            else:
                counts["ran"] += 1
                counts["failed"] += code != 0
                last_failure = code or last_failure
                log(f"{stamp} imgscale {' '.join(command)}: exit {code}")
    finally:
        if owned:
            _remove_unheld_lock(lock_path)
    if counts["failed"]:
        raise ScheduleFailed(
            f"schedule: {counts['failed']} of {counts['ran']} runs of imgscale {command[0]} "
            f"failed (the last with exit {last_failure}), {counts['skipped']} skipped; expected "
            "every run to exit 0"
        )
    return counts
