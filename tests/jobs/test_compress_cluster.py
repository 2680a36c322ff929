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

from imgscale.storage import open_store

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
