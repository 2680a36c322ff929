"""Run one imgscale command on a Dask cluster made of this SLURM allocation's tasks.

Started by ``srun`` in every task (see imgscale.sbatch): dask-jobqueue's SLURMRunner makes task 0
the scheduler, task 1 the client, which runs ``imgscale ARGS --scheduler ADDRESS``, and every
other task a single-threaded worker. When the command ends the runner stops the cluster, and the
exit status of the job step is the command's.

    srun python deploy/slurm/imgscale-on-allocation.py train STORE MODEL --method ridge
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from dask_jobqueue.slurm import SLURMRunner

from imgscale.jobs.cli import main


def run(args: list[str]) -> None:
    # The scheduler writes its address here; every task of the job must see the same file.
    shared = Path(os.environ.get("IMGSCALE_SCHEDULER_DIR", Path.cwd()))
    scheduler_file = str(shared / "dask-scheduler-{job_id}.json")
    memory = os.environ.get("IMGSCALE_WORKER_MEMORY", "auto")
    # The dashboard answers on the scheduler's node only (ssh -L 8787:localhost:8787 NODE).
    dashboard = os.environ.get("IMGSCALE_DASHBOARD_ADDRESS", "127.0.0.1:8787")
    with SLURMRunner(
        scheduler_file=scheduler_file,
        scheduler_options={"dashboard_address": dashboard},
        worker_options={"nthreads": 1, "memory_limit": memory},
    ) as runner:
        # Only the client task gets here; the scheduler and workers serve until it leaves.
        sys.argv = ["imgscale", *args, "--scheduler", runner.scheduler_address]
        main()


if __name__ == "__main__":
    run(sys.argv[1:])
