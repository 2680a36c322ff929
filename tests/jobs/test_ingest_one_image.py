"""Whatever one image does wrong refuses that image, never the batch: an ordinary photo size,
a descriptor that is NaN on one image, an id a source gives twice (real files, real cluster)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from onnx import TensorProto, helper
from PIL import Image

from imgscale.storage import open_store
from tests.jobs.test_ingest_images import (
    digit_images,
    ingest,
    png_bytes,
    rejected,
    write_folder,
)

pytestmark = pytest.mark.slow


def test_ordinary_photo_sizes_are_described_by_every_builtin_descriptor(
    tmp_path, scheduler_address
):
    """142×107 and 640×427 JPEGs stopped the batch: "box offset can't be negative"."""
    photos = tmp_path / "photos"
    photos.mkdir()
    rng = np.random.default_rng(0)
    for height, width in ((107, 142), (427, 640), (142, 107)):
        pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(photos / f"{width}x{height}.jpg", quality=90)
    summary = ingest(str(photos), str(tmp_path / "s.zarr"), "--features", "gist-tiny,color",
                     scheduler=scheduler_address)  # fmt: skip
    assert (summary["rows"], summary["refused"]) == (3, 0)
    assert sorted(open_store(tmp_path / "s.zarr").ids()) == [
        "107x142.jpg",
        "142x107.jpg",
        "640x427.jpg",
    ]


def log_of_mean_network(path) -> None:
    """RGB → global average pool → log: the standardised mean of a dark image is negative, so
    its descriptor is NaN; a bright image's is finite."""
    graph = helper.make_graph(
        [
            helper.make_node("GlobalAveragePool", ["images"], ["pooled"]),
            helper.make_node("Log", ["pooled"], ["logged"]),
        ],
        "log-of-mean",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["n", 3, 16, 16])],
        [helper.make_tensor_value_info("logged", TensorProto.FLOAT, ["n", 3, 1, 1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path.write_bytes(model.SerializeToString())


def test_a_nan_descriptor_refuses_its_image_and_keeps_the_others(tmp_path, scheduler_address):
    photos, store, model = tmp_path / "photos", tmp_path / "s.zarr", tmp_path / "log.onnx"
    photos.mkdir()
    log_of_mean_network(model)
    for i in range(5):
        Image.new("RGB", (40, 30), (200 + 10 * i, 220, 240)).save(photos / f"bright-{i}.png")
    Image.new("RGB", (40, 30), (3, 2, 1)).save(photos / "dark.png")
    summary = ingest(str(photos), str(store), "--features", f"onnx:{model}",
                     scheduler=scheduler_address)  # fmt: skip
    assert (summary["rows"], summary["refused"]) == (5, 1)
    assert sorted(open_store(store).ids()) == [f"bright-{i}.png" for i in range(5)]
    assert np.isfinite(open_store(store).features().compute()).all()
    assert "descriptor not finite: 3 of 3 values NaN or inf" in rejected(store)["dark.png"]
    # The next run has nothing to do: the refused image is not retried into the same failure.
    assert ingest(str(photos), str(store), scheduler=scheduler_address)["rows"] == 0


def test_an_id_given_twice_refuses_the_second_image_and_stores_the_rest(
    tmp_path, scheduler_address
):
    images = digit_images(3, classes=(0, 1))
    keys = sorted(images)
    ids = [*keys[:3], keys[1], *keys[4:]]  # keys[3]'s image comes under keys[1]'s id
    table = pa.table({"id": ids, "image": [png_bytes(images[key]) for key in keys]})
    pq.write_table(table, tmp_path / "images.parquet", row_group_size=4)
    store = tmp_path / "s.zarr"
    summary = ingest(str(tmp_path / "images.parquet"), str(store), "--features", "gist-tiny",
                     scheduler=scheduler_address)  # fmt: skip
    assert (summary["rows"], summary["refused"]) == (5, 1)
    assert sorted(open_store(store).ids()) == sorted(set(ids))
    assert f"id {keys[1]!r} is another image's" in rejected(store)[keys[1]]


def test_a_rerun_reads_no_refused_image_whose_file_is_unchanged(tmp_path, scheduler_address):
    """Refused duplicates and broken files are not read again, and no cluster is started,
    until their file changes; then only that file is read."""
    photos, store = tmp_path / "photos", tmp_path / "s.zarr"
    write_folder(photos, digit_images(2, classes=(0,)))
    shutil.copy(photos / "digit-0" / "000.png", photos / "digit-0" / "copy.png")
    (photos / "digit-0" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n broken")
    first = ingest(str(photos), str(store), "--features", "gist-tiny", scheduler=scheduler_address)
    assert (first["rows"], first["refused"]) == (2, 2)
    result = subprocess.run(
        [sys.executable, "-m", "imgscale", "ingest", str(photos), str(store)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    said = result.stdout + result.stderr
    assert "0 images added, 0 refused, 0 read" in said
    assert "2 refused before and unchanged since, not read again" in said
    assert "every image read was refused" not in said
    assert "dask: started" not in said
    Image.new("RGB", (40, 40), (9, 99, 199)).save(photos / "digit-0" / "broken.png")
    fixed = ingest(str(photos), str(store), scheduler=scheduler_address)
    assert (fixed["images_seen"], fixed["rows"], fixed["refused_unchanged"]) == (1, 1, 1)
    assert set(rejected(store)) == {"digit-0/copy.png"}


def test_the_loser_of_two_concurrent_identical_ingests_reports_the_rows_as_already_stored(
    tmp_path, scheduler_address
):
    """Two `imgscale ingest` processes of the same folder: the test holds the store's writer
    lock until both have described every image, so both commit the same rows; the one that
    commits second reports them as already in the store, none as refused."""
    from imgscale.storage import FileLock

    write_folder(tmp_path / "seed", digit_images(1, classes=(0,)))
    write_folder(tmp_path / "photos", digit_images(3, offset=1))
    store = tmp_path / "s.zarr"
    ingest(str(tmp_path / "seed"), str(store), "--features", "color",
           scheduler=scheduler_address)  # fmt: skip
    imgscale = str(Path(sys.executable).with_name("imgscale"))
    command = [imgscale, "ingest", str(tmp_path / "photos"), str(store), "--scheduler",
               scheduler_address]  # fmt: skip
    lock = FileLock(store / ".lock")
    lock.acquire()
    try:
        logs = [tmp_path / f"ingest-{i}.log" for i in range(2)]
        runs = [subprocess.Popen(command, stderr=log.open("w")) for log in logs]
        deadline = time.monotonic() + 120
        while not all("9/9 images" in log.read_text() for log in logs):
            assert all(run.poll() is None for run in runs), [log.read_text() for log in logs]
            assert time.monotonic() < deadline, [log.read_text() for log in logs]
            time.sleep(0.2)
    finally:
        lock.release()
    assert [run.wait(timeout=120) for run in runs] == [0, 0]
    # The summary is the last line on stderr, after the progress line's carriage returns.
    lines = sorted(log.read_text().strip().splitlines()[-1].split("\r")[-1] for log in logs)
    # Sorted: "0 images added" before "9 images added".
    loser, winner = lines
    assert winner.startswith(f"{store}: 9 images added, 0 refused, 9 read")
    assert loser.startswith(f"{store}: 0 images added, 0 refused, 9 read")
    assert loser.endswith("; 9 already in the store, committed by another ingest meanwhile")
    assert open_store(store).committed_rows == 10 and rejected(store) == {}
