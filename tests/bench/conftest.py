"""One tiny run of every registered benchmark per test session, as CI runs it: the end-to-end
tests check the run as a whole, and a benchmark's own tests read its rows from the same run
rather than running it again."""

import json
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

# A guard against a hung benchmark, not a speed target: every registered benchmark runs, each
# starting clusters and commands of its own.
RUN_SECONDS = 1200


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """(cwd, out, summary) of `imgscale bench --scale tiny --json` run in an empty folder."""
    cwd = tmp_path_factory.mktemp("cwd")
    out = cwd / "out"
    env = {
        k: v for k, v in os.environ.items() if k not in ("IMGSCALE_DATA", "DASK_SCHEDULER_ADDRESS")
    }
    done = subprocess.run(
        [sys.executable, "-m", "imgscale", "bench", "--scale", "tiny", "--out", str(out),
         "--workdir", str(cwd / "work"), "--json"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=RUN_SECONDS,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return cwd, out, json.loads(done.stdout)


def benchmark_rows(run, benchmark: str) -> dict[str, dict]:
    """One benchmark's rows of the tiny run by name, each with its detail fields alongside."""
    _, out, _ = run
    rows = pq.read_table(out / "results.parquet").to_pylist()
    return {
        r["name"]: {**json.loads(r["detail"]), **r} for r in rows if r["benchmark"] == benchmark
    }
