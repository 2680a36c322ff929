"""The scheduler, each worker and the client in network namespaces of their own, joined by veth
pairs on a bridge: four hosts that share a file system but no loopback."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from imgscale.pipeline.classify import NearestClassMean
from imgscale.storage import open_store
from tests.deploy.conftest import DASK, IMGSCALE, random_store, zarr_arrays

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
HOSTS = {"sched": "10.213.7.1", "w1": "10.213.7.2", "w2": "10.213.7.3", "client": "10.213.7.4"}


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@pytest.fixture
def hosts() -> Iterator[dict[str, list[str]]]:
    """A command prefix (`ip netns exec NS`) per host; skips where namespaces are not allowed."""
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
    namespaces = {name: f"imgs{tag}{name}" for name in HOSTS}
    try:
        ip("link", "add", bridge, "type", "bridge")
        ip("link", "set", bridge, "up")
        for i, (name, address) in enumerate(HOSTS.items()):
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
        for process in reversed(started):
            process.terminate()
        for process in started:
            process.wait(timeout=30)
    for name in ("w1", "w2"):
        log = (tmp_path / f"{name}.log").read_text()
        assert re.search(rf"Start worker at: +tcp://{re.escape(HOSTS[name])}:", log), log

    store = open_store(tmp_path / "s.zarr")
    X, y = store.features("train").compute(), store.labels("train")
    (means,) = [v for k, v in zarr_arrays(tmp_path / "m.model").items() if k.endswith("means_")]
    np.testing.assert_allclose(means, NearestClassMean().fit(X, y).means_, rtol=1e-6)
