"""`imgscale fit-features` and `ingest --features bow:/fisher:` through the CLI on a real
multi-process cluster: the vocabulary learned from local descriptors kept on the workers is the
one the same passes learn in one process, the rows are the vocabulary's encodings of the images,
and another vocabulary, or a vocabulary of another kind, is refused in one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from sklearn.datasets import load_sample_images

from imgscale.jobs.fit_vocabulary import local_descriptors_of_sample, vocabulary_of
from imgscale.jobs.ingest import sample_partitions
from imgscale.jobs.models import load
from imgscale.pipeline.describe import InMemoryChunks
from imgscale.storage import open_store
from tests.jobs.conftest import refused, run

pytestmark = pytest.mark.slow
SIZE = 48


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    """A folder tree of 48×48 RGB PNGs cut from sklearn's two photos, one folder a photo."""
    root = tmp_path_factory.mktemp("photos")
    rng = np.random.default_rng(0)
    for name, photo in zip(("china", "flower"), load_sample_images().images, strict=True):
        (root / name).mkdir()
        for i, (y, x) in enumerate(rng.integers(0, 400 - 2 * SIZE, (8, 2))):
            crop = photo[y : y + 2 * SIZE : 2, x : x + 2 * SIZE : 2]
            Image.fromarray(np.ascontiguousarray(crop)).save(root / name / f"{i}.png")
    return root


def decoded(root: Path, keys: list[str], mode: str) -> np.ndarray:
    """Pillow's own decode of the lossless PNGs (already at the working size)."""
    return np.stack([np.asarray(Image.open(root / key).convert(mode)) for key in keys])


def fit(photos: Path, out: Path, scheduler: str, *options: str) -> dict:
    return run("fit-features", str(photos), str(out), "--image-size", str(SIZE),
               "--scheduler", scheduler, *options)  # fmt: skip


def test_bow_rows_are_the_vocabularys_histograms_of_each_image(photos, tmp_path, scheduler_address):
    summary = fit(photos, tmp_path / "bow.model", scheduler_address,
                  "--features", "bow", "--words", "20", "--pyramid-levels", "2")  # fmt: skip
    assert summary["images"] == 16 and summary["local_descriptors"] == 16 * 25
    assert summary["dim"] == 20 * 5
    store = tmp_path / "bow.zarr"
    ingest = run("ingest", str(photos), str(store), "--features",
                 f"bow:{tmp_path / 'bow.model'}", "--scheduler", scheduler_address)  # fmt: skip
    assert ingest["rows"] == 16 and ingest["dim"] == 100
    rows = open_store(store)
    ids = rows.rows(columns=["id"]).column("id").to_pylist()
    vocabulary, _ = load(tmp_path / "bow.model")
    expected = vocabulary.transform(decoded(photos, ids, "L"))
    np.testing.assert_allclose(np.asarray(rows.features()[:]), expected, atol=1e-6)


def test_several_patch_sizes_describe_the_images_at_several_scales(
    photos, tmp_path, scheduler_address
):
    summary = fit(photos, tmp_path / "bow.model", scheduler_address,
                  "--features", "bow", "--words", "10", "--patch-size", "16,24")  # fmt: skip
    # 48-px images every 8 px: 5 × 5 patches of 16 px and 4 × 4 of 24 px.
    assert summary["local_descriptors"] == 16 * (25 + 16)
    vocabulary, _ = load(tmp_path / "bow.model")
    assert tuple(vocabulary.patch_sizes) == (16, 24)


def test_the_cluster_fit_is_the_in_process_fit_of_the_same_sample(
    photos, tmp_path, scheduler_address
):
    fit(photos, tmp_path / "fv.model", scheduler_address, "--features", "fisher",
        "--gaussians", "3", "--components", "8", "--sample", "10", "--seed", "4")  # fmt: skip
    on_cluster, provenance = load(tmp_path / "fv.model")
    assert provenance["sample_images"] == 10
    here = vocabulary_of("fisher", n_gaussians=3, n_components=8, patch_sizes=(16,), step=8,
                         image_size=SIZE, sift_window=2.25, random_state=4)  # fmt: skip
    chunks = [
        local_descriptors_of_sample(here, item) for item in sample_partitions(str(photos), 10, 4)
    ]
    here.fit_chunks(InMemoryChunks(chunks), sum(len(c["sift"]) for c in chunks))
    for name in ("sift_components_", "sift_means_", "color_variances_", "color_weights_"):
        np.testing.assert_allclose(getattr(on_cluster, name), getattr(here, name), rtol=1e-6)
    assert on_cluster.n_iter_ == here.n_iter_


def test_the_default_working_size_is_the_samples_median_shorter_side_within_bounds(
    tmp_path, scheduler_address
):
    rng = np.random.default_rng(5)
    sizes = {"a": [(120, 100)] * 3 + [(200, 90)] * 2, "b": [(40, 30)] * 2}  # (width, height)
    for name, shapes in sizes.items():
        (tmp_path / "src" / name).mkdir(parents=True)
        for i, (width, height) in enumerate(shapes):
            pixels = rng.integers(0, 256, (height, width), dtype=np.uint8)
            Image.fromarray(pixels).save(tmp_path / "src" / name / f"{i}.png")
    options = ("--features", "bow", "--words", "4", "--scheduler", scheduler_address)
    # Shorter sides 100, 100, 100, 90, 90, 30, 30: the median, 90.
    summary = run("fit-features", str(tmp_path / "src"), str(tmp_path / "bow.model"), *options)
    assert summary["image_size"] == 90
    vocabulary, _ = load(tmp_path / "bow.model")
    assert vocabulary.image_size == 90 and vocabulary.sift_window == 2.25
    # Only the small images: their median, 30, is raised to the 64 px of the lower bound.
    summary = run(
        "fit-features", str(tmp_path / "src" / "b"), str(tmp_path / "small.model"), *options
    )
    assert summary["image_size"] == 64


def test_fisher_rows_are_unit_norm_per_channel_and_the_vocabularys_encoding(
    photos, tmp_path, scheduler_address
):
    fit(photos, tmp_path / "fv.model", scheduler_address,
        "--features", "fisher", "--gaussians", "2", "--components", "8")  # fmt: skip
    store = tmp_path / "fv.zarr"
    run("ingest", str(photos), str(store), "--features", f"fisher:{tmp_path / 'fv.model'}",
        "--scheduler", scheduler_address)  # fmt: skip
    rows = open_store(store)
    X = np.asarray(rows.features()[:])
    assert X.shape == (16, 2 * 2 * 2 * 8)
    np.testing.assert_allclose(np.linalg.norm(X[:, :32], axis=1), 1, rtol=1e-5)
    ids = rows.rows(columns=["id"]).column("id").to_pylist()
    vocabulary, _ = load(tmp_path / "fv.model")
    np.testing.assert_allclose(X, vocabulary.transform(decoded(photos, ids, "RGB")), atol=1e-5)


def test_a_store_made_with_another_vocabulary_is_refused_in_one_line(
    photos, tmp_path, scheduler_address
):
    for seed in ("1", "2"):
        fit(photos, tmp_path / f"v{seed}.model", scheduler_address,
            "--features", "bow", "--words", "8", "--seed", seed)  # fmt: skip
    store = tmp_path / "s.zarr"
    first = photos / "china"
    run("ingest", str(first), str(store), "--features", f"bow:{tmp_path / 'v1.model'}",
        "--scheduler", scheduler_address)  # fmt: skip
    message = refused("ingest", str(photos / "flower"), str(store), "--features",
                      f"bow:{tmp_path / 'v2.model'}", "--scheduler", scheduler_address)  # fmt: skip
    assert "\n" not in message and "v1.model" in message and "v2.model" in message
    assert "refusing rows described by" in message


def test_a_model_is_refused_on_a_store_made_with_another_vocabulary(
    photos, tmp_path, scheduler_address
):
    # Same descriptor, same width: only the record of the vocabulary tells the rows apart.
    for seed in ("1", "2"):
        fit(photos, tmp_path / f"v{seed}.model", scheduler_address,
            "--features", "bow", "--words", "8", "--seed", seed)  # fmt: skip
        run("ingest", str(photos), str(tmp_path / f"s{seed}.zarr"), "--features",
            f"bow:{tmp_path / f'v{seed}.model'}", "--scheduler", scheduler_address)  # fmt: skip
    model = str(tmp_path / "ncm.model")
    run("train", str(tmp_path / "s1.zarr"), model, "--method", "ncm",
        "--scheduler", scheduler_address)  # fmt: skip
    assert run("evaluate", model, str(tmp_path / "s1.zarr"), "--split", "train",
               "--scheduler", scheduler_address)["rows"] == 16  # fmt: skip
    for command in (["evaluate", "--split", "train"], ["predict", "--split", "train"]):
        extra = [str(tmp_path / "p.parquet")] if command[0] == "predict" else []
        message = refused(command[0], model, str(tmp_path / "s2.zarr"), *extra, *command[1:],
                          "--scheduler", scheduler_address)  # fmt: skip
        assert "\n" not in message and "v1.model" in message and "v2.model" in message
        assert "learned from rows described by" in message
    assert not (tmp_path / "p.parquet").exists()


def test_a_vocabulary_of_another_kind_or_no_vocabulary_is_refused_in_one_line(
    photos, tmp_path, scheduler_address
):
    fit(photos, tmp_path / "fv.model", scheduler_address,
        "--features", "fisher", "--gaussians", "2", "--components", "4")  # fmt: skip
    message = refused("ingest", str(photos), str(tmp_path / "s.zarr"), "--features",
                      f"bow:{tmp_path / 'fv.model'}")  # fmt: skip
    assert "is a FisherVector vocabulary" in message and "expected a BagOfWords" in message
    assert "\n" not in message
    message = refused("ingest", str(photos), str(tmp_path / "s.zarr"), "--features",
                      f"fisher:{photos}")  # fmt: skip
    assert "not an imgscale model" in message and "\n" not in message


def test_an_image_size_under_one_patch_and_options_of_the_other_kind_are_refused(photos, tmp_path):
    message = refused("fit-features", str(photos), str(tmp_path / "v.model"),
                      "--features", "bow", "--image-size", "12")  # fmt: skip
    # The flags the user gave are named, not the estimator's parameters.
    assert "--image-size: 12 is smaller than one 16-pixel patch (--patch-size 16)" in message
    assert "image_size" not in message and "\n" not in message
    message = refused("fit-features", str(photos), str(tmp_path / "v.model"), "--features",
                      "bow", "--image-size", "16", "--patch-size", "8,24")  # fmt: skip
    assert "--image-size: 16 is smaller than one 24-pixel patch (--patch-size 8,24)" in message
    for sizes in ("2", "8,x"):
        message = refused("fit-features", str(photos), str(tmp_path / "v.model"),
                          "--features", "bow", "--patch-size", sizes)  # fmt: skip
        assert f"--patch-size: {sizes!r}: expected integers >= 4" in message
        assert "patch_sizes" not in message
    message = refused("fit-features", str(photos), str(tmp_path / "v.model"),
                      "--features", "fisher", "--words", "10")  # fmt: skip
    assert "--words: not for --features fisher" in message
    for size in ("big", "2"):
        message = refused("fit-features", str(photos), str(tmp_path / "v.model"),
                          "--features", "bow", "--image-size", size)  # fmt: skip
        assert f"{size!r}: expected auto or an integer >= 4" in message and "\n" not in message
    message = refused("fit-features", str(photos), str(tmp_path / "v.model"),
                      "--features", "bow", "--sift-window", "0")  # fmt: skip
    assert "--sift-window" in message
    assert not (tmp_path / "v.model").exists()


def test_a_source_without_listed_keys_gives_its_first_images_of_every_partition(photos, tmp_path):
    # Parquet of image bytes: listing gives no keys but the row groups' sizes, so the sample
    # of 6 is shared over the 4 partitions of 4 images in proportion (2, 2, 1, 1): exactly 6.
    import pyarrow as pa
    import pyarrow.parquet as pq

    pngs = sorted(photos.rglob("*.png"))
    table = pa.table({"image": [p.read_bytes() for p in pngs], "id": [p.name for p in pngs]})
    pq.write_table(table, tmp_path / "images.parquet", row_group_size=4)
    items = sample_partitions(str(tmp_path / "images.parquet"), 6, 0, images_per_partition=4)
    assert len(items) == 4 and all(item.keys is None for item in items)
    assert sorted(item.limit for item in items) == [1, 1, 2, 2]
    vocabulary = vocabulary_of("bow", n_words=4, image_size=SIZE)
    chunks = [local_descriptors_of_sample(vocabulary, item) for item in items]
    assert sorted(int(c["images"][0]) for c in chunks) == [1, 1, 2, 2]
    assert sum(c["sift"].shape[0] for c in chunks) == 6 * 25


def test_a_sample_as_large_as_a_parquet_source_is_every_image(photos, tmp_path):
    # Row groups of unequal sizes (7, 7, 2): a sample of all 16 takes each group whole, where
    # ⌈16 / 3⌉ = 6 a partition would leave 2 images out.
    import pyarrow as pa
    import pyarrow.parquet as pq

    pngs = sorted(photos.rglob("*.png"))[:16]
    table = pa.table({"image": [p.read_bytes() for p in pngs]})
    pq.write_table(table, tmp_path / "images.parquet", row_group_size=7)
    items = sample_partitions(str(tmp_path / "images.parquet"), 16, 0, images_per_partition=7)
    assert [item.limit for item in items] == [7, 7, 2]
    again = sample_partitions(str(tmp_path / "images.parquet"), 100, 0, images_per_partition=7)
    assert again == items


def test_the_pass_line_shows_stage_iteration_and_figure_over_the_longer_line_before(
    capsys, monkeypatch
):
    from imgscale.jobs.cli import printers
    from imgscale.pipeline.describe import FitPass

    clock = [100.0]
    monkeypatch.setattr(printers.time, "monotonic", lambda: clock[0])
    show = printers.fit_pass_line("fit-features")
    show(FitPass("sift", "PCA", 1, 1, None))
    clock[0] += 0.6
    show(FitPass("sift", "k-means", 3, 50, 2.5e-3))
    clock[0] += 0.2
    show(FitPass("sift", "k-means", 4, 50, 1.0e-3))  # 0.2 s after the last draw: not drawn
    clock[0] += 0.4
    show(FitPass("sift", "EM", 1, 100, -85.31234))
    kmeans = "fit-features: sift k-means iteration 3/50, centres moved 2.50e-03 of the variance"
    em = "fit-features: sift EM iteration 1/100, mean log-likelihood -85.3123"
    pca = "fit-features: sift PCA"
    assert capsys.readouterr().err == f"\r{pca}\r{kmeans}\r{em.ljust(len(kmeans))}"
    printers.fit_pass_line("fit-features", quiet=True)(FitPass("sift", "PCA", 1, 1, None))
    assert capsys.readouterr().err == ""


def test_a_sample_of_tar_shards_takes_images_from_every_shard(tmp_path):
    from tests.storage.test_image_sources import fake_jpeg, write_shard

    for n in range(6):
        write_shard(tmp_path / f"s-{n}.tar", [(f"{n}-{k}.jpg", fake_jpeg(k)) for k in range(4)])
    items = sample_partitions(f"{tmp_path}/s-{{0..5}}.tar", 6, 0)
    assert [[s.name for s in item.partition.shards] for item in items] == [
        [f"s-{n}.tar"] for n in range(6)
    ]
    assert [item.limit for item in items] == [1] * 6
