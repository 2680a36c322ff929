"""Real `dask scheduler` / `dask worker` processes on 127.0.0.1 that a test may kill, a store
big enough that a kill lands mid-pass, and the installed `imgscale` command."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import zarr
from distributed import Client
from distributed.security import Security

from imgscale.storage import create_store
from tests.processes import wait_for_workers, wait_until

BIN = Path(sys.executable).parent
DASK = str(BIN / "dask")
IMGSCALE = str(BIN / "imgscale")
MAKE_CERTS = Path(__file__).parents[2] / "deploy" / "tls" / "make-certs"


class Cluster:
    """A scheduler and workers as separate processes; their logs are files in ``root``. The
    workers run without a nanny: one process each, which SIGKILL ends (a nanny would only
    restart what a test kills, and costs a process start)."""

    def __init__(self, root: Path, *, workers: int = 2, certs: Path | None = None) -> None:
        self.root = root
        self.certs = certs
        self.scheduler_file = root / "scheduler.json"
        self.scheduler = self._start("scheduler", ["--host", "127.0.0.1", "--port", "0"])
        self.workers: list[subprocess.Popen] = []
        started = {"scheduler": (self.scheduler, root / "scheduler.log")}
        try:
            wait_until(self.scheduler_file.exists, "the scheduler file", started, 60)
            for i in range(workers):
                args = ["--nthreads", "1", "--host", "127.0.0.1", "--no-nanny"]
                self.workers.append(self._start(f"worker-{i}", args))
                started[f"worker-{i}"] = (self.workers[-1], root / f"worker-{i}.log")
            with self.client() as client:
                wait_for_workers(client, workers, started)
                self.address = client.scheduler.address
        except BaseException:
            self.stop()
            raise

    def _start(self, name: str, args: list[str]) -> subprocess.Popen:
        role = name.split("-")[0]
        tls = []
        if self.certs is not None:
            tls = self.tls_args(role)
            if role == "scheduler":
                tls += ["--protocol", "tls"]
        command = [DASK, role, *args, "--scheduler-file", str(self.scheduler_file)]
        with open(self.root / f"{name}.log", "wb") as log:  # the child keeps its own copy
            return subprocess.Popen(
                [*command, "--no-dashboard", *tls], stdout=log, stderr=subprocess.STDOUT
            )

    def tls_args(self, role: str) -> list[str]:
        return [
            "--tls-ca-file", str(self.certs / "ca.crt"),
            "--tls-cert", str(self.certs / f"{role}.crt"),
            "--tls-key", str(self.certs / f"{role}.key"),
        ]  # fmt: skip

    def client(self) -> Client:
        security = None
        if self.certs is not None:
            security = Security(
                tls_ca_file=str(self.certs / "ca.crt"),
                tls_client_cert=str(self.certs / "client.crt"),
                tls_client_key=str(self.certs / "client.key"),
                require_encryption=True,
            )
        return Client(scheduler_file=str(self.scheduler_file), timeout="30s", security=security)

    def wait_until_processing(self, timeout: float = 60) -> str:
        """Wait until some worker is running a task; return that worker's address."""
        with self.client() as client:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                busy = client.run_on_scheduler(
                    lambda dask_scheduler: [
                        w.address for w in dask_scheduler.workers.values() if w.processing
                    ]
                )
                if busy:
                    return busy[0]
                time.sleep(0.05)
        raise AssertionError("no worker started a task")

    def worker_process(self, address: str) -> subprocess.Popen:
        """The `dask worker` process whose worker listens at ``address``."""
        with self.client() as client:
            pids = client.run(os.getpid, workers=[address])
        (pid,) = pids.values()
        for process in self.workers:
            if process.pid == pid:
                return process
        raise AssertionError(f"worker {address} is not one of ours")

    def stop(self) -> None:
        """SIGKILL every process: nothing is asked of a cluster at its end, and a worker whose
        task runs on after its scheduler died takes seconds to close."""
        import psutil

        for process in self.workers:
            if process.poll() is None:  # not reaped: the pid is still this process's
                with contextlib.suppress(psutil.NoSuchProcess):  # a worker ending on its own
                    kill_process_tree(process)
        self.scheduler.kill()
        self.scheduler.wait()


def kill_process_tree(process: subprocess.Popen) -> None:
    """SIGKILL a `dask worker` process and any process it started."""
    import psutil

    children = psutil.Process(process.pid).children(recursive=True)
    for child in children:
        child.send_signal(signal.SIGKILL)
    process.send_signal(signal.SIGKILL)
    process.wait()


@pytest.fixture
def cluster(tmp_path) -> Iterator[Cluster]:
    root = tmp_path / "cluster"
    root.mkdir()
    started = Cluster(root)
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="session")
def certs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tls") / "certs"
    subprocess.run([str(MAKE_CERTS), str(out)], check=True, capture_output=True)
    return out


def imgscale(*args, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [IMGSCALE, *map(str, args)], capture_output=True, text=True, timeout=timeout, **kwargs
    )


def random_store(path: Path, rows: int, dim: int, classes: int, *, rows_per_chunk: int) -> Path:
    """Gaussian class clusters with 80% train and 20% val rows (fixed seed)."""
    rng = np.random.default_rng(7)
    centres = rng.normal(size=(classes, dim)).astype(np.float32)
    labels = rng.integers(0, classes, rows)
    X = centres[labels] + rng.normal(scale=2.0, size=(rows, dim)).astype(np.float32)
    split = np.where(np.arange(rows) % 5 == 4, "val", "train")
    store = create_store(
        path, dim, class_names=[str(c) for c in range(classes)], rows_per_chunk=rows_per_chunk
    )
    store.append("all", X, labels, split=split)
    return path


def zarr_arrays(path: Path) -> dict[str, np.ndarray]:
    """Every array under the zarr group at ``path``, by its path in the group."""
    group = zarr.open_group(path, mode="r")
    return {name: array[...] for name, array in group.arrays()} | {
        f"{name}/{sub}": value
        for name, child in group.groups()
        for sub, value in zarr_arrays(Path(path) / name).items()
    }
