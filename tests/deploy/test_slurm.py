"""deploy/slurm: the batch script's job step runs, as four tasks of a (simulated) allocation, a
scheduler, the imgscale command and two workers through dask-jobqueue's SLURMRunner."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import numpy as np
import pytest

from imgscale.pipeline.classify import NearestClassMean
from imgscale.storage import open_store
from tests.deploy.conftest import BIN, random_store, zarr_arrays

SLURM = Path(__file__).parents[2] / "deploy" / "slurm"


def job_step() -> list[str]:
    """The srun line of imgscale.sbatch, its variables expanded for a submission from the
    repository root."""
    lines = (SLURM / "imgscale.sbatch").read_text().splitlines()
    (line,) = [ln for ln in lines if ln.startswith("srun ")]
    argv = shlex.split(line)
    assert argv[:2] == ["srun", "--kill-on-bad-exit=1"] and argv[-1] == "$@"
    root = str(SLURM.parents[1])
    return [a.replace("$SLURM_SUBMIT_DIR", root) for a in argv[2:-1]]


def test_the_batch_script_asks_for_single_cpu_tasks_and_a_shared_scheduler_file():
    text = (SLURM / "imgscale.sbatch").read_text()
    directives = dict(re.findall(r"^#SBATCH --([\w-]+)=(\S+)", text, re.M))
    assert int(directives["ntasks"]) >= 3  # scheduler, client, at least one worker
    assert directives["cpus-per-task"] == "1"
    assert job_step()[1] == str(SLURM / "imgscale-on-allocation.py")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_job_step_of_four_tasks_trains_on_its_own_cluster(tmp_path):
    store = random_store(tmp_path / "s.zarr", 2_000, 16, 4, rows_per_chunk=250)
    model = tmp_path / "ncm.model"
    step = job_step()
    python = str(BIN / "python")  # the sbatch script activates the venv; `python` is this one
    argv = [python if a == "python" else a for a in step] + [
        "train",
        store,
        model,
        "--method",
        "ncm",
    ]
    tasks = []
    for rank in range(4):
        env = {
            **os.environ,
            "SLURM_PROCID": str(rank),
            "SLURM_NTASKS": "4",
            "SLURM_JOB_ID": "4242",
            "IMGSCALE_SCHEDULER_DIR": str(tmp_path),
            "IMGSCALE_DASHBOARD_ADDRESS": "127.0.0.1:0",
        }
        log = open(tmp_path / f"task-{rank}.log", "w")
        tasks.append((subprocess.Popen(list(map(str, argv)), env=env, stdout=log, stderr=log), log))
    try:
        codes = [task.wait(timeout=240) for task, _ in tasks]
    finally:
        for task, log in tasks:
            if task.poll() is None:
                task.kill()
            log.close()
    client_log = (tmp_path / "task-1.log").read_text()
    assert codes == [0, 0, 0, 0], client_log
    assert re.search(r"dask: connected to tcp://\S+, 2 workers", client_log), client_log

    features = open_store(store)
    X, y = features.features("train").compute(), features.labels("train")
    expected = NearestClassMean().fit(X, y).means_
    (means,) = [v for k, v in zarr_arrays(model).items() if k.endswith("means_")]
    np.testing.assert_allclose(means, expected, rtol=1e-6)
