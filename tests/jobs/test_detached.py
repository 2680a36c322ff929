"""Runs that live on the cluster, with real processes: `dask scheduler` and `dask worker`
processes on 127.0.0.1 (workers without a nanny, so SIGKILL of a worker's pid kills the worker),
the `imgscale` script, SIGKILL for the faults. Each fault of issue 43 item 5 is one test:

- the submitting CLI killed right after it prints the run id: the run ends ok;
- the worker hosting the driver killed mid-ingest: the driver runs again on another worker as
  generation 2, and every row is committed exactly once;
- the scheduler killed: the run reads lost within a bounded time; `resume` on a new cluster ends
  it ok with the stores of an uninterrupted run; of two resumes at once exactly one wins;
- a compute worker killed mid-job: the run ends ok.

The driver-worker and scheduler faults run with the ledger in a folder and on a real
S3-compatible server (moto, a process).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from fsspec.core import url_to_fs
from sklearn.datasets import load_digits

from imgscale.jobs.cli import cli
from imgscale.storage import Ledger, open_store
from tests.processes import start_logged, wait_for_workers, wait_until

IMGSCALE = str(Path(sys.executable).with_name("imgscale"))
DASK = str(Path(sys.executable).with_name("dask"))
TIMEOUT = 240.0
ROWS = 1_600_000  # big.npz: an ingest of several seconds on a quiet machine


class Cluster:
    """A scheduler and workers as processes, each listening on a port it binds itself and
    logging to a file in ``folder``; ``workers`` maps each worker's address, as the scheduler
    knows it, to its process, the driver workers first."""

    def __init__(self, folder: Path, drivers: int, plain: int) -> None:
        folder.mkdir()
        self.folder = folder
        self.started: dict[str, tuple[subprocess.Popen, Path]] = {}
        scheduler_file = folder / "scheduler.json"
        located = ["--scheduler-file", str(scheduler_file)]
        self.scheduler = self._start("scheduler", "--host", "127.0.0.1", "--port", "0", *located)
        try:
            wait_until(scheduler_file.exists, "the scheduler file", self.started, 60)
            started = [
                self._start(
                    "worker", *located, "--nthreads", "1", "--host", "127.0.0.1", "--no-nanny",
                    *(["--resources", resources] if resources else []),
                )
                for resources in ["driver=1"] * drivers + [None] * plain
            ]  # fmt: skip
            from distributed import Client

            with Client(scheduler_file=str(scheduler_file), timeout="60s") as client:
                wait_for_workers(client, len(started), self.started)
                self.address = client.scheduler.address
                address_of = {pid: address for address, pid in client.run(os.getpid).items()}
            self.workers = {address_of[process.pid]: process for process in started}
        except BaseException:
            self.stop()
            raise

    def _start(self, role: str, *args: str) -> subprocess.Popen:
        name = f"{role}-{len(self.started)}"
        log = self.folder / f"{name}.log"
        self.started[name] = (start_logged([DASK, role, *args, "--no-dashboard"], log), log)
        return self.started[name][0]

    def kill(self, process: subprocess.Popen) -> None:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)

    def stop(self) -> None:
        for process, _ in self.started.values():
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
            process.wait(timeout=30)


@pytest.fixture
def cluster_factory(tmp_path):
    made: list[Cluster] = []

    def make(drivers: int = 1, plain: int = 1) -> Cluster:
        made.append(Cluster(tmp_path / f"cluster-{len(made)}", drivers, plain))
        return made[-1]

    yield make
    for cluster in made:
        cluster.stop()


@pytest.fixture
def work(tmp_path) -> Path:
    """digits' 1,400 training rows as train.npz, ROWS rows × 16 as big.npz (an ingest of
    several seconds), and a spec ingesting and training on each."""
    digits = load_digits()
    np.savez(
        tmp_path / "train.npz", X=digits.data[:1400].astype(np.float32), y=digits.target[:1400]
    )
    rng = np.random.default_rng(0)
    X = rng.standard_normal((ROWS, 16)).astype(np.float32)
    np.savez(tmp_path / "big.npz", X=X, y=np.arange(len(X)) % 4)
    for name, src in (("small", "train.npz"), ("big", "big.npz")):
        (tmp_path / f"{name}.toml").write_text(
            f'[[jobs]]\nkind = "ingest"\nsrc = "{src}"\nstore = "{name}.zarr"\n\n'
            f'[[jobs]]\nkind = "train"\nstore = "{name}.zarr"\nmodel = "{name}.model"\n'
            'method = "ncm"\n'
        )
    return tmp_path


@pytest.fixture(params=["folder", pytest.param("s3", marks=pytest.mark.slow)])
def ledger(request, work) -> Path | str:
    """The ledger of a fault test: a folder, or a prefix on a real S3-compatible server (moto, a
    process; the cluster the test starts inherits its address and test credentials)."""
    if request.param == "s3":
        return f"{request.getfixturevalue('s3_bucket')}/ledger"
    return work / "ledger"


def _imgscale(*args: str, ledger: Path | str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [IMGSCALE, *args, "--ledger", str(ledger)], capture_output=True, text=True, timeout=timeout
    )


def _submit(spec: Path, cluster: Cluster, ledger: Path | str) -> str:
    done = _imgscale("submit", str(spec), "--scheduler", cluster.address, "--json", ledger=ledger)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["run_id"]


def _status(run_id: str, ledger: Path | str) -> dict:
    """`imgscale status --json`, run in this process by click's runner: the tests poll it every
    half second, and a process start a poll would cost more CPU than the runs they watch."""
    shown = CliRunner().invoke(cli, ["status", run_id, "--json", "--ledger", str(ledger)])
    assert shown.exit_code == 0, shown.output
    return json.loads(shown.stdout)


def _wait(run_id: str, ledger: Path | str, until, what: str, timeout: float = TIMEOUT) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = _status(run_id, ledger)
        if until(status):
            return status
        assert status["outcome"] in ("running", "lost"), (
            f"run {run_id} ended before {what}: {status}"
        )
        time.sleep(0.5)
    raise AssertionError(f"run {run_id} never {what}: {status}")


def _ended(status: dict) -> bool:
    return status["outcome"] != "running"


def _finished(status: dict) -> bool:
    """Ended for good: between a driver's death and Dask's rerun of it the run reads lost."""
    return status["outcome"] in ("ok", "failed", "cancelled")


def _ingesting(status: dict) -> bool:
    return (status["stage"] or "").startswith("job 1/2 ingest")


def test_a_run_submitted_by_a_cli_killed_after_printing_its_id_ends_ok(work, cluster_factory):
    cluster = cluster_factory()
    ledger = work / "ledger"
    cli = subprocess.Popen(
        [IMGSCALE, "submit", str(work / "small.toml"), "--scheduler", cluster.address,
         "--ledger", str(ledger)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    run_id = cli.stdout.readline().strip()
    cli.send_signal(signal.SIGKILL)  # the laptop closes
    cli.wait(timeout=30)
    assert len(run_id) == 12, cli.stderr.read()
    status = _wait(run_id, ledger, _ended, "ended")
    assert status["outcome"] == "ok", status
    assert status["worker"] in cluster.workers  # the worker offering the driver resource
    assert status["worker"] == next(iter(cluster.workers))
    assert open_store(work / "small.zarr").committed_rows == 1400
    assert (work / "small.model").is_dir()
    jobs = [r for r in Ledger(ledger).runs() if r["kind"] != "spec"]
    assert [(r["kind"], r["outcome"]) for r in jobs] == [("ingest", "ok"), ("train", "ok")]
    logs = _imgscale("logs", run_id, ledger=ledger).stdout
    assert "job 2/2: imgscale train " in logs and f"run {run_id}: 2 jobs ok" in logs


def test_a_spec_with_problems_or_paths_the_workers_cannot_reach_submits_nothing(work):
    ledger = work / "ledger"
    (work / "bad.toml").write_text('kind = "train"\nstore = "none.zarr"\nmodel = "m.model"\n')
    bad = _imgscale(
        "submit", str(work / "bad.toml"), "--scheduler", "tcp://127.0.0.1:9", ledger=ledger
    )
    assert bad.returncode == 1
    assert "bad.toml: job 1 (train): key 'store': store " in bad.stderr
    # A remote scheduler (never contacted: the spec is refused first) cannot read this
    # machine's relative paths: each is named.
    far = _imgscale(
        "submit", str(work / "small.toml"), "--scheduler", "tcp://10.0.0.9:8786", ledger=ledger
    )
    assert far.returncode == 1
    refusals = [line for line in far.stderr.splitlines() if "is relative to this machine" in line]
    assert [r.split("key ")[1].split(":")[0] for r in refusals] == [
        "'src'",
        "'store'",
        "'store'",
        "'model'",
    ]
    assert "the workers of tcp://10.0.0.9:8786 cannot reach it" in refusals[0]
    assert not ledger.exists()


def test_cancel_stops_the_run_at_a_safe_point_and_the_store_stays_as_committed(
    work, cluster_factory
):
    cluster = cluster_factory()
    ledger = work / "ledger"
    run_id = _submit(work / "big.toml", cluster, ledger)
    _wait(run_id, ledger, _ingesting, "started its ingest")
    asked = _imgscale("cancel", run_id, "--json", ledger=ledger)
    assert json.loads(asked.stdout) == {"run_id": run_id, "cancel_requested": True}
    status = _wait(run_id, ledger, _ended, "ended")
    assert (status["outcome"], status["error"]) == ("cancelled", "cancelled by imgscale cancel")
    assert not (work / "big.zarr" / "zarr.json").exists() or (
        open_store(work / "big.zarr").committed_rows in (0, ROWS)
    )
    assert not (work / "big.model").exists()
    again = _imgscale("cancel", run_id, ledger=ledger)
    assert again.returncode == 1 and "has ended (cancelled); nothing to cancel" in again.stderr


def test_the_driver_worker_killed_mid_ingest_reruns_elsewhere_fenced_and_ends_ok(
    work, cluster_factory, ledger
):
    cluster = cluster_factory(drivers=2, plain=1)
    run_id = _submit(work / "big.toml", cluster, ledger)
    first = _wait(run_id, ledger, _ingesting, "started its ingest")
    assert first["generation"] == 1
    cluster.kill(cluster.workers[first["worker"]])  # the driver and its child with it
    status = _wait(run_id, ledger, _finished, "ended")
    assert status["outcome"] == "ok", status
    assert status["generation"] == 2 and status["worker"] != first["worker"]
    store = open_store(work / "big.zarr")
    assert store.committed_rows == ROWS  # every row exactly once
    assert len(set(store.rows()["id"].to_pylist())) == ROWS
    # The lines each attempt's task copied are written as its generation's, so they read in
    # attempt order whatever the clocks of the hosts.
    fs, folder = url_to_fs(f"{ledger}/runs/{run_id}")
    names = fs.ls(folder, detail=False, refresh=True)
    logged = [json.loads(fs.cat_file(name)) for name in names if "-log-" in name]
    assert {body["order"][0] for body in logged} <= {1, 2}
    logs = _imgscale("logs", run_id, ledger=ledger)
    assert logs.stdout.splitlines()[-1] == f"run {run_id}: 2 jobs ok", logs.stdout


def test_a_compute_worker_killed_mid_job_and_the_run_still_ends_ok(work, cluster_factory):
    cluster = cluster_factory(drivers=1, plain=2)
    ledger = work / "ledger"
    run_id = _submit(work / "big.toml", cluster, ledger)
    running = _wait(run_id, ledger, _ingesting, "started its ingest")
    compute = [a for a in cluster.workers if a != running["worker"]]
    cluster.kill(cluster.workers[compute[0]])
    status = _wait(run_id, ledger, _finished, "ended")
    assert status["outcome"] == "ok", status
    assert open_store(work / "big.zarr").committed_rows == ROWS


def test_a_run_whose_scheduler_died_reads_lost_and_one_of_two_resumes_ends_it_ok(
    work, cluster_factory, ledger
):
    first = cluster_factory()
    run_id = _submit(work / "big.toml", first, ledger)
    _wait(run_id, ledger, _ingesting, "started its ingest")
    first.kill(first.scheduler)
    killed = time.monotonic()
    lost = _wait(run_id, ledger, _ended, "read lost", timeout=120)
    # The worker closes when its scheduler is gone, and its driver child dies with it; a child
    # that outlives it records the reason itself.
    assert lost["outcome"] == "lost"
    assert f"scheduler {first.address} lost" in lost["error"] or "process ended" in lost["error"]
    print(f"lost after {time.monotonic() - killed:.1f} s")
    second = cluster_factory()
    with ThreadPoolExecutor(2) as pool:
        resumes = list(pool.map(
            lambda _: _imgscale("resume", run_id, "--scheduler", second.address, ledger=ledger),
            range(2),
        ))  # fmt: skip
    assert sorted(r.returncode for r in resumes) == [0, 1], [r.stderr for r in resumes]
    (loser,) = [r for r in resumes if r.returncode == 1]
    assert ("generation 2 is held by imgscale resume on" in loser.stderr
            or " is running; only a lost run of `imgscale submit` is resumed" in loser.stderr
            ), loser.stderr  # fmt: skip
    status = _wait(run_id, ledger, _ended, "ended")
    assert status["outcome"] == "ok", status
    assert status["worker"] in second.workers
    resumed = open_store(work / "big.zarr")
    assert resumed.committed_rows == ROWS
    # The same model as an uninterrupted run of the same spec.
    uninterrupted = work / "again.toml"
    uninterrupted.write_text(
        (work / "big.toml")
        .read_text()
        .replace("big.zarr", "again.zarr")
        .replace("big.model", "again.model")
    )
    done = _imgscale(
        "run", str(uninterrupted), "--scheduler", second.address, ledger=ledger, timeout=TIMEOUT
    )
    assert done.returncode == 0, done.stderr
    from imgscale.storage import load_model

    (resumed_steps, _), (again_steps, _) = (
        load_model(work / "big.model"),
        load_model(work / "again.model"),
    )
    for step, peer in zip(resumed_steps, again_steps, strict=True):
        assert step.arrays.keys() == peer.arrays.keys()
        for name in step.arrays:
            assert np.array_equal(step.arrays[name], peer.arrays[name]), name


README = Path(__file__).resolve().parents[2] / "README.md"
EXAMPLES = README.parent / "examples"


def test_the_readme_detached_runs_lines_run_verbatim(tmp_path, cluster_factory):
    text = README.read_text()
    after = text[text.index("**Detached runs: submit, close the terminal") :]
    block = re.search(r"^```bash\n(.*?)^```", after, flags=re.M | re.S).group(1)
    cluster = cluster_factory()
    specs = tmp_path / "specs"
    specs.mkdir()
    digits = load_digits()
    X, y = digits.data.astype(np.float32), digits.target
    for name, rows in (
        ("train", slice(0, 1000)),
        ("val", slice(1000, 1300)),
        ("test", slice(1300, None)),
    ):
        np.savez(specs / f"{name}.npz", X=X[rows], y=y[rows])
    for spec in ("ingest.toml", "train.toml"):
        shutil.copy(EXAMPLES / spec, specs / spec)
    ledger = tmp_path / "ledger"
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "DASK_SCHEDULER_ADDRESS": cluster.address,
        "IMGSCALE_LEDGER": str(ledger),
    }
    done = subprocess.run(
        ["bash", "-e", "-c", block], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    submitted = [r for r in Ledger(ledger).runs() if r["kind"] == "spec"]
    assert [r["outcome"] for r in submitted] == ["ok", "cancelled"]
    assert open_store(specs / "digits.zarr").committed_rows == len(X)
    assert '"outcome": "ok"' in done.stdout


def test_a_schedule_on_the_cluster_records_each_turn_goes_on_after_a_failed_one_and_cancels(
    work, cluster_factory
):
    cluster = cluster_factory()
    ledger = work / "ledger"
    (work / "turns.toml").write_text('kind = "ingest"\nsrc = "train.npz"\nstore = "turns.zarr"\n')
    done = _imgscale(
        "submit", str(work / "turns.toml"), "--every", "15s", "--scheduler", cluster.address,
        ledger=ledger,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip()
    book = Ledger(ledger)

    def turns() -> list[dict]:
        return [r for r in book.runs(kind="turn") if r["parent"] == run_id]

    def wait_for_turns(count: int) -> list[dict]:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            ended = [t for t in turns() if t["outcome"] != "running"]
            if len(ended) >= count:
                return ended
            time.sleep(0.5)
        raise AssertionError(f"fewer than {count} turns ended: {turns()}")

    assert [t["outcome"] for t in wait_for_turns(1)] == ["ok"]
    hidden = work / "train.npz.away"
    (work / "train.npz").rename(hidden)  # the next turn's source is missing: that turn fails
    second = wait_for_turns(2)[1]
    assert second["outcome"] == "failed" and "train.npz" in second["error"]
    hidden.rename(work / "train.npz")
    third = wait_for_turns(3)[2]
    assert third["outcome"] == "ok"  # the schedule went on, on the same cluster
    assert open_store(work / "turns.zarr").committed_rows == 1400  # the same rows once
    assert _status(run_id, ledger)["outcome"] == "running"
    _imgscale("cancel", run_id, ledger=ledger)
    status = _wait(run_id, ledger, _ended, "ended")
    assert status["outcome"] == "cancelled"


@pytest.mark.parametrize("shared", ["folder", pytest.param("s3", marks=pytest.mark.slow)])
def test_a_submitted_benchmark_writes_its_results_where_out_says_and_its_record_lists_them(
    request, tmp_path, cluster_factory, shared
):
    import fsspec
    import pyarrow.parquet as pq

    if shared == "s3":  # results and ledger on a real S3-compatible server (moto, a process)
        bucket = request.getfixturevalue("s3_bucket")
        out, ledger = f"{bucket}/bench-out", f"{bucket}/ledger"
    else:
        out, ledger = str(tmp_path / "shared" / "bench-out"), tmp_path / "ledger"
    cluster = cluster_factory()
    done = _imgscale(
        "bench", "ridge", "--scale", "tiny", "--out", out, "--scheduler", cluster.address,
        "--submit", "--json", ledger=ledger,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    run_id = json.loads(done.stdout)["run_id"]
    status = _wait(run_id, ledger, _ended, "ended")
    logs = _imgscale("logs", run_id, ledger=ledger).stdout
    assert (status["kind"], status["outcome"]) == ("bench", "ok"), (status, logs[-3000:])
    assert status["worker"] == next(iter(cluster.workers))  # the driver worker ran the suite
    results, report = f"{out}/results.parquet", f"{out}/report.md"
    assert status["outputs"][:2] == [results, report]
    assert f"{out}/ridge-dask.html" in status["outputs"]
    assert all(file.rsplit("/", 1)[0] == out for file in status["outputs"])
    for file in status["outputs"]:
        assert fsspec.open(file).fs.exists(file), file
    with fsspec.open(results, "rb") as table:
        rows = pq.read_table(table).to_pylist()
    assert {row["benchmark"] for row in rows} == {"machine", "ridge"}
    ridge = {row["name"] for row in rows if row["benchmark"] == "ridge"}
    assert {"ridge fit, 8-value rho grid, wall", "ridge fit throughput"} <= ridge
    with fsspec.open(report, "rt") as text:
        assert "\n## ridge: " in text.read()
    assert Ledger(ledger).get(run_id)["outputs"] == status["outputs"]


def test_a_benchmark_submitted_with_folders_the_workers_cannot_reach_submits_nothing(tmp_path):
    ledger = tmp_path / "ledger"
    far = _imgscale(
        "bench", "ridge", "--scale", "tiny", "--out", "bench-out", "--scheduler",
        "tcp://10.0.0.9:8786", "--submit", ledger=ledger,
    )  # fmt: skip
    assert far.returncode == 2, far.stderr
    assert (
        "--out bench-out: relative to this machine; the workers of tcp://10.0.0.9:8786 cannot "
        "reach it" in far.stderr
    )
    alone = _imgscale("bench", "ridge", "--out", str(tmp_path / "o"), "--submit", ledger=ledger)
    assert alone.returncode == 2 and "--submit needs a cluster" in alone.stderr
    assert not ledger.exists() and not (tmp_path / "o").exists()
