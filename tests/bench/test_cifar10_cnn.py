"""`imgscale bench cifar10-cnn` and `cnn-speed`: the splits of the protocol, and a tiny run
scoring every classifier on the CNN's and GIST's rows and timing ingest beside ONNX Runtime."""

import numpy as np
import pyarrow as pa
import pytest

from imgscale.bench.cifar10_cnn import TINY_METHODS, splits_of
from tests.bench.conftest import benchmark_rows
from tests.bench.tiny_run import RUN_SECONDS


def test_splits_take_the_first_rows_of_each_class_in_the_files_order():
    labels = ["a", "b", "a", "a", "b", "a", "b", "b", "a"]
    train = pa.table({"id": [f"t{i}" for i in range(9)], "label": labels})
    test = pa.table({"id": [f"s{i}" for i in range(7)], "label": ["a"] * 7})
    splits = splits_of(train, test, train_per_class=2, val_per_class=1, test_step=3)
    assert splits["train"].column("id").to_pylist() == ["t0", "t1", "t2", "t4"]
    assert splits["val"].column("id").to_pylist() == ["t3", "t6"]
    assert splits["test"].column("id").to_pylist() == ["s0", "s3", "s6"]


@pytest.mark.slow
@pytest.mark.timeout(RUN_SECONDS + 60)
def test_a_tiny_run_scores_both_descriptors_and_times_ingest_beside_onnx_runtime(tiny_run):
    rows = benchmark_rows(tiny_run, "cifar10-cnn")
    for features in ("CNN", "GIST-320"):
        for method in TINY_METHODS:
            rate = rows[f"{features} {method}, 10 labelled/class"]
            assert 0.1 < rate["value"] <= 1  # ten classes: chance is 0.1
            assert rows[f"{features} {method}, 10 labelled/class: train, wall"]["value"] > 0
        ingests = [r for name, r in rows.items() if name.startswith(f"{features} ingest")]
        assert {r["name"].split()[2] for r in ingests} == {"train", "val", "test"}
    speed = benchmark_rows(tiny_run, "cnn-speed")
    for workers in (1, 2):
        cold, warm = [r for r in speed.values() if r["workers"] == workers]
        for row in (cold, warm):
            assert row["value"] > 0 and row["peer_value"] > 0
            assert row["ratio"] == pytest.approx(row["value"] / row["peer_value"])
            assert np.isfinite(row["load_1min"]) and row["first_partition_s"] > 0
