"""An ingest with nothing new (a scheduled turn, most minutes) decides so from the listing and
the store: no cluster, no descriptor, none of the computing libraries imported."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.jobs.test_command_imports import imported_packages
from tests.jobs.test_ingest_images import digit_images, ingest, write_folder

pytestmark = pytest.mark.slow


def test_an_ingest_with_nothing_new_imports_no_computing_library(tmp_path, scheduler_address):
    photos, store = tmp_path / "photos", tmp_path / "s.zarr"
    write_folder(photos, digit_images(2))
    ingest(str(photos), str(store), "--features", "gist-tiny,color", scheduler=scheduler_address)
    computing = imported_packages("ingest", str(photos), str(store)) & {
        "sklearn", "numba", "dask", "distributed", "scipy", "faiss"
    }  # fmt: skip
    assert not computing, sorted(computing)
    result = subprocess.run(
        [sys.executable, "-m", "imgscale", "ingest", str(photos), str(store), "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert (summary["rows"], summary["images_seen"], summary["store_rows"]) == (0, 0, 6)
    assert (summary["features"], summary["dim"]) == ("gist-tiny,color", 448)
    assert "dask: started" not in result.stderr  # no cluster was started
