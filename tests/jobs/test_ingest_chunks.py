"""A store of images is sized for its rows and its small beginnings, and each commit holds at
most --commit-rows rows (real files, real cluster)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from imgscale.jobs.cli import cli
from tests.jobs.test_ingest_images import digit_images, ingest, write_folder

pytestmark = pytest.mark.slow


def info(store) -> dict:
    result = CliRunner().invoke(cli, ["info", str(store), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_a_small_colour_store_takes_a_megabyte_not_a_64_mib_chunk(tmp_path, scheduler_address):
    write_folder(tmp_path / "photos", digit_images(10))
    ingest(str(tmp_path / "photos"), str(tmp_path / "s.zarr"), "--features", "gist-tiny,color",
           scheduler=scheduler_address)  # fmt: skip
    described = info(tmp_path / "s.zarr")
    assert described["rows"] == 30
    # 448 float32 values a row: a chunk of 2**20 bytes holds 585 rows.
    assert described["rows_per_chunk"] == 2**20 // (4 * 448)
    assert described["bytes_on_disk"] < 2 * 2**20


def test_each_commit_holds_at_most_commit_rows(tmp_path, scheduler_address):
    write_folder(tmp_path / "photos", digit_images(3))
    summary = ingest(str(tmp_path / "photos"), str(tmp_path / "s.zarr"), "--features",
                     "gist-tiny", "--commit-rows", "4", scheduler=scheduler_address)  # fmt: skip
    assert (summary["rows"], summary["commits"]) == (9, 3)
    # Partitions finish in any order: two of 4 images and one of 1, each its own commit.
    assert sorted(batch["rows"] for batch in info(tmp_path / "s.zarr")["batches"]) == [1, 4, 4]
