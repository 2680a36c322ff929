"""The run ledger: one SQLite file recording every imgscale job, what it ran and how it ended.

SQLite rather than a parquet dataset beside the output: a run's record changes while it runs
(heartbeat, rows done, then its outcome), several jobs write at once, and `imgscale runs` in
another terminal must see progress as it happens. SQLite updates a row in place inside a
transaction that a crash leaves all-or-nothing, and serialises concurrent writers with its own
file locks (WAL journal: readers never wait for the writer). A parquet dataset would need one
immutable file per event and a merge on every read. SQLite's locks need a local file system, so
the ledger belongs on a local disk (the per-user default is), not beside stores on S3 or NFS.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

from imgscale.storage.errors import StoreError

LEDGER_SCHEMA_VERSION = 2
# The statements that bring a ledger of each older version to the next: a writer upgrades the
# file in its transaction, so a ledger kept across imgscale versions keeps its runs. Version 2
# added the unit of a running job's progress (rows, images, iterations).
_UPGRADES = {1: ("ALTER TABLE runs ADD COLUMN progress_unit TEXT",)}
OUTCOMES = ("running", "ok", "failed", "cancelled", "lost")
# A run whose heartbeat is older than this is lost even where its pid cannot be checked (another
# host): the recording process beats every few seconds (jobs/runs.py).
STALE_AFTER_SECONDS = 120.0
# A pid is the same process only if it also started at the same time (pids are reused).
_START_TIME_TOLERANCE = 0.5

LOST_ERROR = "the process ended without recording an outcome (killed, or its machine stopped)"
_JSON_COLUMNS = ("spec", "command", "versions", "figures")
_COLUMNS = {
    "run_id": "TEXT PRIMARY KEY",
    "kind": "TEXT NOT NULL",
    "outcome": "TEXT NOT NULL",
    "started": "TEXT NOT NULL",
    "ended": "TEXT",
    "heartbeat": "REAL NOT NULL",
    "host": "TEXT NOT NULL",
    "pid": "INTEGER NOT NULL",
    "pid_started": "REAL",
    "cwd": "TEXT",
    "spec": "TEXT NOT NULL",
    "spec_file": "TEXT",
    "command": "TEXT NOT NULL",
    "scheduler": "TEXT",
    "versions": "TEXT NOT NULL",
    "git_commit": "TEXT",
    "rows_done": "INTEGER",
    "rows_total": "INTEGER",
    "pass": "TEXT",
    "progress_unit": "TEXT",
    "rows": "INTEGER",
    "figures": "TEXT",
    "error": "TEXT",
}


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


class Ledger:
    """The ledger at ``path`` (created on first write). Every method is one transaction."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @contextmanager
    def _transaction(self, write: bool) -> Iterator[sqlite3.Connection]:
        if not write and not self.path.exists():
            raise StoreError(f"ledger {self.path}: does not exist; no run has been recorded")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        except (OSError, sqlite3.Error) as e:
            raise StoreError(
                f"ledger {self.path}: cannot open ({e}); expected a writable file on a local "
                "disk (--ledger PATH or $IMGSCALE_LEDGER)"
            ) from e
        try:
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            # IMMEDIATE takes the write lock up front: two writers queue instead of deadlocking.
            db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            self._check_schema(db, write)
            yield db
            db.execute("COMMIT")
        except sqlite3.DatabaseError as e:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise StoreError(f"ledger {self.path}: {e}; expected an imgscale run ledger") from e
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        finally:
            db.close()

    def _check_schema(self, db: sqlite3.Connection, write: bool) -> None:
        """Create the table in a new file, upgrade an older schema on write (a reader sees its
        missing columns as empty), refuse a newer one. A file a first writer has just created,
        still empty, reads as a ledger without runs."""
        version = db.execute("PRAGMA user_version").fetchone()[0]
        columns = ", ".join(f"{name} {kind}" for name, kind in _COLUMNS.items())
        if version == 0 and not write:
            db.execute(f"CREATE TEMP TABLE runs ({columns})")
        elif version == 0:
            db.execute(f"CREATE TABLE runs ({columns})")
            db.execute("CREATE INDEX runs_started ON runs (started)")
            db.execute(f"PRAGMA user_version = {LEDGER_SCHEMA_VERSION}")
        elif version not in _UPGRADES and version != LEDGER_SCHEMA_VERSION:
            raise StoreError(
                f"ledger {self.path}: schema version {version}; expected {LEDGER_SCHEMA_VERSION} "
                "or older"
            )
        elif write and version != LEDGER_SCHEMA_VERSION:
            for older in range(version, LEDGER_SCHEMA_VERSION):
                for statement in _UPGRADES[older]:
                    db.execute(statement)
            db.execute(f"PRAGMA user_version = {LEDGER_SCHEMA_VERSION}")

    def start(self, record: dict[str, Any]) -> None:
        """Append a ``running`` record of this process, started now (after marking lost runs:
        this command writes anyway)."""
        unknown = set(record) - set(_COLUMNS)
        if unknown:
            raise StoreError(f"ledger {self.path}: unknown fields {sorted(unknown)}")
        row = {
            **record,
            "outcome": "running",
            "started": utc_now(),
            "heartbeat": time.time(),
            **process_identity(),
        }
        with self._transaction(write=True) as db:
            _mark_lost(db)
            db.execute(
                f"INSERT INTO runs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                [_encode(k, v) for k, v in row.items()],
            )

    def beat(self, run_id: str, **progress: Any) -> None:
        """Refresh a running record's heartbeat and its progress fields."""
        fields = {"heartbeat": time.time(), **progress}
        with self._transaction(write=True) as db:
            _update(db, run_id, fields, only_running=False)

    def finish(self, run_id: str, outcome: str, **fields: Any) -> None:
        """Record the end of a run: ``outcome`` and any of rows, figures, error."""
        if outcome not in OUTCOMES[1:]:
            raise StoreError(f"ledger {self.path}: outcome {outcome!r}; expected {OUTCOMES[1:]}")
        with self._transaction(write=True) as db:
            _update(db, run_id, {"outcome": outcome, "ended": utc_now(), **fields}, False)

    def mark_lost(self) -> int:
        """Mark as ``lost`` the running records whose process is gone; returns how many."""
        with self._transaction(write=True) as db:
            return _mark_lost(db)

    def runs(self, *, since: str | None = None, kind: str | None = None) -> list[dict[str, Any]]:
        """Records started at or after ``since`` (ISO time), of ``kind``, oldest first."""
        query, args = "SELECT * FROM runs WHERE 1", []
        if since is not None:
            query, args = query + " AND started >= ?", [*args, since]
        if kind is not None:
            query, args = query + " AND kind = ?", [*args, kind]
        with self._transaction(write=False) as db:
            return [_decode(row) for row in db.execute(query + " ORDER BY started, rowid", args)]

    def get(self, run_id: str) -> dict[str, Any]:
        """The record whose id is ``run_id`` or starts with it (a unique prefix)."""
        with self._transaction(write=False) as db:
            rows = db.execute(
                "SELECT * FROM runs WHERE run_id = ? OR run_id LIKE ? ESCAPE '\\' LIMIT 3",
                [
                    run_id,
                    run_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%",
                ],
            ).fetchall()
        exact = [r for r in rows if r["run_id"] == run_id]
        if exact or len(rows) == 1:
            return _decode((exact or rows)[0])
        found = "no run" if not rows else "more than one run"
        raise StoreError(f"ledger {self.path}: {found} with id {run_id!r}")


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


def _mark_lost(db: sqlite3.Connection) -> int:
    lost = []
    query = "SELECT run_id, host, pid, pid_started, heartbeat FROM runs WHERE outcome = 'running'"
    for row in db.execute(query):
        if holder_gone(
            row["host"], row["pid"], row["pid_started"], row["heartbeat"], STALE_AFTER_SECONDS
        ):
            lost.append(row["run_id"])
    for run_id in lost:
        _update(db, run_id, {"outcome": "lost", "error": LOST_ERROR}, only_running=True)
    return len(lost)


def _update(db: sqlite3.Connection, run_id: str, fields: dict[str, Any], only_running: bool):
    assignments = ", ".join(f"{name} = ?" for name in fields)
    condition = " AND outcome = 'running'" if only_running else ""
    cursor = db.execute(
        f"UPDATE runs SET {assignments} WHERE run_id = ?{condition}",
        [*(_encode(k, v) for k, v in fields.items()), run_id],
    )
    if cursor.rowcount == 0 and not only_running:
        raise StoreError(f"ledger: no run with id {run_id!r}")


def _encode(name: str, value: Any) -> Any:
    if name in _JSON_COLUMNS and value is not None:
        return json.dumps(value)
    return value


def _decode(row: sqlite3.Row) -> dict[str, Any]:
    record = dict.fromkeys(_COLUMNS) | dict(row)  # an older ledger read, not upgraded, lacks some
    for name in _JSON_COLUMNS:
        if record[name] is not None:
            record[name] = json.loads(record[name])
    return record
