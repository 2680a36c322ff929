"""An image is known by its id and its content, and nothing listed is skipped without a word:
the train/test layout, symlinked class folders (real files, real cluster)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile

import numpy as np
import pytest
from PIL import Image

from imgscale.storage import open_store
from tests.jobs.conftest import refused
from tests.jobs.test_ingest_images import (
    digit_images,
    gist_tiny,
    ingest,
    png_bytes,
    write_folder,
)

pytestmark = pytest.mark.slow


def test_the_train_test_layout_keeps_both_splits_with_no_flag(tmp_path, scheduler_address):
    """photos/train/<class>/000.png and photos/test/<class>/000.png are different photos."""
    photos, store = tmp_path / "photos", tmp_path / "s.zarr"
    train, test = digit_images(2), digit_images(2, offset=2)
    write_folder(photos / "train", train)
    write_folder(photos / "test", {key.replace("/002", "/000").replace("/003", "/001"): image
                                   for key, image in test.items()})  # fmt: skip
    ingest(
        str(photos / "train"), str(store), "--features", "gist-tiny", scheduler=scheduler_address
    )
    summary = ingest(str(photos / "test"), str(store), "--split", "test",
                     scheduler=scheduler_address)  # fmt: skip
    assert (summary["rows"], summary["refused"], summary["images_seen"]) == (6, 0, 6)
    opened = open_store(store)
    ids = list(opened.ids(split="test"))
    assert sorted(ids) == sorted(f"test/{key}" for key in train)
    assert sorted(opened.ids(split="train")) == sorted(train)
    names = np.array(opened.class_names)[opened.labels(split="test")]
    assert list(names) == [key.split("/")[1] for key in ids]
    X = opened.features(split="test").compute()
    reference = gist_tiny([Image.open(photos / key) for key in ids])
    np.testing.assert_allclose(X, reference, rtol=1e-5, atol=1e-6)
    # Both ingests again: nothing new.
    assert ingest(str(photos / "test"), str(store), "--split", "test",
                  scheduler=scheduler_address)["images_seen"] == 0  # fmt: skip
    assert ingest(str(photos / "train"), str(store), scheduler=scheduler_address)["rows"] == 0


def test_tar_shards_reusing_the_train_shards_keys_go_in_as_the_test_split(
    tmp_path, scheduler_address
):
    images = digit_images(3, classes=(0,)) | digit_images(3, classes=(0,), offset=3)
    keys = sorted(images)
    for name, part in (("train", keys[:3]), ("test", keys[3:])):
        with tarfile.open(tmp_path / f"{name}-0000.tar", "w") as tar:
            for n, key in enumerate(part):
                info = tarfile.TarInfo(f"sample{n}.png")
                data = png_bytes(images[key])
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    store = tmp_path / "s.zarr"
    ingest(str(tmp_path / "train-0000.tar"), str(store), "--features", "gist-tiny",
           scheduler=scheduler_address)  # fmt: skip
    summary = ingest(str(tmp_path / "test-0000.tar"), str(store), "--split", "test",
                     scheduler=scheduler_address)  # fmt: skip
    assert summary["rows"] == 3
    assert sorted(open_store(store).ids(split="test")) == [f"test/sample{n}" for n in range(3)]


def test_a_symlinked_class_folder_is_followed_as_symlinked_files_are(tmp_path, scheduler_address):
    photos, elsewhere = tmp_path / "photos", tmp_path / "elsewhere"
    images = digit_images(2)
    write_folder(photos, {k: v for k, v in images.items() if not k.startswith("digit-2")})
    write_folder(elsewhere, {k: v for k, v in images.items() if k.startswith("digit-2")})
    os.symlink(elsewhere / "digit-2", photos / "digit-2")
    summary = ingest(str(photos), str(tmp_path / "s.zarr"), "--features", "gist-tiny",
                     scheduler=scheduler_address)  # fmt: skip
    assert summary["rows"] == 6
    assert sorted(open_store(tmp_path / "s.zarr").ids()) == sorted(images)


def test_a_folder_link_loop_is_refused_naming_the_link(tmp_path, scheduler_address):
    photos = tmp_path / "photos"
    write_folder(photos, digit_images(1))
    os.symlink(photos, photos / "digit-0" / "again")
    message = refused("ingest", str(photos), str(tmp_path / "s.zarr"), "--features", "gist-tiny",
                      "--scheduler", scheduler_address)  # fmt: skip
    assert f"{photos / 'digit-0' / 'again'}: a symbolic link to" in message
    assert "(a loop)" in message
    assert not (tmp_path / "s.zarr").exists()


def rerun(*args: str) -> tuple[dict, str]:
    """``imgscale ingest ARGS --json`` in its own process: its summary and its stderr."""
    result = subprocess.run(
        [sys.executable, "-m", "imgscale", "ingest", *args, "--json"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout), result.stderr


def test_rewritten_and_deleted_files_are_reported_by_count_until_ingest_refresh_replaces_them(
    tmp_path, scheduler_address
):
    """A camera's IMG_0001.jpg reused for a new photo, an edited photo, a deleted one: each
    counted and said; a file touched with the same bytes is not."""
    photos, store = tmp_path / "incoming", tmp_path / "s.zarr"
    images = digit_images(2)
    write_folder(photos, images)
    ingest(str(photos), str(store), "--features", "gist-tiny", scheduler=scheduler_address)
    new_photos = digit_images(1, classes=(7, 8))
    new_photos["digit-7/000.png"].save(photos / "digit-0" / "000.png")
    new_photos["digit-8/000.png"].save(photos / "digit-1" / "001.png")
    (photos / "digit-2" / "001.png").unlink()
    os.utime(photos / "digit-2" / "000.png", ns=(1, 10**18))  # touched: same bytes
    summary, stderr = rerun(str(photos), str(store))
    assert (summary["changed"], summary["deleted"], summary["rows"]) == (2, 1, 0)
    assert "2 images changed" in stderr and "1 deleted" in stderr
    assert f"imgscale ingest {photos} {store} --refresh" in stderr
    # Still so on the next run: nothing was resolved.
    assert rerun(str(photos), str(store))[0]["changed"] == 2

    refreshed, _ = rerun(str(photos), str(store), "--refresh", "--scheduler", scheduler_address)
    assert (refreshed["forgotten"], refreshed["rows"], refreshed["store_rows"]) == (3, 2, 5)
    opened = open_store(store)
    ids = list(opened.ids())
    assert sorted(ids) == sorted(set(images) - {"digit-2/001.png"})
    X = opened.features().compute()
    reference = gist_tiny([Image.open(photos / key) for key in ids])
    np.testing.assert_allclose(X, reference, rtol=1e-5, atol=1e-6)
    after, stderr = rerun(str(photos), str(store))
    assert (after["changed"], after["deleted"], after["images_seen"]) == (0, 0, 0)
    assert "changed" not in stderr
