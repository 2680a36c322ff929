"""`imgscale compress` through the installed CLI on the real scheduler + 2 workers of conftest.py.

Each source chunk is encoded and written as the same PQ chunk by a task on a worker; the client
commits once all chunks are written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from distributed import get_task_stream

from imgscale.jobs.cluster import connect
from imgscale.jobs.compress import compress
from imgscale.pipeline.pq import PQCodec
from imgscale.storage import create_store, open_store

IMGSCALE = str(Path(sys.executable).with_name("imgscale"))


def imgscale(*args) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [IMGSCALE, *map(str, args)], capture_output=True, text=True, timeout=120, env=os.environ
    )
    assert result.returncode == 0, result.stderr
    return result


def test_compress_on_the_cluster_writes_the_codec_applied_to_every_row(
    tmp_path, digits_store, scheduler_address
):
    dst = tmp_path / "digits-pq16.zarr"
    summary = json.loads(
        imgscale(
            "compress",
            digits_store.path,
            dst,
            "--m",
            "16",
            "--scheduler",
            scheduler_address,
            "--json",
        ).stdout
    )
    store = open_store(dst)
    X = digits_store.features().compute(scheduler="synchronous")
    codes = store.codes().compute(scheduler="synchronous")
    # Every chunk encoded on a worker, in row order: the codes faiss gives in this process.
    np.testing.assert_array_equal(codes, store.codec.encode(X))
    decoded = store.features().compute(scheduler="synchronous")
    mse = np.mean(np.sum((X.astype(np.float64) - decoded) ** 2, axis=1))
    np.testing.assert_allclose(summary["mse"], mse, rtol=1e-4)
    variance = np.sum(X.astype(np.float64).var(axis=0))
    np.testing.assert_allclose(summary["relative_mse"], mse / variance, rtol=1e-4)
    assert summary["relative_mse"] < 0.2

    info = json.loads(imgscale("info", dst, "--json").stdout)
    assert info["encoding"] == "pq" and info["pq_m"] == 16 and info["rows"] == len(X)
    assert info["bytes_on_disk"] == sum(f.stat().st_size for f in dst.rglob("*") if f.is_file())
    np.testing.assert_allclose(info["compression_ratio"], len(X) * 64 * 4 / info["bytes_on_disk"])


def test_an_interrupted_compress_cancels_the_tasks_not_started_and_leaves_no_store(
    tmp_path, scheduler_address
):
    chunks = 400
    src = create_store(tmp_path / "src.zarr", 16, rows_per_chunk=64)
    rng = np.random.default_rng(0)
    src.append("b", rng.standard_normal((64 * chunks, 16)).astype(np.float32))
    codec = PQCodec.train(rng.standard_normal((2048, 16)).astype(np.float32), 4, niter=2)
    dst = tmp_path / "pq.zarr"

    def interrupted(done: int, total: int) -> None:
        raise KeyboardInterrupt  # what Ctrl-C or SIGTERM (jobs/runs.py) raises

    with connect(scheduler_address, quiet=True) as client, get_task_stream(client) as stream:
        with pytest.raises(KeyboardInterrupt):
            compress(src, dst, 4, codec=codec, progress=interrupted)
        on_scheduler = client.run_on_scheduler(
            lambda dask_scheduler: [str(k) for k in dask_scheduler.tasks]
        )
    encoded = [t for t in stream.data if "encode_and_write_chunk" in str(t["key"])]
    # Ctrl-C lands at the first progress report: the tasks already running finish, the rest of
    # the 400 never start (before cancellation every chunk was encoded). Half is a margin for
    # tasks started while the client handles the interrupt on a loaded machine.
    assert 1 <= len(encoded) < chunks // 2
    assert not [k for k in on_scheduler if "encode_and_write_chunk" in k]
    assert not dst.exists()
