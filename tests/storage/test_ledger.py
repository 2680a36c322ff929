"""The run ledger file: records round-trip, concurrent appends lose none, dead runs become lost."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from imgscale.storage import Ledger, StoreError
from imgscale.storage.ledger import STALE_AFTER_SECONDS


def _record(run_id: str, kind: str = "train") -> dict:
    return {
        "run_id": run_id,
        "kind": kind,
        "spec": {"store": "/data/s.zarr", "rho": 0.5},
        "command": ["imgscale", kind, "/data/s.zarr"],
        "versions": {"imgscale": "0.1.0"},
    }


def test_a_finished_run_reads_back_with_its_outcome_figures_and_spec(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    ledger.start(_record("a1"))
    running = ledger.get("a1")
    assert running["outcome"] == "running" and running["ended"] is None
    assert running["pid"] == os.getpid()
    ledger.beat("a1", rows_done=10, rows_total=40, **{"pass": "ingest"})
    assert (ledger.get("a1")["rows_done"], ledger.get("a1")["rows_total"]) == (10, 40)
    ledger.finish("a1", "ok", rows=40, figures={"top1_error": 0.25})
    record = ledger.get("a1")
    assert record["outcome"] == "ok" and record["rows"] == 40
    assert record["figures"] == {"top1_error": 0.25}
    assert record["spec"] == {"store": "/data/s.zarr", "rho": 0.5}
    assert record["ended"] >= record["started"]


def test_runs_filter_by_kind_and_start_time(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    ledger.start(_record("a1", "ingest"))
    ledger.start(_record("b2", "train"))
    assert [r["run_id"] for r in ledger.runs(kind="train")] == ["b2"]
    assert [r["run_id"] for r in ledger.runs()] == ["a1", "b2"]
    assert ledger.runs(since="2999-01-01T00:00:00+00:00") == []


def test_a_unique_prefix_finds_a_run_and_an_unknown_id_is_refused(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    ledger.start(_record("abc123"))
    ledger.start(_record("abd456"))
    assert ledger.get("abc")["run_id"] == "abc123"
    with pytest.raises(StoreError, match="more than one run with id 'ab'"):
        ledger.get("ab")
    with pytest.raises(StoreError, match="no run with id 'zz'"):
        ledger.get("zz")


def test_a_file_that_is_not_a_ledger_is_refused_and_left_unchanged(tmp_path):
    path = tmp_path / "notes.sqlite"
    path.write_text("not a database")
    with pytest.raises(StoreError, match="expected an imgscale run ledger"):
        Ledger(path).start(_record("a1"))
    assert path.read_text() == "not a database"


def test_a_ledger_of_another_schema_version_is_refused(tmp_path):
    path = tmp_path / "ledger.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version = 99")
    with pytest.raises(StoreError, match="schema version 99; expected 2 or older"):
        Ledger(path).runs()


# The runs table of schema version 1, as imgscale created it before progress had a unit.
VERSION_1_COLUMNS = (
    "run_id TEXT PRIMARY KEY, kind TEXT NOT NULL, outcome TEXT NOT NULL, started TEXT NOT NULL, "
    "ended TEXT, heartbeat REAL NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL, "
    "pid_started REAL, cwd TEXT, spec TEXT NOT NULL, spec_file TEXT, command TEXT NOT NULL, "
    "scheduler TEXT, versions TEXT NOT NULL, git_commit TEXT, rows_done INTEGER, "
    "rows_total INTEGER, pass TEXT, rows INTEGER, figures TEXT, error TEXT"
)


def test_a_version_1_ledger_reads_as_it_is_and_a_writer_upgrades_it_keeping_its_runs(tmp_path):
    path = tmp_path / "ledger.sqlite"
    with sqlite3.connect(path) as db:
        db.execute(f"CREATE TABLE runs ({VERSION_1_COLUMNS})")
        db.execute("PRAGMA user_version = 1")
        db.execute(
            "INSERT INTO runs (run_id, kind, outcome, started, heartbeat, host, pid, spec, "
            "command, versions, rows) VALUES ('old1', 'ingest', 'ok', '2026-01-01T00:00:00', "
            "0, 'h', 1, '{}', '[]', '{}', 297)"
        )
    ledger = Ledger(path)
    (old,) = ledger.runs()
    assert (old["run_id"], old["rows"], old["progress_unit"]) == ("old1", 297, None)
    with sqlite3.connect(path) as db:  # reading left the file as it was
        assert db.execute("PRAGMA user_version").fetchone()[0] == 1
    ledger.start(_record("new2"))
    ledger.beat("new2", rows_done=5, rows_total=9, progress_unit="iterations")
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 2
    assert [r["run_id"] for r in ledger.runs()] == ["old1", "new2"]
    assert ledger.get("old1")["rows"] == 297
    assert ledger.get("new2")["progress_unit"] == "iterations"


WRITER = textwrap.dedent(
    """
    import sys
    from imgscale.storage import Ledger
    ledger, who, count = Ledger(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    for i in range(count):
        run_id = f"{who}-{i}"
        ledger.start({"run_id": run_id, "kind": "ingest", "spec": {}, "command": [],
                      "versions": {}})
        ledger.finish(run_id, "ok", rows=i)
    """
)


def test_concurrent_appends_from_several_processes_lose_no_record(tmp_path):
    path, writers, count = tmp_path / "ledger.sqlite", 4, 25
    processes = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), f"w{w}", str(count)])
        for w in range(writers)
    ]
    assert [p.wait(timeout=120) for p in processes] == [0] * writers
    records = Ledger(path).runs()
    expected = {f"w{w}-{i}" for w in range(writers) for i in range(count)}
    assert {r["run_id"] for r in records} == expected
    assert len(records) == writers * count
    assert {r["outcome"] for r in records} == {"ok"}


STARTER = textwrap.dedent(
    """
    import sys, time
    from imgscale.storage import Ledger
    Ledger(sys.argv[1]).start({"run_id": "doomed", "kind": "train", "spec": {}, "command": [],
                               "versions": {}})
    print("started", flush=True)
    time.sleep(600)
    """
)


def test_a_run_whose_process_was_killed_is_marked_lost_by_the_next_writer(tmp_path):
    path = tmp_path / "ledger.sqlite"
    child = subprocess.Popen(
        [sys.executable, "-c", STARTER, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline() == "started\n"
        ledger = Ledger(path)
        assert ledger.mark_lost() == 0  # alive: stays running
        assert ledger.get("doomed")["outcome"] == "running"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    ledger.start(_record("next"))  # any write of the ledger checks the running records
    record = ledger.get("doomed")
    assert record["outcome"] == "lost"
    assert "ended without recording an outcome" in record["error"]
    assert ledger.get("next")["outcome"] == "running"


def test_a_run_of_another_host_with_a_stale_heartbeat_is_marked_lost(tmp_path):
    path = tmp_path / "ledger.sqlite"
    ledger = Ledger(path)
    ledger.start(_record("remote"))
    ledger.start(_record("fresh"))
    stale = time.time() - STALE_AFTER_SECONDS - 1
    with sqlite3.connect(path) as db:
        db.execute("UPDATE runs SET host = 'elsewhere', heartbeat = ? WHERE run_id = 'remote'",
                   [stale])  # fmt: skip
        db.execute("UPDATE runs SET host = 'elsewhere' WHERE run_id = 'fresh'")
    assert ledger.mark_lost() == 1
    assert ledger.get("remote")["outcome"] == "lost"
    assert ledger.get("fresh")["outcome"] == "running"
