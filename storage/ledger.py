"""The run ledger: every imgscale run, what it ran, where, how far it got and how it ended.

The ledger is a folder or an object-store prefix (``s3://bucket/ledger``: the URLs stores
accept) that every machine of a cluster can read, so a run submitted from a laptop is followed
from any other. Nothing in it is ever changed in place: each event of a run is one immutable
object, created create-only, as store commits are (storage/commit_log.py)::

    runs/{run_id}/{ns:019d}-{event}-{token}.json   one event: submitted, start, beat, log,
                                                   cancel, finish (ns: its time, token: random)
    runs/{run_id}/g{n:06d}.json                    the claim of the run's generation n
    index/{n:012d}.json                            a compacted segment of finished runs

Concurrent writers (the driver of a run, a ``cancel`` typed elsewhere, a second attempt of a
driver) never lose each other's writes and take no lock: their objects have distinct names, and
a run's record is the fold of its events. Where one writer must win (two attempts of a driver,
two ``resume`` calls), each creates the next generation claim create-only and the server
decides: exactly one creates it, and a writer whose generation is no longer the newest stops (it
has been fenced).

A local folder gets create-only from ``link(2)``, which refuses an existing name on every POSIX
file system, NFS included.

The fold orders events by the generation their writer held, then by that writer's own count of
its events (each event records both), never by the clocks of different hosts: the attempt of a
newer generation on a host whose clock is behind still folds after the older attempt's last
beat. Event times order only the events of older imgscale versions, which carry no count.

``lost`` is never written by a reader: a running record whose holder is gone (same host and its
pid ended, or a heartbeat older than `STALE_AFTER_SECONDS`) reads as ``lost``, so a read-only
ledger tells the truth and a holder that comes back is running again. A holder that knows its
run cannot go on (its scheduler is gone) records ``lost`` itself, with the reason.

Listing stays fast at many runs: a finished run (ok, failed, cancelled) never changes again, so
a reader that finds many finished runs outside the index writes them as the next index segment,
create-only (of two readers compacting at once one wins; the other's segment would have been the
same). A listing reads the segments and the folders of the runs no segment holds.

Ledgers of older imgscale versions were one SQLite file; `import_sqlite` copies its runs in once
(their events have fixed names, so importing again changes nothing).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import secrets
import shutil
import socket
import sqlite3
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import psutil

from imgscale.storage.errors import StoreError
from imgscale.storage.fs import Location, is_local, location, put_object

OUTCOMES = ("running", "ok", "failed", "cancelled", "lost")
# Outcomes after which a run never changes again (a lost run may be resumed).
FINAL_OUTCOMES = ("ok", "failed", "cancelled")
# A run whose heartbeat is older than this is lost even where its pid cannot be checked (another
# host): the recording process beats every few seconds (jobs/runs.py).
STALE_AFTER_SECONDS = 120.0
# A submitted run waits for a free driver slot without a heartbeat; past this it reads lost.
QUEUED_STALE_AFTER_SECONDS = 3600.0
# A pid is the same process only if it also started at the same time (pids are reused).
_START_TIME_TOLERANCE = 0.5
# Finished runs outside the index that make a reader write the next index segment.
COMPACT_AFTER = 100

LOST_ERROR = "the process ended without recording an outcome (killed, or its machine stopped)"
QUEUED_LOST_ERROR = "submitted, and no driver started it (the cluster went away, or is full)"
EVENTS = ("submitted", "start", "resumed", "beat", "log", "cancel", "finish")
RUNS, INDEX = "runs", "index"
# The fields of a run's record; events set some of them, the fold keeps the latest.
FIELDS = (
    "run_id", "kind", "outcome", "started", "ended", "heartbeat", "host", "pid", "pid_started",
    "worker", "cwd", "spec", "spec_file", "command", "scheduler", "versions", "git_commit",
    "rows_done", "rows_total", "pass", "progress_unit", "rows", "figures", "error", "parent",
    "children", "generation", "cancel_requested", "outputs",
)  # fmt: skip
_SQLITE_MAGIC = b"SQLite format 3\x00"
_IMPORTED = "imported-sqlite"


def utc_now() -> str:
    """Now, as the ledger keeps times: ISO, UTC, to the millisecond (runs started within one
    second still list in the order they started)."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


class Ledger:
    """The ledger at ``url``: a local folder (created on first write) or an object-store
    prefix. Every method reads or creates whole objects; none waits for another writer."""

    def __init__(self, url: str | os.PathLike | Location) -> None:
        self.root = location(url)
        self.url = str(url)
        if is_local(self.root) and self.root.is_file():
            old = self.root.read_bytes()[: len(_SQLITE_MAGIC)] == _SQLITE_MAGIC
            raise StoreError(
                f"ledger {self.url}: a file; expected a ledger folder or URL"
                + (
                    f" (this is the SQLite ledger of an older imgscale: `imgscale runs import "
                    f"{self.url} --ledger FOLDER` copies its runs into one)"
                    if old
                    else ""
                )
            )
        self._last_beat: dict[str, Location] = {}
        # Per run: the generation this writer claimed, and how many events it has written.
        self._held: dict[str, int] = {}
        self._written: dict[str, int] = {}

    # -- writing -------------------------------------------------------------------------------

    def submit(self, record: dict[str, Any]) -> None:
        """Record a run handed to a cluster: ``running`` at stage ``submitted``, with no process
        yet (it reads lost if no driver starts it within `QUEUED_STALE_AFTER_SECONDS`)."""
        self._check_fields(record)
        now = time.time()
        body = {**record, "started": utc_now(), "heartbeat": now, "pass": "submitted"}
        self._event(record["run_id"], "submitted", body)

    def start(self, record: dict[str, Any]) -> None:
        """Record the start of a run by this process."""
        self._check_fields(record)
        body = {**record, "started": utc_now(), "heartbeat": time.time(), **process_identity()}
        self._event(record["run_id"], "start", body)

    def resumed(self, run_id: str, **fields: Any) -> None:
        """Record that this process took run ``run_id`` over (a driver's attempt, a resume):
        it is running again, held by this process."""
        self._check_fields(fields)
        body = {**fields, "heartbeat": time.time(), **process_identity()}
        self._event(run_id, "resumed", body)

    def beat(self, run_id: str, **progress: Any) -> None:
        """Refresh the heartbeat and progress of a run; this process's previous beat of the run
        is deleted (a beat only ever replaces its own writer's)."""
        self._check_fields(progress)
        body = {**progress, "heartbeat": time.time(), **process_identity()}
        file = self._event(run_id, "beat", body)
        previous, self._last_beat[run_id] = self._last_beat.get(run_id), file
        if previous is not None:
            _delete(previous)

    def log(self, run_id: str, lines: list[str]) -> None:
        """Append lines of the run's output."""
        if lines:
            self._event(run_id, "log", {"lines": lines})

    def cancel(self, run_id: str, by: str) -> None:
        """Ask run ``run_id`` to stop at its next safe point; its driver records the outcome."""
        self._event(run_id, "cancel", {"cancel_requested": f"{utc_now()} by {by}"})

    def finish(self, run_id: str, outcome: str, **fields: Any) -> None:
        """Record the end of a run: ``outcome`` and any of rows, figures, error, outputs (the
        files it wrote)."""
        if outcome not in OUTCOMES[1:]:
            raise StoreError(f"ledger {self.url}: outcome {outcome!r}; expected {OUTCOMES[1:]}")
        self._check_fields(fields)
        self._event(run_id, "finish", {**fields, "outcome": outcome, "ended": utc_now()})

    def claim_generation(
        self, run_id: str, holder: dict[str, Any], generation: int | None = None
    ) -> int:
        """Create the claim of the run's generation ``generation`` (default: the one after the
        newest) and return its number. The claim makes the run read ``running``, waiting for its
        driver (as after `submit`). StoreError naming the holder if another writer created that
        claim first."""
        n = generation if generation is not None else (self.generation(run_id) or 0) + 1
        claim = self._run(run_id) / f"g{n:06d}.json"
        body = {**holder, **process_identity(), "since": utc_now(), "ns": time.time_ns()}
        try:
            _create(claim, json.dumps(body).encode())
        except FileExistsError:
            # The create was refused because the claim exists, so it reads back at once, once
            # this process forgets any listing of the run's folder it holds: taken before the
            # winner's create, it would say the claim is missing.
            _forget_listing(claim)
            winner = _read_json(claim)
            held = (
                f"is held by {winner.get('by')} (host {winner.get('host')}, pid "
                f"{winner.get('pid')}, since {winner.get('since')})"
                if winner is not None
                else "was claimed by another writer, whose claim has since gone"
            )
            raise StoreError(f"run {run_id}: generation {n} {held}; this one stops") from None
        self._held[run_id] = n
        return n

    def hold(self, run_id: str, generation: int) -> None:
        """Write this process's events of run ``run_id`` as generation ``generation``'s, which
        another process of the same attempt claimed (a driver task claims, its child runs the
        jobs): they fold and read in that generation's order."""
        self._held[run_id] = generation

    def generation(self, run_id: str) -> int | None:
        """The newest generation claimed of run ``run_id`` (None before any)."""
        claims = [int(n[1:7]) for n in _names(self._run(run_id)) if _is_claim(n)]
        return max(claims, default=None)

    def import_sqlite(self, file: str | os.PathLike) -> int:
        """Copy the runs of an older imgscale's SQLite ledger ``file`` in; returns how many were
        new. Each run becomes one event with a fixed name, so importing twice copies nothing."""
        added = 0
        for record in read_sqlite(file):
            started = dt.datetime.fromisoformat(record["started"])
            if started.tzinfo is None:
                started = started.replace(tzinfo=dt.UTC)
            ns = int(started.timestamp() * 1e9)
            name = f"{ns:019d}-start-{_IMPORTED}.json"
            fields = {k: v for k, v in record.items() if k in FIELDS and v is not None}
            try:
                _create(self._run(record["run_id"]) / name, json.dumps(fields).encode())
                added += 1
            except FileExistsError:
                pass
        return added

    # -- reading -------------------------------------------------------------------------------

    def runs(self, *, since: str | None = None, kind: str | None = None) -> list[dict[str, Any]]:
        """Records started at or after ``since`` (ISO time), of ``kind``, oldest first."""
        indexed = self._index()
        records = list(indexed.values())
        finished = []
        for run_id in _names(self.root / RUNS):
            if run_id in indexed:
                continue
            record = self._fold(run_id)
            if record is None:
                continue
            records.append(record)
            if record["outcome"] in FINAL_OUTCOMES:
                finished.append(record)
        if len(finished) >= COMPACT_AFTER:
            self._compact(finished)
        records = [_with_lost(r) for r in records]
        if since is not None:
            records = [r for r in records if r["started"] >= since]
        if kind is not None:
            records = [r for r in records if r["kind"] == kind]
        return sorted(records, key=lambda r: (r["started"], r["run_id"]))

    def get(self, run_id: str) -> dict[str, Any]:
        """The record whose id is ``run_id`` or starts with it (a unique prefix)."""
        ids = [name for name in _names(self.root / RUNS) if name.startswith(run_id)]
        exact = [name for name in ids if name == run_id]
        if not exact and len(ids) != 1:
            found = "no run" if not ids else "more than one run"
            raise StoreError(f"ledger {self.url}: {found} with id {run_id!r}")
        record = self._fold((exact or ids)[0])
        if record is None:
            raise StoreError(f"ledger {self.url}: no run with id {run_id!r}")
        return _with_lost(record)

    def logs(
        self, run_id: str, read: frozenset[str] = frozenset()
    ) -> tuple[list[str], frozenset[str]]:
        """The output lines of run ``run_id`` in the log events not named in ``read``, in the
        order events fold (by their writer's generation, then its count: a newer attempt's
        lines follow the older attempt's whatever the clocks of their hosts), and the names of
        every log event read so far (give them as ``read`` to read what follows)."""
        folder = self._run(run_id)
        new = [n for n in _names(folder) if _event_of(n) == "log" and n not in read]
        events = []
        for name in new:
            body = _read_json(folder / name) or {}
            # Lines of older imgscale versions carry no order: by time, before any that do.
            events.append(((*body.get("order", (0, 0)), name), body.get("lines", [])))
        lines = [line for _, chunk in sorted(events, key=lambda e: e[0]) for line in chunk]
        return lines, read | set(new)

    # -- inside ----------------------------------------------------------------------------------

    def _run(self, run_id: str) -> Location:
        if not run_id or "/" in run_id or run_id.startswith("."):
            raise StoreError(f"ledger {self.url}: {run_id!r} is not a run id")
        return self.root / RUNS / run_id

    def _check_fields(self, fields: dict[str, Any]) -> None:
        unknown = set(fields) - set(FIELDS)
        if unknown:
            raise StoreError(f"ledger {self.url}: unknown fields {sorted(unknown)}")

    def _event(self, run_id: str, event: str, body: dict[str, Any]) -> Location:
        """Create the object of one event of run ``run_id``; returns it."""
        name = f"{time.time_ns():019d}-{event}-{secrets.token_hex(4)}.json"
        file = self._run(run_id) / name
        self._written[run_id] = self._written.get(run_id, 0) + 1
        order = [self._held.get(run_id, 0), self._written[run_id]]
        try:
            _create(file, json.dumps({**body, "run_id": run_id, "order": order}).encode())
        except OSError as e:
            raise StoreError(
                f"ledger {self.url}: cannot write ({e}); expected a writable folder or URL "
                "(--ledger URL or $IMGSCALE_LEDGER)"
            ) from e
        return file

    def _fold(self, run_id: str) -> dict[str, Any] | None:
        """The record of run ``run_id`` from its events in order (None without any): by the
        generation their writer held and its count, a generation's claim first among them."""
        folder = self._run(run_id)
        names = _names(folder)
        record: dict[str, Any] = dict.fromkeys(FIELDS)
        record["run_id"] = run_id
        events = []
        for name in names:
            event = _event_of(name) or ("claim" if _is_claim(name) else None)
            if event not in (None, "log"):
                body = _read_json(folder / name)
                if body is not None:  # else a beat deleted since the listing
                    events.append((event, name, body))
        # Events of older imgscale versions carry no order: by time, each claim at its time.
        timed = not any("order" in body for event, _, body in events if event != "claim")
        ordered = []
        for event, name, body in events:
            if event == "claim":
                n = int(name[1:7])
                record["generation"] = max(record["generation"] or 0, n)
                key = (0, 0, f"{body.get('ns', 0):019d}-claim") if timed else (n, 0, name)
            else:
                key = (*(body.get("order") or (0, 0)), name)
            ordered.append((key, event, body))
        seen = False
        for _, event, body in sorted(ordered, key=lambda item: item[0]):
            if event == "claim":
                # Claimed, its driver not started yet: running, held by no process so far.
                record.update(outcome="running", ended=None, error=None, host=None, pid=None)
                record.update(pid_started=None, heartbeat=body.get("ns", 0) / 1e9)
                record["pass"] = "submitted"
                continue
            seen = True
            if event in ("submitted", "start", "resumed"):
                record.update({"outcome": "running", "ended": None, "error": None})
                if event == "submitted":
                    record.update(host=None, pid=None, pid_started=None)
            if event == "cancel":
                record["cancel_requested"] = body.get("cancel_requested")
                continue
            record.update({k: v for k, v in body.items() if k in FIELDS and k != "generation"})
        return record if seen and record["kind"] is not None else None

    def _index(self) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        for name in sorted(_names(self.root / INDEX)):
            segment = _read_json(self.root / INDEX / name) or {}
            for record in segment.get("runs", []):
                found[record["run_id"]] = dict.fromkeys(FIELDS) | record
        return found

    def _compact(self, finished: list[dict[str, Any]]) -> None:
        """Write ``finished`` as the next index segment; a reader that cannot write, or loses
        the race to another reader, leaves it to the next one."""
        numbers = [int(n[:12]) for n in _names(self.root / INDEX) if n[:12].isdigit()]
        n = max(numbers, default=-1) + 1
        body = json.dumps({"runs": sorted(finished, key=lambda r: r["run_id"])}).encode()
        try:
            _create(self.root / INDEX / f"{n:012d}.json", body)
        except OSError:
            pass


def _with_lost(record: dict[str, Any]) -> dict[str, Any]:
    """``record``, reading ``lost`` if it is running and its holder is gone."""
    if record["outcome"] != "running":
        return record
    if record["host"] is None:  # submitted, no driver yet
        if time.time() - (record["heartbeat"] or 0) > QUEUED_STALE_AFTER_SECONDS:
            return {**record, "outcome": "lost", "error": QUEUED_LOST_ERROR}
        return record
    if holder_gone(
        record["host"],
        record["pid"],
        record["pid_started"],
        record["heartbeat"] or 0,
        STALE_AFTER_SECONDS,
    ):
        return {**record, "outcome": "lost", "error": LOST_ERROR}
    return record


def _event_of(name: str) -> str | None:
    parts = name.split("-", 2)
    if len(parts) == 3 and parts[0].isdigit() and parts[1] in EVENTS:
        return parts[1]
    return None


def _is_claim(name: str) -> bool:
    return len(name) == 12 and name[0] == "g" and name[1:7].isdigit() and name.endswith(".json")


def _create(file: Location, data: bytes) -> None:
    """Create ``file`` holding ``data`` whole, or raise FileExistsError if it exists."""
    if not is_local(file):
        put_object(file, data, create_only=True)
        return
    file.parent.mkdir(parents=True, exist_ok=True)
    temporary = file.with_name(f".{file.name}.{secrets.token_hex(4)}")
    try:
        with open(temporary, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.link(temporary, file)  # refuses an existing name: the create-only step
    finally:
        temporary.unlink(missing_ok=True)


def _names(folder: Location) -> list[str]:
    """Names directly under ``folder`` (fresh, never a cached listing); none if it is missing."""
    if is_local(folder):
        try:
            return [n for n in os.listdir(folder) if not n.startswith(".")]
        except (FileNotFoundError, NotADirectoryError):
            return []
    fs = folder.fs
    fs.invalidate_cache(folder.path)
    try:
        return [e.rstrip("/").rsplit("/", 1)[-1] for e in fs.ls(folder.path, detail=False)]
    except FileNotFoundError:
        return []


def _read_json(file: Location) -> dict[str, Any] | None:
    try:
        # An object store's file system (s3fs) takes the object's size from its cached listing
        # of the folder where it holds one: read names listed since they were created, or
        # `_forget_listing` first.
        body = json.loads(file.read_bytes() if is_local(file) else file.fs.cat_file(file.path))
    except FileNotFoundError:
        return None
    except ValueError as e:
        raise StoreError(f"{file}: not valid JSON ({e}); expected a ledger event") from e
    if not isinstance(body, dict):
        raise StoreError(f"{file}: a {type(body).__name__}; expected a ledger event object")
    return body


def _forget_listing(file: Location) -> None:
    """Drop the cached listings of ``file``'s folders (an object store's file system keeps them;
    a listing older than ``file`` makes it read as missing: fsspec/s3fs #851)."""
    if not is_local(file):
        file.fs.invalidate_cache(file.path)


def _delete(file: Location) -> None:
    try:
        if is_local(file):
            file.unlink()
        else:
            file.fs.rm_file(file.path)
    except FileNotFoundError:
        pass


# The columns an older imgscale's SQLite ledger kept as JSON text.
_SQLITE_JSON_COLUMNS = ("spec", "command", "versions", "figures")


def read_sqlite(file: str | os.PathLike) -> Iterable[dict[str, Any]]:
    """The runs of an older imgscale's SQLite ledger (any schema version). Read from a copy (with
    its write-ahead log, if one was left): SQLite writes beside a file even to read it, and the
    old ledger stays exactly as it was."""
    path = Path(file)
    if not path.is_file() or path.read_bytes()[: len(_SQLITE_MAGIC)] != _SQLITE_MAGIC:
        raise StoreError(f"{file}: not a SQLite file; expected an older imgscale's run ledger")
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "ledger.sqlite"
        shutil.copyfile(path, copy)
        log = path.with_name(path.name + "-wal")
        if log.is_file():
            shutil.copyfile(log, copy.with_name(copy.name + "-wal"))
        try:
            with contextlib.closing(sqlite3.connect(copy)) as db:
                db.row_factory = sqlite3.Row
                query = "SELECT * FROM runs ORDER BY started, rowid"
                rows = [dict(row) for row in db.execute(query)]
        except sqlite3.Error as e:
            raise StoreError(f"{file}: {e}; expected an older imgscale's run ledger") from e
    for row in rows:
        for name in _SQLITE_JSON_COLUMNS:
            if row.get(name) is not None:
                row[name] = json.loads(row[name])
        yield row


def _process_started(pid: int) -> float | None:
    """The start time of process ``pid`` (to tell it from a later process given the same pid)."""
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def holder_gone(
    host: str, pid: int, pid_started: float | None, heartbeat: float, stale_after: float
) -> bool:
    """Whether the process that recorded (host, pid, pid_started) and last beat at ``heartbeat``
    is gone: on this host, its pid is not alive with that start time; anywhere, the heartbeat is
    older than ``stale_after`` seconds."""
    if host == socket.gethostname():
        started = _process_started(pid)
        if started is None or pid_started is None:
            return True
        if abs(started - pid_started) > _START_TIME_TOLERANCE:
            return True
    return time.time() - heartbeat > stale_after


def process_identity() -> dict[str, Any]:
    """This process as `holder_gone` checks it: host, pid and the pid's start time."""
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "pid_started": _process_started(os.getpid()),
    }
