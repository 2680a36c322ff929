"""One tiny run of every registered benchmark per test session, as CI runs it (`tiny_run`): the
end-to-end tests check the run as a whole, and a benchmark's own tests read its rows from the
same run rather than running it again.

The run is a process of its own that starts as soon as the tests are collected, and the tests
that read it run last: the rest of the suite runs beside it rather than after it (most of either
waits on process and cluster starts, not on the cores)."""

import json

import pyarrow.parquet as pq
import pytest

from . import tiny_run as run


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected what they deselect
def pytest_collection_modifyitems(config, items):
    """Start the tiny run if a selected test reads it, and move the tests that read it last."""
    reading = [item for item in items if "tiny_run" in getattr(item, "fixturenames", ())]
    if not reading or config.option.collectonly:
        return
    ids = {id(item) for item in reading}
    items[:] = [item for item in items if id(item) not in ids] + reading
    run.start()


@pytest.fixture(scope="session")
def tiny_run():
    """(cwd, out, summary) of `imgscale bench --scale tiny --json` run in an empty folder."""
    run.start()  # collected without the hook (e.g. another plugin emptied the list)
    return run.result()


def benchmark_rows(run, benchmark: str) -> dict[str, dict]:
    """One benchmark's rows of the tiny run by name, each with its detail fields alongside."""
    _, out, _ = run
    rows = pq.read_table(out / "results.parquet").to_pylist()
    return {
        r["name"]: {**json.loads(r["detail"]), **r} for r in rows if r["benchmark"] == benchmark
    }
