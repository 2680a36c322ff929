"""Jobs on real scheduler and worker processes survive SIGKILL of a worker with the result of an
undisturbed run, and fail in one line, writing nothing, when the scheduler dies."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from imgscale.storage import open_store
from tests.deploy.conftest import IMGSCALE, Cluster, kill_process_tree, random_store, zarr_arrays

# 54-126 s each at a load average of 30-39 on 2 cores (the embed case builds its model first).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

# 12 chunks of 500 rows: each worker has several tasks a pass, so a kill lands mid-pass.
ROWS, DIM, CLASSES, CHUNK = 6_000, 32, 8, 500
# From the scheduler's death to the command's exit (seen: 1-3 s on a loaded 2-core VM).
LOST_SCHEDULER_BOUND_SECONDS = 20


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    return random_store(
        tmp_path_factory.mktemp("faults") / "rows.zarr", ROWS, DIM, CLASSES, rows_per_chunk=CHUNK
    )


@pytest.fixture(scope="module")
def rff_model(tmp_path_factory, store) -> Path:
    """Ridge on a random Fourier embedding, trained on a LocalCluster (embed's model)."""
    model = tmp_path_factory.mktemp("faults") / "rff.model"
    run(["train", store, model, "--embedding", "rff", "--n-components", "100"])
    return model


def run(args: list, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [IMGSCALE, *map(str, args)], capture_output=True, text=True, timeout=100, **kwargs
    )
    assert result.returncode == 0, result.stderr
    return result


def job(name: str, store: Path, request: pytest.FixtureRequest, out: Path) -> list:
    """The command line of job ``name`` writing ``out``."""
    if name == "train":
        return ["train", store, out, "--embedding", "rff", "--n-components", "100"]
    if name == "compress":
        return ["compress", store, out, "--m", "8", "--sample", "3000"]
    return ["embed", request.getfixturevalue("rff_model"), store, out, "--batch-rows", "1000"]


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (lock files aside) and its bytes."""
    return {
        str(f.relative_to(folder)): f.read_bytes()
        for f in sorted(folder.rglob("*"))
        if f.is_file() and not f.name.endswith(".lock")
    }


def result_of(name: str, out: Path) -> dict[str, np.ndarray]:
    if name == "train":
        return zarr_arrays(out)
    written = open_store(out)
    return {"features": written.features().compute(), "ids": written.ids()}


@pytest.mark.parametrize("name", ["train", "compress", "embed"])
def test_job_survives_sigkill_of_a_worker_with_the_undisturbed_result(
    name, cluster: Cluster, store, request, tmp_path
):
    reference = tmp_path / f"reference-{name}"
    run([*job(name, store, request, reference), "--scheduler", cluster.address])

    out = tmp_path / f"disturbed-{name}"
    command = [IMGSCALE, *map(str, job(name, store, request, out))]
    with subprocess.Popen(
        [*command, "--scheduler", cluster.address], stderr=subprocess.PIPE, text=True
    ) as disturbed:
        victim = cluster.worker_process(cluster.wait_until_processing())
        kill_process_tree(victim)
        _, stderr = disturbed.communicate(timeout=100)
    assert disturbed.returncode == 0, stderr
    assert sum(w.poll() is None for w in cluster.workers) == 1

    expected, got = result_of(name, reference), result_of(name, out)
    assert got.keys() == expected.keys()
    for key in expected:
        if name == "train" and expected[key].dtype.kind == "f":
            # Not bit-identical: a pass built after the kill sums its float64 partials in one
            # chain per remaining thread (`reduce_rows`), so the order of the additions differs.
            np.testing.assert_allclose(got[key], expected[key], rtol=1e-9, err_msg=key)
        else:
            # Bit-identical: each row's codes or embedding is computed from that row alone.
            np.testing.assert_array_equal(got[key], expected[key], err_msg=key)


@pytest.mark.parametrize("name", ["train", "compress"])
def test_sigkill_of_the_scheduler_fails_in_one_line_and_writes_nothing(
    name, cluster: Cluster, store, request, tmp_path
):
    out = tmp_path / f"out-{name}"
    before = snapshot(store)
    command = [IMGSCALE, *map(str, job(name, store, request, out))]
    with subprocess.Popen(
        [*command, "--scheduler", cluster.address], stderr=subprocess.PIPE, text=True
    ) as lost:
        cluster.wait_until_processing()
        cluster.scheduler.kill()
        killed = time.monotonic()
        _, stderr = lost.communicate(timeout=60)
        seconds = time.monotonic() - killed
    assert lost.returncode == 1
    assert stderr.splitlines()[-1] == (
        f"imgscale: error: lost the scheduler at {cluster.address} mid-job; nothing was written"
    )
    assert "Traceback" not in stderr and len(stderr.splitlines()) == 2, stderr  # dask: + error
    assert seconds < LOST_SCHEDULER_BOUND_SECONDS
    assert not out.exists()
    assert snapshot(store) == before

    # The lost run left nothing in the way of a rerun (on the command's own local cluster: what
    # is checked is the store and ``out``, not the cluster).
    cluster.stop()
    run(job(name, store, request, out))
    assert out.exists()
