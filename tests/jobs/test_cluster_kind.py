"""Without a scheduler, a command on a small store runs on threads in its own process (one BLAS
thread per task while tasks run); on a larger one, or when the size is not given, on worker
processes."""

from __future__ import annotations

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
