"""`imgscale bench images`: its GIST peer is the descriptor's equations, and a tiny run measures
every stage, source kind and cluster size it promises."""

import numpy as np
import pytest

from imgscale.bench.images import GIST, GIST_TINY, KINDS
from imgscale.bench.lmgist import reference_gist
from imgscale.pipeline.describe import DESCRIPTORS
from tests.bench.conftest import benchmark_rows
from tests.bench.tiny_run import RUN_SECONDS

# The tiny run of every benchmark is made by whichever test asks for it first.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(RUN_SECONDS + 60)]


@pytest.mark.parametrize("setting", [GIST_TINY, GIST])
def test_the_peers_gist_is_the_descriptors(setting):
    """The plain loop computes the same GIST as `imgscale ingest --features NAME`."""
    name, orientations, size = setting
    rng = np.random.default_rng(0)
    y, x = np.mgrid[:size, :size] / size
    images = np.stack(
        [
            rng.integers(0, 256, (size, size)),
            np.clip(100 + 80 * x + 60 * (np.hypot(x - 0.5, y - 0.4) < 0.2), 0, 255),
        ]
    ).astype(np.uint8)
    ours = DESCRIPTORS[name]().fit().transform(images)
    for image, row in zip(images, ours, strict=True):
        want = reference_gist(image, orientations, 4)
        assert np.abs(row - want).max() / np.abs(want).max() < 1e-4


@pytest.fixture(scope="module")
def tiny_records(tiny_run):
    """The images benchmark's rows of the session's tiny run (sklearn's digits as JPEGs)."""
    return benchmark_rows(tiny_run, "images")


def test_every_stage_of_every_source_kind_is_measured_beside_its_peer(tiny_records):
    for kind in KINDS:
        for stage in ("listing", "read only", "read + decode (RGB as stored)"):
            assert tiny_records[f"{kind}: {stage}"]["value"] > 0
        colour = tiny_records[f"{kind}: read + decode + color vs read + decode"]
        assert (
            colour["peer_value"] == tiny_records[f"{kind}: read + decode (RGB as stored)"]["value"]
        )
        for name, _, size in (GIST_TINY, GIST):
            stage = tiny_records[f"{kind}: read + decode + {name} ({size}×{size}), 1 process"]
            assert stage["value"] > 0 and stage["peer_value"] > 0
            assert stage["ratio"] == pytest.approx(stage["value"] / stage["peer_value"])


def test_ingest_runs_on_one_and_two_workers_with_the_peer_and_the_speed_up(tiny_records):
    for kind in (*KINDS, "parquet 256×256"):
        features = ("gist",) if kind.endswith("256") else ("color", "gist-tiny", "gist")
        for feature in features:
            for workers in (1, 2):
                run = tiny_records[
                    f"{kind}: imgscale ingest --features {feature}, {workers} worker(s)"
                ]
                assert run["value"] > 0 and run["peer_value"] > 0 and run["workers"] == workers
                assert run["images"] == (24 if feature == "gist" else 120)
                assert 0 <= run["load_1min"]
            speedup = tiny_records[f"{kind}: ingest --features {feature}, speed-up 1 → 2 workers"]
            assert speedup["value"] > 0 and speedup["peer_value"] > 0


def test_peak_rss_of_client_and_workers_is_measured_at_two_sizes(tiny_records):
    for kind in KINDS:
        for who in ("client", "largest worker"):
            name = f"{kind}: ingest gist-tiny, 2 workers, peak RSS of the {who} at 120 images"
            rss = tiny_records[name]
            # A Python process with numpy, Dask and Pillow loaded holds at least 50 MiB.
            assert 0.05 < rss["value"] < 8 and 0.05 < rss["peer_value"] < 8
            assert "24 images" in rss["peer"]


def test_the_front_end_is_measured_at_each_size_beside_decode_only_and_the_smallest_size(
    tiny_records,
):
    """At tiny scale, 48 and 96 small JPEGs in tar shards of 16 (10⁴ to 10⁶ at large)."""
    decode = None
    for n in (48, 96):
        ingest = tiny_records[
            f"front end: imgscale ingest --features color of {n:,} small JPEGs in tar shards"
        ]
        assert ingest["images"] == n and ingest["workers"] == 2 and ingest["value"] > 0
        decode = decode or ingest["peer_value"]
        assert ingest["peer_value"] == decode > 0  # one decode-only figure for every size
        cpu = tiny_records[f"front end: client CPU an image (scheduler included) at {n:,} images"]
        assert cpu["value"] > 0 and cpu["commits"] >= 1
        for who in ("client", "largest worker", "client, ingesting again"):
            rss = tiny_records[f"front end: peak RSS of the {who} at {n:,} images"]
            assert 0.05 < rss["value"] < 8
            assert rss["peer"].startswith("the same at 48 images")
        again = tiny_records[f"front end: ingest again, nothing new, {n:,} images"]
        assert again["new_rows"] == 0 and 0 < again["value"]
        assert 0 < again["cpu_seconds"] < again["value"] * 3  # the client's and 2 workers' CPU
        assert again["peer_value"] == pytest.approx(n / ingest["value"])
