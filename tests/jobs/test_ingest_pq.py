"""`imgscale ingest --features fisher:VOCAB.model --pq M` on a real multi-process cluster: the
store holds only the codes (no float row ever written), the codes are the store's codebook's
encoding of the signatures computed directly from the images, a later ingest encodes with the
same codebook, the classifiers train on the codes, and every bad input is refused in one line
naming it."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr
from PIL import Image
from sklearn.datasets import load_sample_images

from imgscale.jobs.ingest import DEFAULT_PQ_SAMPLE, sample_partitions
from imgscale.jobs.models import load
from imgscale.pipeline.pq import PQCodec
from imgscale.storage import open_store
from tests.jobs.conftest import refused, run

pytestmark = pytest.mark.slow
SIZE = 32
# Two Gaussians on 4-D projections: 2 channels × 2 gradients × 2 × 4 = 32-D signatures.
DIM = 32


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    """Two folders (a class a photo) of 32×32 RGB PNGs cut from sklearn's two photos: 300 in
    all, enough for 256 centroids a sub-quantizer, and a folder of 20 more (other keys)."""
    root = tmp_path_factory.mktemp("photos")
    rng = np.random.default_rng(0)
    for name, photo in zip(("china", "flower"), load_sample_images().images, strict=True):
        for folder, count in (("train", 150), ("more", 10)):
            (root / folder / name).mkdir(parents=True)
            for i, (y, x) in enumerate(rng.integers(0, 400 - SIZE, (count, 2))):
                crop = np.ascontiguousarray(photo[y : y + SIZE, x : x + SIZE])
                Image.fromarray(crop).save(root / folder / name / f"{folder}-{i}.png")
    return root


@pytest.fixture(scope="module")
def vocabularies(photos, tmp_path_factory, scheduler_address) -> tuple[Path, Path]:
    """Two Fisher vocabularies of the photos (seeds 1 and 2)."""
    folder = tmp_path_factory.mktemp("vocabularies")
    paths = []
    for seed in ("1", "2"):
        path = folder / f"fv{seed}.model"
        run("fit-features", str(photos / "train"), str(path), "--features", "fisher",
            "--gaussians", "2", "--components", "4", "--image-size", str(SIZE),
            "--sample", "40", "--seed", seed, "--scheduler", scheduler_address)  # fmt: skip
        paths.append(path)
    return paths[0], paths[1]


@pytest.fixture(scope="module")
def coded(photos, vocabularies, tmp_path_factory, scheduler_address) -> Path:
    """The train photos ingested with --pq 8 (4-D sub-vectors), then the 20 more as 'test'."""
    store = tmp_path_factory.mktemp("coded") / "fv.zarr"
    features = f"fisher:{vocabularies[0]}"
    run("ingest", str(photos / "train"), str(store), "--features", features, "--pq", "8",
        "--scheduler", scheduler_address)  # fmt: skip
    run("ingest", str(photos / "more"), str(store), "--split", "test",
        "--scheduler", scheduler_address)  # fmt: skip
    return store


def signatures(folder: Path, ids: list[str], vocabulary: Path) -> np.ndarray:
    """The float signatures of images ``ids`` of ``folder``, computed here from Pillow's decode."""
    images = np.stack([np.asarray(Image.open(folder / key).convert("RGB")) for key in ids])
    fisher, _ = load(vocabulary)
    return fisher.transform(images)


def test_the_codes_are_the_codebooks_encoding_of_the_signatures(photos, vocabularies, coded):
    store = open_store(coded)
    assert store.encoding == "pq" and store.dim == DIM and store.committed_rows == 320
    codec = store.codec
    assert codec.m == 8 and codec.dsub == 4
    train = np.asarray(store.codes("train")[:])
    test = np.asarray(store.codes("test")[:])
    X = signatures(photos / "train", list(store.ids("train")), vocabularies[0])
    test_keys = [i.removeprefix("test/") for i in store.ids("test")]  # ids of split test
    X_test = signatures(photos / "more", test_keys, vocabularies[0])
    np.testing.assert_array_equal(train, codec.encode(X))
    np.testing.assert_array_equal(test, codec.encode(X_test))
    # The codebook was trained on these signatures: it reconstructs them far better than
    # their spread around their mean does.
    error = np.mean(np.sum((codec.decode(train) - X) ** 2, axis=1))
    assert error < 0.2 * np.mean(np.sum((X - X.mean(axis=0)) ** 2, axis=1))


def test_the_codebook_is_pq_trained_on_the_sampled_signatures(photos, vocabularies, coded):
    """Trained a block of sub-spaces a task on the workers, it is the codebook PQCodec.train
    learns from all the sample's columns at once (every image here: the sample is 10,000)."""
    items = sample_partitions(str(photos / "train"), DEFAULT_PQ_SAMPLE, 0)
    keys = [key for item in items for key in item.partition.keys if key in item.keys]
    assert len(keys) == 300
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 300 rows: fewer than faiss's 39 a centroid
        expected = PQCodec.train(signatures(photos / "train", keys, vocabularies[0]), 8)
    np.testing.assert_allclose(open_store(coded).codec.codebook, expected.codebook, atol=1e-6)


def test_codebook_training_reports_the_sample_then_every_sub_quantizer(
    photos, vocabularies, coded, tmp_path, scheduler_address
):
    from distributed import Client

    from imgscale.jobs.ingest import plan_ingest, train_codec

    plan = plan_ingest(str(photos / "train"), tmp_path / "s.zarr",
                       features=f"fisher:{vocabularies[0]}", pq=8)  # fmt: skip
    seen = []
    with Client(scheduler_address) as client, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 300 rows: fewer than faiss's 39 a centroid
        codec, sampled = train_codec(plan, client, lambda *stage: seen.append(stage))
    sample = [s for s in seen if s[0] == "pq sample"]
    assert seen[: len(sample)] == sample  # the sample is described before any sub-space trains
    assert {(total, unit) for _, _, total, unit in sample} == {(300, "images")}
    assert sample[-1][1] == sampled == 300
    trained = [done for stage, done, total, unit in seen[len(sample) :]]
    assert {s[2:] for s in seen[len(sample) :]} == {(8, "sub-quantizers")}
    assert trained == sorted(set(trained)) and trained[-1] == 8 and len(trained) > 1
    np.testing.assert_array_equal(codec.codebook, open_store(coded).codec.codebook)


# zarr warns of the store's folders that are not zarr (its rows and classes tables).
@pytest.mark.filterwarnings("ignore:Object at")
def test_the_store_holds_no_float_rows(coded):
    group = zarr.open_group(str(coded), mode="r")
    arrays = {name: (array.shape, array.dtype) for name, array in group.arrays()}
    floats = {name for name, (_, dtype) in arrays.items() if dtype.kind == "f"}
    assert floats == {"codebook"}
    assert arrays["codebook"][0] == (8, 256, 4)
    assert arrays["codes"] == ((320, 8), np.uint8)


def test_class_means_metric_ncm_and_ridge_train_on_the_codes(coded, tmp_path, scheduler_address):
    store = open_store(coded)
    decoded = store.codec.decode(np.asarray(store.codes("train")[:]))
    y = store.labels("train")
    for method in ("ncm", "ncm-metric", "ridge", "knn"):
        model = tmp_path / f"{method}.model"
        options = ["--metric-dim", "4"] if method in ("ncm-metric", "knn") else []
        run("train", str(coded), str(model), "--method", method, *options,
            "--scheduler", scheduler_address)  # fmt: skip
        scores = run("evaluate", str(model), str(coded), "--split", "test",
                     "--scheduler", scheduler_address)  # fmt: skip
        assert 0.0 <= scores["per_class_rate"] <= 1.0
        if method == "ncm":
            ncm, _ = load(model)
            means = np.stack([decoded[y == c].mean(axis=0) for c in range(2)])
            np.testing.assert_allclose(ncm.means_, means, rtol=1e-5, atol=1e-6)


def test_pq_without_a_vocabulary_is_refused_by_name(photos, tmp_path):
    message = refused("ingest", str(photos / "train"), str(tmp_path / "s.zarr"),
                      "--features", "gist-tiny", "--pq", "8")  # fmt: skip
    assert "--pq 8" in message and "fisher:VOCAB.model" in message and "\n" not in message


def test_m_not_dividing_the_dimension_is_refused_by_name(photos, vocabularies, tmp_path):
    message = refused("ingest", str(photos / "train"), str(tmp_path / "s.zarr"),
                      "--features", f"fisher:{vocabularies[0]}", "--pq", "5")  # fmt: skip
    assert "--pq 5" in message and f"D={DIM}" in message and "\n" not in message
    assert not (tmp_path / "s.zarr").exists()


def test_another_vocabulary_or_codebook_on_a_second_ingest_is_refused(
    photos, vocabularies, coded, tmp_path
):
    other = refused("ingest", str(photos / "more"), str(coded), "--features",
                    f"fisher:{vocabularies[1]}", "--pq", "8")  # fmt: skip
    assert "refusing rows described by" in other and vocabularies[1].name in other
    codebook = refused("ingest", str(photos / "more"), str(coded), "--pq", "4")
    assert "8 sub-quantizers" in codebook and "--pq 4" in codebook and "\n" not in codebook
    assert open_store(coded).committed_rows == 320


def test_pq_into_a_store_of_float_rows_is_refused(
    photos, vocabularies, tmp_path, scheduler_address
):
    store = tmp_path / "float.zarr"
    features = f"fisher:{vocabularies[0]}"
    run("ingest", str(photos / "more" / "china"), str(store), "--features", features,
        "--scheduler", scheduler_address)  # fmt: skip
    message = refused("ingest", str(photos / "more" / "flower"), str(store), "--features",
                      features, "--pq", "8")  # fmt: skip
    assert "holds float rows" in message and "--pq 8" in message and "\n" not in message


def test_the_help_states_the_default_codebook_sample():
    # The CLI spells the default without importing the ingest (kept light): the two must agree,
    # and the default must clear faiss's 39 training rows a centroid (no warning by default).
    from click.testing import CliRunner

    from imgscale.jobs.cli import cli
    from imgscale.pipeline.pq import KSUB, MIN_TRAIN_PER_CENTROID

    help_text = " ".join(CliRunner().invoke(cli, ["ingest", "--help"]).output.split())
    assert f"train the codebook [{DEFAULT_PQ_SAMPLE}:" in help_text
    assert DEFAULT_PQ_SAMPLE >= MIN_TRAIN_PER_CENTROID * KSUB


def test_the_ingest_rate_counts_from_the_ingests_start_not_from_the_codebook_before_it(
    capsys, monkeypatch
):
    from imgscale.jobs.cli import printers

    clock = [100.0]
    monkeypatch.setattr(printers.time, "monotonic", lambda: clock[0])
    show = printers.images_progress_line()  # created as the command starts
    clock[0] = 500.0  # a new store's codebook took 400 s
    show(0, 1000, 0, 0)  # ingest_images starts describing
    clock[0] = 502.0
    show(512, 1000, 510, 2)
    assert capsys.readouterr().err.split("\r")[-1] == (
        "ingest: 512/1000 images, 256 images/s, ETA 0:00:01, 510 rows, 2 refused"
    )
