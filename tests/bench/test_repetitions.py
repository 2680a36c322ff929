"""Every speed figure of the tiny run is the median of repetitions, recorded with its spread; a
figure measured once says why."""

import re

import pytest

from tests.bench.conftest import benchmark_rows
from tests.bench.tiny_run import RUN_SECONDS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(RUN_SECONDS + 60)]

# Each benchmark's headline speed figures at tiny scale (regular expressions on the whole name).
HEADLINES = {
    "ridge": [
        r"ridge fit, 8-value rho grid, wall",
        r"ridge fit throughput",
        r"ridge fit peak RSS \(client \+ workers\)",
    ],
    "embed": [
        r"RFF-\d+ -> ridge, 8-value rho grid, wall",
        r"RFF-\d+ fit \(bandwidth pass\)",
        r"RFF-\d+ -> ridge end-to-end / GEMM rate",
    ],
    "scale": [
        r"read-only pass, cold, \d+ rows",
        r"ridge, rho validated, \d+ rows",
        r"class means, 1 -> 2 workers speed-up",
    ],
    "io": [
        r"pass Gram XᵀX \+ class sums XᵀY .*2 worker\(s\), vs float64 GEMM ceiling.*",
        r"pass class sums, 1000 classes .*, 2 worker\(s\)",
        r"read-only speed-up 1 → 2 workers .*",
        r"read np\.fromfile warm",
        r"float64 GEMM, 1 core",
    ],
    "pq": [
        r"encode throughput \(read\+encode\+write, cluster\)",
        r"ADC scan rate, 1 thread",
        r"class means, \d+ classes, from codes",
        r"codec training per sub-space, 1 thread",
    ],
    "ncm": [
        r"eq\. 9 top-5 scoring, .*",
        r"class means throughput, raw",
        r"class means throughput, PQ",
    ],
    "overhead": [
        r"imgscale train --method ncm, whole process, \d+ rows.*",
        r"imgscale --help, wall",
    ],
    "ale": [r"fit_plus_embed_seconds", r"incremental_embed_rows_per_second"],
    "update": [r"ncm update, .*", r"ridge update, .*"],
    "describe-speed": [
        r"dense SIFT, \d worker\(s\) vs OpenCV loop",
        r"EM iteration, \d worker\(s\) vs scikit-learn",
        r"GIST-512 \(128×128\) vs its FFTs alone .*",
        r"Fisher vector encoding vs skimage fisher_vector \(1 process\)",
    ],
    "ledger": [r"ledger event \(local folder\)", r"imgscale runs at .*", r"spec run detached .*"],
    "small-ingest": [
        r"ingest --features gist of \d+ photos, no cluster: .*",
        r".* new photos on a running cluster of 2 workers: seconds beyond describing them",
    ],
    "local": [r".* latency median ours", r".* recovery seconds correlation"],
    "images": [
        r"folder: imgscale ingest --features gist, 2 worker\(s\)",
        r"folder: imgscale ingest --features gist-tiny, 1 worker\(s\)",
        r"folder: ingest --features gist-tiny, speed-up 1 → 2 workers",
        r"tar: read \+ decode \(RGB as stored\)",
    ],
}
# Units of a time, a rate or a throughput: a figure in one of these is repeated or says why not.
SPEED_UNITS = {
    "s", "ms", "µs", "s per 1M rows", "rows/s", "GB/s", "GFLOP/s", "images/s", "vectors/s",
    "codes/s", "it/s", "iterations/s", "descriptors/s", "batches/s",
}  # fmt: skip


def _ordered(row: dict, key: str) -> None:
    assert row[f"{key}_min"] <= row[key] <= row[f"{key}_max"], (row["name"], key)


@pytest.mark.parametrize("benchmark", sorted(HEADLINES))
def test_headline_speed_figures_are_medians_of_repetitions_with_their_spread(tiny_run, benchmark):
    rows = benchmark_rows(tiny_run, benchmark)
    for pattern in HEADLINES[benchmark]:
        matched = [row for name, row in rows.items() if re.fullmatch(pattern, name)]
        assert matched, f"{benchmark}: no figure matches {pattern!r} in {sorted(rows)}"
        for row in matched:
            assert row["repeats"] >= 2, row["name"]
            _ordered(row, "value")
            if row["peer_value"] is not None:
                _ordered(row, "ratio")


@pytest.mark.parametrize("benchmark", sorted(HEADLINES))
def test_every_speed_figure_is_repeated_or_says_why_it_was_measured_once(tiny_run, benchmark):
    speed = [row for row in benchmark_rows(tiny_run, benchmark).values()
             if row["unit"] in SPEED_UNITS]  # fmt: skip
    assert speed
    for row in speed:
        if "why_once" in row:
            assert row["repeats"] == 1 and row["value_min"] == row["value_max"], row["name"]
        else:
            assert row["repeats"] >= 2, f"{benchmark}: {row['name']} was measured once"
