"""A real multi-process Dask cluster on 127.0.0.1 and digits split into .npz files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from distributed import Client
from sklearn.datasets import load_digits

from imgscale.jobs.cli import cli
from imgscale.jobs.ingest import ingest_file
from imgscale.storage import create_store, open_store
from tests.processes import start_logged, stop, wait_for_workers, wait_until

# The `dask` console script installed beside this interpreter, as a user would run it.
DASK = str(Path(sys.executable).with_name("dask"))


@pytest.fixture(scope="session")
def scheduler_address(tmp_path_factory) -> str:
    """Start ``dask scheduler`` and two ``dask worker`` processes, each logging to a file beside
    the scheduler file; yield the scheduler address."""
    folder = tmp_path_factory.mktemp("cluster")
    scheduler_file = folder / "scheduler.json"
    located = ["--scheduler-file", str(scheduler_file), "--no-dashboard"]
    started: dict[str, tuple[subprocess.Popen, Path]] = {}

    def start(name: str, *args: str) -> None:
        log = folder / f"{name}.log"
        started[name] = (start_logged([DASK, *args, *located], log), log)

    start("scheduler", "scheduler", "--host", "127.0.0.1", "--port", "0")
    try:
        wait_until(scheduler_file.exists, "the scheduler file", started)
        for i in range(2):
            start(f"worker-{i}", "worker", "--nthreads", "1", "--host", "127.0.0.1")
        with Client(scheduler_file=str(scheduler_file), timeout="30s") as client:
            wait_for_workers(client, 2, started, timeout=180)
            address = client.scheduler.address
        yield address
    finally:
        processes = [process for process, _ in started.values()]
        stop(processes[1:], processes[:1])


@pytest.fixture(scope="session")
def digits_splits(tmp_path_factory) -> dict[str, Path]:
    """Digits as train/val/test .npz files (60/20/20, fixed seed), features float32."""
    root = tmp_path_factory.mktemp("digits")
    digits = load_digits()
    order = np.random.default_rng(1).permutation(len(digits.target))
    paths = {}
    for split, rows in zip(("train", "val", "test"), np.split(order, [1078, 1437]), strict=True):
        paths[split] = root / f"{split}.npz"
        np.savez(paths[split], X=digits.data[rows].astype(np.float32), y=digits.target[rows])
    return paths


@pytest.fixture(scope="session")
def digits_store(tmp_path_factory, digits_splits):
    """Digits in one raw store of 256-row chunks (8 chunks, so both workers get some), one batch
    per split (train/val/test). Read-only for the tests that share it."""
    path = tmp_path_factory.mktemp("raw") / "digits.zarr"
    create_store(path, 64, class_names=[str(d) for d in range(10)], rows_per_chunk=256)
    for split, file in digits_splits.items():
        ingest_file(file, path, x_key="X", y_key="y", split=split, batch_id=split)
    return open_store(path)


def run(*args: str) -> dict:
    """The JSON object ``imgscale ARGS --json`` prints, run in this process; it must succeed."""
    result = CliRunner().invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def refused(*args: str) -> str:
    """The one line a refused command ends with (a usage error's, or the exception's, which
    `imgscale` prints as its message)."""
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code != 0
    if isinstance(result.exception, SystemExit):  # click's usage errors
        return result.output.strip().splitlines()[-1]
    return str(result.exception)
