"""Without a scheduler, a command on a small store runs on threads in its own process (one BLAS
thread per task while tasks run); on a larger one, or when the size is not given, on worker
processes."""

from __future__ import annotations

import os
import subprocess
import sys

import dask
import psutil
import pytest
from threadpoolctl import threadpool_info

from imgscale.jobs.cluster import THREADED_MAX_BYTES, connect
from imgscale.pipeline.compute import compute


def _worker_processes() -> list[psutil.Process]:
    return psutil.Process().children(recursive=True)


def _blas_threads() -> list[int]:
    """Threads of numpy's and SciPy's OpenBLAS (pthreads: one setting for the whole process; an
    OpenMP build, such as faiss's, keeps a setting per thread)."""
    return [
        pool["num_threads"]
        for pool in threadpool_info()
        if pool["user_api"] == "blas" and pool.get("threading_layer") == "pthreads"
    ]


def test_a_small_store_runs_on_threads_in_this_process(capsys):
    before = {p.pid for p in _worker_processes()}
    outside = _blas_threads()
    with connect(data_bytes=THREADED_MAX_BYTES) as client:
        assert client.scheduler.address.startswith("inproc://")  # no port to reach
        assert sum(client.nthreads().values()) == (psutil.cpu_count(logical=False) or 1)
        assert {p.pid for p in _worker_processes()} == before
        assert client.submit(lambda: psutil.Process().pid).result() == psutil.Process().pid
        (in_tasks,) = compute(dask.delayed(_blas_threads)())
        assert in_tasks == [1] * len(in_tasks) and in_tasks  # while the tasks run
        assert _blas_threads() == outside  # and all of them again for the client's solves
    assert capsys.readouterr().err.startswith("dask: started a LocalCluster in this process")


@pytest.mark.slow
@pytest.mark.parametrize("data_bytes", [THREADED_MAX_BYTES + 1, None])
def test_a_larger_store_runs_on_worker_processes(data_bytes):
    with connect(quiet=True, n_workers=1, data_bytes=data_bytes) as client:
        assert client.scheduler.address.startswith("tcp://127.0.0.1:")
        worker_pid = client.submit(lambda: psutil.Process().pid).result()
        assert worker_pid != psutil.Process().pid


def test_worker_processes_get_one_thread_and_this_process_keeps_its_environment(monkeypatch):
    # The nannies put OMP_NUM_THREADS=1 (and BLAS's) in the spawning process's environment for
    # their workers; left there, faiss's OpenMP loaded later and every command or peer started
    # later would run on one thread.
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
    with connect(quiet=True, n_workers=1, data_bytes=None) as client:
        assert "OMP_NUM_THREADS" not in os.environ
        assert os.environ["OPENBLAS_NUM_THREADS"] == "2"
        started_here = subprocess.run(
            [sys.executable, "-c", "import os; print(os.environ.get('OMP_NUM_THREADS'))"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        assert started_here == "None"
        names = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")
        in_worker = client.submit(lambda: [os.environ.get(name) for name in names]).result()
        assert in_worker == ["1", "2"]  # a variable the user set is the user's, there too
