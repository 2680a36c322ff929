"""The scheduler, each worker and the client in network namespaces of their own, joined by veth
pairs on a bridge: hosts that share a file system but no loopback. A job runs with scheduler,
workers and client on four hosts; a detached run whose driver's host dies is rerun by the
scheduler on the other host, fenced by its generation claim in a ledger both hosts read."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from imgscale.jobs.cli import cli
from imgscale.pipeline.classify import NearestClassMean
from imgscale.storage import open_store
from tests.deploy.conftest import DASK, IMGSCALE, random_store, zarr_arrays
from tests.processes import stop

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
HOSTS = {"sched": "10.213.7.1", "w1": "10.213.7.2", "w2": "10.213.7.3", "client": "10.213.7.4"}


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@contextlib.contextmanager
def network(
    addresses: dict[str, str], this_host: str | None = None
) -> Iterator[dict[str, list[str]]]:
    """A network namespace per name of ``addresses`` (its address on a /24), joined by veth
    pairs on a bridge; yields a command prefix (`ip netns exec NS`) per name. With
    ``this_host``, the bridge has that address, so this machine reaches them all. Skips the test
    where namespaces are not allowed."""
    if shutil.which("ip") is None:
        pytest.skip("no `ip` command (iproute2) on this machine")
    tag = str(os.getpid() % 100_000)
    probe = subprocess.run(
        ["ip", "netns", "add", f"imgs{tag}probe"], capture_output=True, text=True
    )
    if probe.returncode != 0:
        pytest.skip(f"network namespaces are not permitted here: {probe.stderr.strip()}")
    ip("netns", "del", f"imgs{tag}probe")
    bridge = f"imgsbr{tag}"
    namespaces = {name: f"imgs{tag}{name}" for name in addresses}
    try:
        ip("link", "add", bridge, "type", "bridge")
        if this_host is not None:
            ip("addr", "add", f"{this_host}/24", "dev", bridge)
        ip("link", "set", bridge, "up")
        for i, (name, address) in enumerate(addresses.items()):
            ns, outside, inside = namespaces[name], f"imv{tag}{i}", f"imp{tag}{i}"
            ip("netns", "add", ns)
            ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            ip("link", "set", inside, "netns", ns)
            ip("link", "set", outside, "master", bridge)
            ip("link", "set", outside, "up")
            ip("-n", ns, "addr", "add", f"{address}/24", "dev", inside)
            ip("-n", ns, "link", "set", inside, "up")
            ip("-n", ns, "link", "set", "lo", "up")
        yield {name: ["ip", "netns", "exec", ns] for name, ns in namespaces.items()}
    finally:
        for ns in namespaces.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", bridge], capture_output=True)


@pytest.fixture
def hosts() -> Iterator[dict[str, list[str]]]:
    """A command prefix (`ip netns exec NS`) per host of `HOSTS`."""
    with network(HOSTS) as prefixes:
        yield prefixes


def wait_for_line(log: Path, pattern: str, process: subprocess.Popen, timeout=90) -> None:
    deadline = time.monotonic() + timeout
    while not (log.exists() and re.search(pattern, log.read_text())):
        assert process.poll() is None, f"{log.name}: exited\n{log.read_text()}"
        assert time.monotonic() < deadline, f"{log.name}: no {pattern!r}\n{log.read_text()}"
        time.sleep(0.1)


def test_a_job_runs_with_scheduler_workers_and_client_on_separate_hosts(hosts, tmp_path):
    random_store(tmp_path / "s.zarr", 3_000, 16, 5, rows_per_chunk=250)
    scheduler = f"tcp://{HOSTS['sched']}:8786"
    started = []
    try:
        log = tmp_path / "sched.log"
        with open(log, "wb") as out:
            started.append(subprocess.Popen(
                [*hosts["sched"], DASK, "scheduler", "--host", HOSTS["sched"], "--port", "8786",
                 "--no-dashboard"], stdout=out, stderr=out,
            ))  # fmt: skip
        wait_for_line(log, r"Scheduler at:", started[0])
        for name in ("w1", "w2"):
            workdir = tmp_path / name  # not the client's working directory
            workdir.mkdir()
            with open(tmp_path / f"{name}.log", "wb") as out:
                started.append(subprocess.Popen(
                    [*hosts[name], DASK, "worker", scheduler, "--host", HOSTS[name],
                     "--nthreads", "1", "--no-dashboard"], stdout=out, stderr=out, cwd=workdir,
                ))  # fmt: skip
            wait_for_line(tmp_path / f"{name}.log", r"Registered to:", started[-1])

        # The client's loopback has no scheduler: nothing can fall back on 127.0.0.1.
        loopback = subprocess.run(
            [*hosts["client"], IMGSCALE, "train", "s.zarr", "m", "--scheduler", "tcp://127.0.0.1:8786"],
            cwd=tmp_path, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert loopback.returncode == 1 and "connection refused" in loopback.stderr

        # A relative store path: the workers, in other folders, get it made absolute.
        job = subprocess.run(
            [*hosts["client"], IMGSCALE, "train", "s.zarr", "m.model", "--method", "ncm",
             "--scheduler", scheduler],
            cwd=tmp_path, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert job.returncode == 0, job.stderr
        assert f"connected to {scheduler}, 2 workers" in job.stderr
    finally:
        stop(started[1:], started[:1])
    for name in ("w1", "w2"):
        log = (tmp_path / f"{name}.log").read_text()
        assert re.search(rf"Start worker at: +tcp://{re.escape(HOSTS[name])}:", log), log

    store = open_store(tmp_path / "s.zarr")
    X, y = store.features("train").compute(), store.labels("train")
    (means,) = [v for k, v in zarr_arrays(tmp_path / "m.model").items() if k.endswith("means_")]
    np.testing.assert_allclose(means, NearestClassMean().fit(X, y).means_, rtol=1e-6)


# Two hosts for a detached run: the scheduler and a worker on one, a worker on the other; this
# machine (the bridge's address) submits and follows the run.
DETACHED_HOSTS = {"a": "10.213.9.1", "b": "10.213.9.2"}
THIS_HOST = "10.213.9.254"
ROWS = 400_000  # an ingest of several seconds: the kill lands mid-run


def _status(run_id: str, ledger: Path) -> dict:
    """`imgscale status --json`, run in this process by click's runner (polled every half
    second: a process start a poll would cost more CPU than the run it watches)."""
    shown = CliRunner().invoke(cli, ["status", run_id, "--json", "--ledger", str(ledger)])
    assert shown.exit_code == 0, shown.output
    return json.loads(shown.stdout)


def _wait_for_status(run_id: str, ledger: Path, until, what: str, timeout=300.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = _status(run_id, ledger)
        if until(status):
            return status
        assert status["outcome"] in ("running", "lost"), f"ended before {what}: {status}"
        time.sleep(0.5)
    raise AssertionError(f"run {run_id} never {what}: {status}")


@pytest.mark.timeout(600)
def test_a_detached_run_whose_driver_host_dies_reruns_on_the_other_host_and_ends_ok(tmp_path):
    rng = np.random.default_rng(0)
    np.savez(
        tmp_path / "big.npz",
        X=rng.standard_normal((ROWS, 16)).astype(np.float32),
        y=np.arange(ROWS) % 4,
    )
    spec = tmp_path / "big.toml"  # absolute paths: the scheduler is on another host
    spec.write_text(
        f'[[jobs]]\nkind = "ingest"\nsrc = "{tmp_path / "big.npz"}"\n'
        f'store = "{tmp_path / "big.zarr"}"\n\n'
        f'[[jobs]]\nkind = "train"\nstore = "{tmp_path / "big.zarr"}"\n'
        f'model = "{tmp_path / "big.model"}"\nmethod = "ncm"\n'
    )
    ledger = tmp_path / "ledger"  # a folder both hosts see
    scheduler = f"tcp://{DETACHED_HOSTS['a']}:8786"
    workers: dict[str, subprocess.Popen] = {}
    started: list[subprocess.Popen] = []
    with network(DETACHED_HOSTS, THIS_HOST) as hosts:
        try:
            log = tmp_path / "sched.log"
            with open(log, "wb") as out:
                started.append(subprocess.Popen(
                    [*hosts["a"], DASK, "scheduler", "--host", DETACHED_HOSTS["a"], "--port",
                     "8786", "--no-dashboard"], stdout=out, stderr=out,
                ))  # fmt: skip
            wait_for_line(log, r"Scheduler at:", started[0])
            for name, address in DETACHED_HOSTS.items():
                (tmp_path / name).mkdir()
                with open(tmp_path / f"{name}.log", "wb") as out:
                    started.append(subprocess.Popen(
                        [*hosts[name], DASK, "worker", scheduler, "--host", address,
                         "--worker-port", "8790", "--nthreads", "1", "--no-nanny",
                         "--resources", "driver=1", "--no-dashboard"],
                        stdout=out, stderr=out, cwd=tmp_path / name,
                    ))  # fmt: skip
                workers[f"tcp://{address}:8790"] = started[-1]
                wait_for_line(tmp_path / f"{name}.log", r"Registered to:", started[-1])

            submitted = subprocess.run(
                [IMGSCALE, "submit", str(spec), "--scheduler", scheduler, "--ledger", str(ledger),
                 "--json"], capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            assert submitted.returncode == 0, submitted.stderr
            run_id = json.loads(submitted.stdout)["run_id"]
            first = _wait_for_status(
                run_id, ledger, lambda s: (s["stage"] or "").startswith("job 1/2 ingest"),
                "started its ingest",
            )  # fmt: skip
            assert first["generation"] == 1 and first["worker"] in workers
            workers[first["worker"]].send_signal(signal.SIGKILL)  # the driver's host goes
            workers[first["worker"]].wait(timeout=30)
            status = _wait_for_status(
                run_id, ledger, lambda s: s["outcome"] in ("ok", "failed", "cancelled"), "ended"
            )
        finally:
            for process in reversed(started):
                if process.poll() is None:
                    process.send_signal(signal.SIGKILL)
                process.wait(timeout=30)
    assert status["outcome"] == "ok", status
    (other,) = [address for address in workers if address != first["worker"]]
    assert (status["generation"], status["worker"]) == (2, other)  # fenced, on the other host
    store = open_store(tmp_path / "big.zarr")
    assert store.committed_rows == ROWS  # every row exactly once
    assert len(set(store.rows()["id"].to_pylist())) == ROWS
    assert (tmp_path / "big.model").is_dir()
