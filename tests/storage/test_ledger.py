"""The run ledger on shared storage: records round-trip, concurrent writers (processes, on a
folder and on a real S3-compatible server) lose no event, one writer wins each generation claim,
dead runs read lost, the compacted index lists what the events say, older SQLite ledgers keep
their runs."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from imgscale.jobs.cli import cli
from imgscale.storage import Ledger, StoreError
from imgscale.storage.ledger import COMPACT_AFTER, STALE_AFTER_SECONDS

# A SQLite ledger written by imgscale before the ledger moved to shared storage: an ingest that
# ended ok (8 rows), one that failed, and a train whose process ended without an outcome.
SQLITE_FIXTURE = Path(__file__).parent.parent / "jobs" / "data" / "ledger-v2.sqlite"


def _record(run_id: str, kind: str = "train") -> dict:
    return {
        "run_id": run_id,
        "kind": kind,
        "spec": {"store": "/data/s.zarr", "rho": 0.5},
        "command": ["imgscale", kind, "/data/s.zarr"],
        "versions": {"imgscale": "0.1.0"},
    }


def test_a_finished_run_reads_back_with_its_outcome_figures_and_spec(tmp_path):
    ledger = Ledger(tmp_path / "ledger")
    ledger.start(_record("a1"))
    running = ledger.get("a1")
    assert running["outcome"] == "running" and running["ended"] is None
    assert running["pid"] == os.getpid()
    ledger.beat("a1", rows_done=10, rows_total=40, **{"pass": "ingest"})
    ledger.beat("a1", rows_done=20, rows_total=40, **{"pass": "ingest"})
    assert (ledger.get("a1")["rows_done"], ledger.get("a1")["rows_total"]) == (20, 40)
    beats = [n for n in os.listdir(tmp_path / "ledger" / "runs" / "a1") if "-beat-" in n]
    assert len(beats) == 1  # a beat replaces its own writer's previous one
    ledger.finish("a1", "ok", rows=40, figures={"top1_error": 0.25})
    record = ledger.get("a1")
    assert record["outcome"] == "ok" and record["rows"] == 40
    assert record["figures"] == {"top1_error": 0.25}
    assert record["spec"] == {"store": "/data/s.zarr", "rho": 0.5}
    assert record["ended"] >= record["started"]


def test_runs_filter_by_kind_and_start_time(tmp_path):
    ledger = Ledger(tmp_path / "ledger")
    ledger.start(_record("a1", "ingest"))
    time.sleep(1.1)  # started is kept to the second
    ledger.start(_record("b2", "train"))
    assert [r["run_id"] for r in ledger.runs(kind="train")] == ["b2"]
    assert [r["run_id"] for r in ledger.runs()] == ["a1", "b2"]
    assert ledger.runs(since="2999-01-01T00:00:00+00:00") == []


def test_a_unique_prefix_finds_a_run_and_an_unknown_id_is_refused(tmp_path):
    ledger = Ledger(tmp_path / "ledger")
    ledger.start(_record("abc123"))
    ledger.start(_record("abd456"))
    assert ledger.get("abc")["run_id"] == "abc123"
    with pytest.raises(StoreError, match="more than one run with id 'ab'"):
        ledger.get("ab")
    with pytest.raises(StoreError, match="no run with id 'zz'"):
        ledger.get("zz")


def test_a_file_given_as_the_ledger_is_refused_and_left_unchanged(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("not a ledger")
    with pytest.raises(StoreError, match=r"a file; expected a ledger folder or URL$"):
        Ledger(path)
    assert path.read_text() == "not a ledger"
    old = tmp_path / "old.sqlite"
    shutil.copy(SQLITE_FIXTURE, old)
    with pytest.raises(StoreError, match="SQLite ledger of an older imgscale: `imgscale runs imp"):
        Ledger(old)


def test_an_older_sqlite_ledger_is_imported_once_keeping_its_runs(tmp_path):
    ledger = Ledger(tmp_path / "ledger")
    assert ledger.import_sqlite(SQLITE_FIXTURE) == 3
    assert ledger.import_sqlite(SQLITE_FIXTURE) == 0  # a second import copies nothing
    ok, failed, killed = ledger.runs()
    assert (ok["kind"], ok["outcome"], ok["rows"]) == ("ingest", "ok", 8)
    assert ok["command"][:2] == ["imgscale", "ingest"] and ok["versions"]["imgscale"]
    assert failed["outcome"] == "failed" and "missing.npz: no such file" in failed["error"]
    assert (killed["run_id"], killed["outcome"]) == ("killed0train", "lost")
    # Reading left nothing beside the old file (SQLite's -shm and -wal side files).
    assert sorted(p.name for p in SQLITE_FIXTURE.parent.glob("ledger-v2*")) == ["ledger-v2.sqlite"]


def test_the_per_user_default_ledger_takes_in_the_older_sqlite_ledger_beside_it(
    tmp_path, monkeypatch
):
    monkeypatch.delenv("IMGSCALE_LEDGER")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    (tmp_path / "imgscale").mkdir()
    shutil.copy(SQLITE_FIXTURE, tmp_path / "imgscale" / "ledger.sqlite")
    for _ in range(2):  # the second listing finds the same runs, not copies
        listed = CliRunner().invoke(cli, ["runs", "--json"])
        assert listed.exit_code == 0, listed.output
        runs = json.loads(listed.stdout)
        assert [r["outcome"] for r in runs] == ["lost", "failed", "ok"]  # newest first
    assert (tmp_path / "imgscale" / "ledger" / "runs" / "killed0train").is_dir()


WRITER = textwrap.dedent(
    """
    import sys
    from imgscale.storage import Ledger
    ledger, who, count = Ledger(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    for i in range(count):
        ledger.start({"run_id": f"{who}-{i}", "kind": "ingest", "spec": {}, "command": [],
                      "versions": {}})
        ledger.log("shared", [f"{who} {i}"])
        ledger.finish(f"{who}-{i}", "ok", rows=i)
    """
)


def _concurrent_writers(url: str, writers: int, count: int) -> None:
    processes = [
        subprocess.Popen([sys.executable, "-c", WRITER, url, f"w{w}", str(count)])
        for w in range(writers)
    ]
    assert [p.wait(timeout=300) for p in processes] == [0] * writers
    ledger = Ledger(url)
    records = [r for r in ledger.runs() if r["run_id"] != "shared"]
    assert {r["run_id"] for r in records} == {
        f"w{w}-{i}" for w in range(writers) for i in range(count)
    }
    assert {r["outcome"] for r in records} == {"ok"}
    lines, _ = ledger.logs("shared")  # every writer appended to the same run's log
    assert sorted(lines) == sorted(f"w{w} {i}" for w in range(writers) for i in range(count))


def test_concurrent_writers_on_a_folder_lose_no_event(tmp_path):
    _concurrent_writers(str(tmp_path / "ledger"), writers=4, count=25)


def test_concurrent_writers_on_s3_lose_no_event(s3_bucket):
    _concurrent_writers(f"{s3_bucket}/ledger", writers=3, count=8)


CLAIMER = textwrap.dedent(
    """
    import sys
    from imgscale.storage import Ledger, StoreError
    try:
        print(Ledger(sys.argv[1]).claim_generation("r1", {"by": sys.argv[2]}))
    except StoreError as e:
        print("refused", e)
    """
)


@pytest.mark.parametrize("where", ["folder", "s3"])
def test_of_writers_claiming_a_generation_at_once_each_number_has_exactly_one_holder(
    where, tmp_path, request
):
    url = str(tmp_path / "ledger")
    if where == "s3":
        url = f"{request.getfixturevalue('s3_bucket')}/ledger"
    Ledger(url).start(_record("r1"))
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", CLAIMER, url, f"claimer {c}"], stdout=subprocess.PIPE, text=True
        )
        for c in range(6)
    ]
    answers = [p.communicate(timeout=120)[0].strip() for p in processes]
    won = [int(a) for a in answers if not a.startswith("refused")]
    assert len(won) == len(set(won)) >= 1  # never two holders of one generation
    assert Ledger(url).generation("r1") == max(won)
    for refusal in (a for a in answers if a.startswith("refused")):
        assert "is held by claimer " in refusal
        assert refusal.endswith("; this one stops")


@pytest.mark.parametrize("where", ["folder", "s3"])
def test_a_claim_refused_after_this_writer_read_the_run_names_the_other_processs_claim(
    where, tmp_path, request
):
    """As two ``resume`` calls run: each reads the run, then claims its next generation. The
    other process claims first, after this one read the run; this one is refused naming it."""
    url = str(tmp_path / "ledger")
    if where == "s3":
        url = f"{request.getfixturevalue('s3_bucket')}/ledger"
    ledger = Ledger(url)
    ledger.start(_record("r1"))
    ledger.claim_generation("r1", {"by": "the first attempt"})
    assert ledger.get("r1")["generation"] == 1  # read, as resume reads the run it continues
    other = subprocess.run(
        [sys.executable, "-c", CLAIMER, url, "the other resume"], capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert other.stdout.strip() == "2", other.stderr
    with pytest.raises(StoreError) as refused:
        ledger.claim_generation("r1", {"by": "this resume"}, 2)
    assert "generation 2 is held by the other resume (host " in str(refused.value)
    assert ledger.generation("r1") == 2


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


def test_a_run_whose_process_was_killed_reads_lost_with_no_writer(tmp_path):
    path = tmp_path / "ledger"
    child = subprocess.Popen(
        [sys.executable, "-c", STARTER, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline() == "started\n"
        assert Ledger(path).get("doomed")["outcome"] == "running"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    before = sorted(p.name for p in (path / "runs" / "doomed").iterdir())
    record = Ledger(path).get("doomed")
    assert record["outcome"] == "lost"
    assert "ended without recording an outcome" in record["error"]
    assert sorted(p.name for p in (path / "runs" / "doomed").iterdir()) == before


def test_a_run_of_another_host_reads_lost_once_its_heartbeat_is_stale(tmp_path):
    ledger = Ledger(tmp_path / "ledger")
    for run_id, age in (("remote", STALE_AFTER_SECONDS + 1), ("fresh", 1.0)):
        ledger.start(_record(run_id))
        # The beat another host's process writes: its host, its pid, its heartbeat.
        beat = {"host": "elsewhere", "pid": 1, "pid_started": 0.0, "heartbeat": time.time() - age}
        beat["order"] = [0, 2]  # generation 0 (none claimed), that writer's second event
        name = f"{time.time_ns():019d}-beat-00000000.json"
        (tmp_path / "ledger" / "runs" / run_id / name).write_text(json.dumps(beat))
    assert socket.gethostname() != "elsewhere"
    assert ledger.get("remote")["outcome"] == "lost"
    assert ledger.get("fresh")["outcome"] == "running"


def test_many_finished_runs_are_compacted_into_an_index_that_lists_the_same_records(tmp_path):
    ledger = Ledger(tmp_path / "ledger")
    for i in range(COMPACT_AFTER + 5):
        ledger.start(_record(f"r{i:04d}"))
        ledger.finish(f"r{i:04d}", "ok" if i % 2 else "failed", rows=i, error=None)
    ledger.start(_record("still"))
    from_events = ledger.runs()
    segments = sorted((tmp_path / "ledger" / "index").iterdir())
    assert [s.name for s in segments] == ["000000000000.json"]
    assert len(json.loads(segments[0].read_text())["runs"]) == COMPACT_AFTER + 5
    from_index = Ledger(tmp_path / "ledger").runs()
    assert from_index == from_events
    assert [r["outcome"] for r in from_index][-1] == "running"
    assert sum(r["outcome"] == "ok" for r in from_index) == (COMPACT_AFTER + 5) // 2
    ledger.start(_record("later"))  # a run after the index is listed from its events
    assert {r["run_id"] for r in ledger.runs()} >= {"later", "still", "r0000"}


def _skew(folder: Path, names: set[str], seconds: float) -> None:
    """Move the objects ``names`` of a run ``seconds`` back in time, as a writer whose clock is
    that far behind would have named (events) and stamped (claims) them."""
    for name in names:
        file = folder / name
        if name.startswith("g"):
            claim = json.loads(file.read_text())
            claim["ns"] -= int(seconds * 1e9)
            file.write_text(json.dumps(claim))
        else:
            ns, rest = name.split("-", 1)
            file.rename(folder / f"{int(ns) - int(seconds * 1e9):019d}-{rest}")


def test_a_newer_attempt_on_a_host_whose_clock_is_behind_still_folds_after_the_older_one(
    tmp_path,
):
    url = tmp_path / "ledger"
    folder = url / "runs" / "skewed"
    Ledger(url).submit(_record("skewed", kind="spec"))
    first = Ledger(url)  # the driver's first attempt
    assert first.claim_generation("skewed", {"by": "driver on w1"}) == 1
    first.resumed("skewed", worker="tcp://w1:1")
    first.beat("skewed", **{"pass": "job 1/2 ingest"})
    before = set(os.listdir(folder))
    second = Ledger(url)  # its rerun, on a host whose clock is a minute behind
    assert second.claim_generation("skewed", {"by": "driver on w2"}) == 2
    second.resumed("skewed", worker="tcp://w2:1")
    second.beat("skewed", **{"pass": "job 2/2 train"})
    _skew(folder, set(os.listdir(folder)) - before, 60.0)
    first.beat("skewed", **{"pass": "job 1/2 ingest"})  # the fenced attempt's last beat
    record = Ledger(url).get("skewed")
    assert (record["generation"], record["worker"], record["pass"]) == (
        2,
        "tcp://w2:1",
        "job 2/2 train",
    )
    before = set(os.listdir(folder))
    second.finish("skewed", "ok")
    _skew(folder, set(os.listdir(folder)) - before, 60.0)
    assert (Ledger(url).get("skewed")["outcome"], first.get("skewed")["worker"]) == (
        "ok",
        "tcp://w2:1",
    )


def test_a_run_recorded_by_an_older_imgscale_folds_by_time_with_its_claims(tmp_path):
    folder = tmp_path / "ledger" / "runs" / "older"
    folder.mkdir(parents=True)
    t = time.time_ns()
    events = {  # as the version before event counts wrote them: no "order"
        f"{t:019d}-submitted-00000001.json": {**_record("older", kind="spec"), "pass": "submitted",
                                              "started": "2026-01-01T00:00:00+00:00"},
        "g000001.json": {"by": "driver on w1", "ns": t + 1000},
        f"{t + 2000:019d}-resumed-00000002.json": {"worker": "tcp://w1:1", "host": "elsewhere",
                                                   "pid": 1, "heartbeat": time.time()},
        f"{t + 3000:019d}-finish-00000003.json": {"outcome": "ok", "ended": "2026-01-01T00:01"},
    }  # fmt: skip
    for name, body in events.items():
        (folder / name).write_text(json.dumps({**body, "run_id": "older"}))
    record = Ledger(tmp_path / "ledger").get("older")
    assert (record["outcome"], record["generation"], record["worker"]) == ("ok", 1, "tcp://w1:1")


def test_log_lines_read_in_attempt_order_and_follow_finds_lines_named_earlier_than_read_ones(
    tmp_path,
):
    url = tmp_path / "ledger"
    folder = url / "runs" / "skewed"
    Ledger(url).submit(_record("skewed", kind="spec"))
    first = Ledger(url)  # the driver task of the first attempt
    assert first.claim_generation("skewed", {"by": "driver on w1"}) == 1
    first.log("skewed", ["first 1"])
    first.log("skewed", ["first 2"])
    before = set(os.listdir(folder))
    second = Ledger(url)  # its rerun, on a host whose clock is a minute behind
    assert second.claim_generation("skewed", {"by": "driver on w2"}) == 2
    second.log("skewed", ["second 1", "second 2"])
    _skew(folder, set(os.listdir(folder)) - before, 60.0)
    lines, read = Ledger(url).logs("skewed")
    assert lines == ["first 1", "first 2", "second 1", "second 2"]
    before = set(os.listdir(folder))
    second.log("skewed", ["second 3"])  # named before every line already read
    _skew(folder, set(os.listdir(folder)) - before, 60.0)
    more, read = Ledger(url).logs("skewed", read)  # as `imgscale logs --follow` reads on
    assert more == ["second 3"]
    assert Ledger(url).logs("skewed", read)[0] == []  # no line twice
