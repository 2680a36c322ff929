"""`imgscale ingest SOURCE STORE --features ...`: real image files through the CLI on a real
multi-process cluster, one row per image, every image once, bad images refused by name."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tarfile
import time
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from PIL import Image
from sklearn.datasets import load_digits

from imgscale.jobs.cli import cli
from imgscale.pipeline.describe import DESCRIPTORS
from imgscale.storage import StoreError, open_store

pytestmark = pytest.mark.slow
IMGSCALE = str(Path(sys.executable).with_name("imgscale"))


def digit_images(n_per_class: int, classes=(0, 1, 2), offset: int = 0) -> dict[str, Image.Image]:
    """sklearn's 8×8 digits scaled to 32×32 RGB: {"digit-<class>/<n>.png": image}."""
    digits = load_digits()
    images = {}
    for label in classes:
        rows = np.flatnonzero(digits.target == label)[offset : offset + n_per_class]
        for i, row in enumerate(rows, start=offset):
            grey = (digits.images[row] * 255 / 16).astype(np.uint8)
            image = Image.fromarray(grey).resize((32, 32), Image.BILINEAR).convert("RGB")
            images[f"digit-{label}/{i:03d}.png"] = image
    return images


def write_folder(root: Path, images: dict[str, Image.Image]) -> None:
    for key, image in images.items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        image.save(root / key)


def png_bytes(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def gist_tiny(images: list[Image.Image]) -> np.ndarray:
    """The reference: Pillow's own decode and luma of lossless 32×32 images, then the
    descriptor (tested against its dense float64 reference in tests/pipeline/describe)."""
    grey = np.stack([np.asarray(image.convert("L")) for image in images])
    return DESCRIPTORS["gist-tiny"]().fit().transform(grey)


def ingest(*args: str, scheduler: str) -> dict:
    result = CliRunner().invoke(cli, ["ingest", *args, "--scheduler", scheduler, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def rejected(store: Path) -> dict[str, str]:
    result = CliRunner().invoke(cli, ["info", str(store), "--rejected", "--json"])
    assert result.exit_code == 0, result.output
    return {r["key"]: r["reason"] for r in json.loads(result.stdout)["rejected"]}


def test_a_folder_tree_becomes_one_row_per_image_labelled_by_its_folder(
    tmp_path, scheduler_address
):
    images = digit_images(8)
    write_folder(tmp_path / "photos", images)
    summary = ingest(str(tmp_path / "photos"), str(tmp_path / "s.zarr"), "--features",
                     "gist-tiny", scheduler=scheduler_address)  # fmt: skip
    assert (summary["rows"], summary["refused"], summary["dim"]) == (24, 0, 320)
    store = open_store(tmp_path / "s.zarr")
    ids = list(store.ids())
    assert sorted(ids) == sorted(images)
    names = np.array(store.class_names)[store.labels()]
    assert [name for name in names] == [key.split("/")[0] for key in ids]
    X = store.features().compute()
    np.testing.assert_allclose(X, gist_tiny([images[key] for key in ids]), rtol=1e-5, atol=1e-6)
    assert store.descriptor["features"][0]["name"] == "gist-tiny"


def test_naming_a_grown_folder_again_reads_and_adds_only_its_new_images(
    tmp_path, scheduler_address
):
    photos, store = tmp_path / "photos", str(tmp_path / "s.zarr")
    write_folder(photos, digit_images(5))
    assert ingest(str(photos), store, "--features", "gist-tiny,color",
                  scheduler=scheduler_address)["rows"] == 15  # fmt: skip
    again = ingest(str(photos), store, scheduler=scheduler_address)  # features from the store
    assert (again["rows"], again["images_seen"]) == (0, 0)
    write_folder(photos, digit_images(2, offset=5))
    grown = ingest(str(photos), store, scheduler=scheduler_address)
    assert (grown["rows"], grown["images_seen"]) == (6, 6)
    assert open_store(store).committed_rows == 21
    assert len(set(open_store(store).ids())) == 21


def test_a_renamed_copy_is_refused_as_a_duplicate_naming_the_original(tmp_path, scheduler_address):
    photos, store = tmp_path / "photos", tmp_path / "s.zarr"
    write_folder(photos, digit_images(3))
    ingest(str(photos), str(store), "--features", "gist-tiny", scheduler=scheduler_address)
    shutil.copy(photos / "digit-0/000.png", photos / "digit-1/copy-of-zero.png")
    summary = ingest(str(photos), str(store), scheduler=scheduler_address)
    assert (summary["rows"], summary["refused"]) == (0, 1)
    reason = rejected(store)["digit-1/copy-of-zero.png"]
    assert "same bytes as 'digit-0/000.png'" in reason


def test_a_later_batch_described_otherwise_is_refused(tmp_path, scheduler_address):
    photos, store = tmp_path / "photos", str(tmp_path / "s.zarr")
    write_folder(photos, digit_images(2))
    ingest(str(photos), store, "--features", "gist-tiny", scheduler=scheduler_address)
    write_folder(photos, digit_images(1, offset=2))
    result = CliRunner().invoke(
        cli, ["ingest", str(photos), store, "--features", "color", "--scheduler", scheduler_address]
    )
    assert result.exit_code != 0
    message = str(result.exception)
    assert "described by gist-tiny" in message and "described by color" in message
    assert open_store(store).committed_rows == 6


def bad_images() -> dict[str, bytes]:
    """Awkward files, named by what they are: {file name: bytes}."""
    good_jpeg = io.BytesIO()
    Image.fromarray(np.tile(np.arange(64, dtype=np.uint8), (64, 1))).convert("RGB").save(
        good_jpeg, format="JPEG"
    )
    cmyk = io.BytesIO()
    Image.new("CMYK", (32, 32), (0, 255, 255, 0)).save(cmyk, format="JPEG")
    grey16 = io.BytesIO()
    Image.fromarray(np.full((32, 32), 40000, np.uint16)).save(grey16, format="PNG")
    palette = Image.new("P", (32, 32), 0)
    palette.putpalette([255, 0, 0, 0, 0, 255] + [0] * 762)
    palette.paste(1, (0, 0, 16, 32))
    palette_png = io.BytesIO()
    palette.save(palette_png, format="PNG", transparency=0)
    gif = io.BytesIO()
    frames = [Image.new("L", (32, 32), v) for v in (10, 200)]
    frames[0].save(gif, format="GIF", save_all=True, append_images=frames[1:])
    one = io.BytesIO()
    Image.new("RGB", (1, 1)).save(one, format="PNG")
    return {
        "truncated.jpg": good_jpeg.getvalue()[: len(good_jpeg.getvalue()) // 2],
        "empty.jpg": b"",
        "page.jpg": b"<!DOCTYPE html><html><body>404</body></html>",
        "one-pixel.png": one.getvalue(),
        "bomb.png": huge_png(30_000, 30_000),
        "cmyk.jpg": cmyk.getvalue(),
        "sixteen-bit.png": grey16.getvalue(),
        "palette-transparent.png": palette_png.getvalue(),
        "animated.gif": gif.getvalue(),
    }


def huge_png(width: int, height: int) -> bytes:
    """A valid PNG header for width × height grey pixels and a tiny IDAT: no pixel is ever held."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    idat = zlib.compress(b"\0" * 1024)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")
    )


def test_bad_images_never_stop_a_batch_and_never_pass_silently(tmp_path, scheduler_address):
    photos, store = tmp_path / "photos", tmp_path / "s.zarr"
    write_folder(photos, digit_images(2, classes=(0,)))
    (photos / "odd").mkdir()
    for name, data in bad_images().items():
        (photos / "odd" / name).write_bytes(data)
    summary = ingest(str(photos), str(store), "--features", "gist-tiny,color",
                     scheduler=scheduler_address)  # fmt: skip
    reasons = rejected(store)
    refused = {f"odd/{n}" for n in ("truncated.jpg", "empty.jpg", "page.jpg", "one-pixel.png",
                                    "bomb.png")}  # fmt: skip
    assert set(reasons) == refused
    assert "not an image" in reasons["odd/page.jpg"]
    assert "empty" in reasons["odd/empty.jpg"]
    assert "pixel" in reasons["odd/bomb.png"]
    assert (summary["rows"], summary["refused"]) == (2 + 4, 5)
    ids = set(open_store(store).ids())
    assert {"odd/cmyk.jpg", "odd/sixteen-bit.png", "odd/palette-transparent.png",
            "odd/animated.gif"} <= ids  # fmt: skip
    info = json.loads(CliRunner().invoke(cli, ["info", str(store), "--json"]).stdout)
    assert info["rejected"] == 5

    # Fixed and ingested again, the truncated image goes in and leaves the rejects; the others
    # are refused again (and not listed twice).
    Image.new("RGB", (40, 40), (9, 99, 199)).save(photos / "odd" / "truncated.jpg", format="JPEG")
    again = ingest(str(photos), str(store), scheduler=scheduler_address)
    assert again["rows"] == 1
    assert set(rejected(store)) == refused - {"odd/truncated.jpg"}


def test_a_batch_of_only_bad_images_commits_no_rows_and_says_so(tmp_path, scheduler_address):
    photos = tmp_path / "photos"
    photos.mkdir()
    (photos / "a.jpg").write_bytes(b"")
    (photos / "b.jpg").write_bytes(b"GIF89a nothing")
    result = CliRunner().invoke(
        cli, ["ingest", str(photos), str(tmp_path / "s.zarr"), "--features", "gist-tiny",
              "--scheduler", scheduler_address],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "0 images added, 2 refused" in result.output
    assert "every image read was refused" in result.output
    assert open_store(tmp_path / "s.zarr").committed_rows == 0
    assert set(rejected(tmp_path / "s.zarr")) == {"a.jpg", "b.jpg"}


def test_tar_shards_and_parquet_of_bytes_give_the_rows_a_folder_gives(tmp_path, scheduler_address):
    images = digit_images(4)
    write_folder(tmp_path / "photos", images)
    ingest(str(tmp_path / "photos"), str(tmp_path / "folder.zarr"), "--features", "gist-tiny",
           scheduler=scheduler_address)  # fmt: skip
    keys = sorted(images)
    for shard in range(2):
        with tarfile.open(tmp_path / f"shards-{shard:04d}.tar", "w") as tar:
            for key in keys[shard::2]:
                for suffix, data in ((".png", png_bytes(images[key])), (".cls", key[:7].encode())):
                    info = tarfile.TarInfo(key.replace("/", "_")[:-4] + suffix)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    ingest(str(tmp_path / "shards-{0000..0001}.tar"), str(tmp_path / "tar.zarr"),
           "--features", "gist-tiny", scheduler=scheduler_address)  # fmt: skip
    table = pa.table(
        {
            "id": keys,
            "label": [key[:7] for key in keys],
            "image": [png_bytes(images[key]) for key in keys],
        }
    )
    pq.write_table(table, tmp_path / "images.parquet", row_group_size=5)
    ingest(str(tmp_path / "images.parquet"), str(tmp_path / "parquet.zarr"), "--features",
           "gist-tiny", scheduler=scheduler_address)  # fmt: skip

    def by_key(name: str, rename=lambda k: k) -> dict:
        store = open_store(tmp_path / name)
        X = store.features().compute()
        names = np.array(store.class_names)[store.labels()]
        return {rename(k): (x, n) for k, x, n in zip(store.ids(), X, names, strict=True)}

    folder = by_key("folder.zarr", lambda k: k.replace("/", "_")[:-4])
    for other in (by_key("tar.zarr"), by_key("parquet.zarr", lambda k: k.replace("/", "_")[:-4])):
        assert sorted(other) == sorted(folder)
        for key, (x, name) in other.items():
            # Equal up to float32 rounding: the descriptor's products are batched by BLAS.
            np.testing.assert_allclose(x, folder[key][0], rtol=1e-5, atol=1e-7)
            assert name == folder[key][1]


def committed_rows(store: Path) -> int:
    try:
        return open_store(store).committed_rows
    except StoreError:  # not created yet
        return 0


def test_kill_9_at_any_moment_then_rerun_holds_every_image_exactly_once(tmp_path):
    photos, store = tmp_path / "photos", tmp_path / "s.zarr"
    images = digit_images(60, classes=tuple(range(10)))
    write_folder(photos, images)
    command = [IMGSCALE, "ingest", str(photos), str(store), "--features", "gist-tiny",
               "--commit-rows", "40"]  # fmt: skip
    env = {**os.environ, "DASK_SCHEDULER_ADDRESS": ""}
    child = subprocess.Popen(command, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    deadline = time.monotonic() + 120
    while not committed_rows(store):
        assert child.poll() is None, "ingest ended before its first commit"
        assert time.monotonic() < deadline, "no commit within 120 s"
        time.sleep(0.01)
    time.sleep(np.random.default_rng().uniform(0, 0.3))  # anywhere in the next commits
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    committed = open_store(store).committed_rows
    assert 0 < committed < len(images)
    rerun = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    ids = list(open_store(store).ids())
    assert len(ids) == len(set(ids)) == len(images)
    assert set(ids) == set(images)


def test_a_folder_on_s3_into_a_store_on_s3(tmp_path, s3_bucket, monkeypatch):
    import fsspec

    images = digit_images(3)
    write_folder(tmp_path / "photos", images)
    (tmp_path / "photos" / "digit-0" / "empty.jpg").write_bytes(b"")
    fsspec.filesystem("s3").put(f"{tmp_path / 'photos'}/", f"{s3_bucket}/photos/", recursive=True)
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
    store = f"{s3_bucket}/photos.zarr"
    result = CliRunner().invoke(
        cli, ["ingest", f"{s3_bucket}/photos/", store, "--features", "gist-tiny", "--json"]
    )
    assert result.exit_code == 0, f"{result.output} {result.exception!r}"
    assert (json.loads(result.stdout)["rows"], json.loads(result.stdout)["refused"]) == (9, 1)
    opened = open_store(store)
    ids = list(opened.ids())
    assert sorted(ids) == sorted(images)
    np.testing.assert_allclose(
        opened.features().compute(), gist_tiny([images[k] for k in ids]), rtol=1e-5, atol=1e-6
    )
    assert [r["key"] for r in opened.rejected().to_pylist()] == ["digit-0/empty.jpg"]
