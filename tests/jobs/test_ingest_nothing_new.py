"""An ingest with nothing new (a scheduled turn, most minutes) decides so from the listing and
the store: no cluster, no descriptor, none of the computing libraries imported."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from imgscale.jobs.ingest import plan_ingest
from imgscale.storage import open_store
from tests.jobs.test_command_imports import imported_packages
from tests.jobs.test_ingest_images import digit_images, gist_tiny, ingest, png_bytes, write_folder

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


@pytest.mark.parametrize("with_ids", [True, False], ids=["id column", "keys by row"])
def test_a_parquet_source_sends_the_workers_only_its_row_groups_holding_new_images(
    tmp_path, scheduler_address, with_ids
):
    # Parquet lists no keys: the client reads the id column alone (or, without one, the rows'
    # count from the footer), so a re-ingest with nothing new sends nothing to the workers, and
    # a file that grew sends only its row groups holding new rows.
    images = digit_images(4)
    keys = sorted(images)
    source, store = tmp_path / "images.parquet", tmp_path / "s.zarr"

    def write(n: int) -> None:
        columns = {"label": [key[:7] for key in keys[:n]],
                   "image": [png_bytes(images[key]) for key in keys[:n]]}  # fmt: skip
        pq.write_table(pa.table({"id": keys[:n], **columns} if with_ids else columns), source,
                       row_group_size=3)  # fmt: skip

    write(9)
    ingest(str(source), str(store), "--features", "gist-tiny", scheduler=scheduler_address)
    plan = plan_ingest(str(source), store)
    assert (plan.partitions, plan.total, plan.features) == ([], 0, None)
    computing = imported_packages("ingest", str(source), str(store)) & {
        "sklearn", "numba", "dask", "distributed", "scipy", "faiss"
    }  # fmt: skip
    assert not computing, sorted(computing)

    write(12)  # a fourth row group of 3 new rows
    plan = plan_ingest(str(source), store, images_per_partition=3)
    assert plan.total == 3
    assert [p.row_groups for p in plan.partitions] == [(3,)]
    assert ingest(str(source), str(store), scheduler=scheduler_address)["rows"] == 3
    opened = open_store(store)
    ids = list(opened.ids())
    expected = keys if with_ids else [f"images.parquet:{row}" for row in range(12)]
    assert sorted(ids) == sorted(expected)
    rows = opened.features().compute()
    order = [ids.index(key) for key in expected]
    np.testing.assert_allclose(
        rows[order], gist_tiny([images[key] for key in keys]), rtol=1e-5, atol=1e-6
    )
