"""`imgscale bench cifar10-cnn` and `cnn-speed`: the splits of the protocol, and a tiny run
scoring every classifier on the CNN's and GIST's rows and timing ingest beside ONNX Runtime."""

import numpy as np
import pyarrow as pa
import pytest

from imgscale_reproductions.cifar10_cnn import TINY_METHODS, embedding_records, splits_of
from tests.bench.conftest import benchmark_rows
from tests.bench.tiny_run import RUN_SECONDS


def test_splits_hold_out_the_last_rows_of_each_class_and_train_on_the_first_of_the_others():
    labels = ["a", "b", "a", "a", "b", "a", "b", "b", "a"]
    train = pa.table({"id": [f"t{i}" for i in range(9)], "label": labels})
    test = pa.table({"id": [f"s{i}" for i in range(7)], "label": ["a"] * 7})
    splits = splits_of(train, test, train_per_class=2, val_per_class=1, test_step=3)
    assert splits["train"].column("id").to_pylist() == ["t0", "t1", "t2", "t4"]
    assert splits["val"].column("id").to_pylist() == ["t7", "t8"]
    assert splits["test"].column("id").to_pylist() == ["s0", "s3", "s6"]
    # More than a class holds: every row but the held-out ones, never a validation row.
    every = splits_of(train, test, train_per_class=10, val_per_class=1, test_step=1)
    assert every["train"].column("id").to_pylist() == [f"t{i}" for i in range(7)]
    assert every["val"].column("id").to_pylist() == ["t7", "t8"]


def test_paper_000s_record_sets_nystrom_against_rff_of_the_same_descriptor_and_labels():
    rates = {("CNN", "Nystrom-500 ridge"): 0.6, ("CNN", "RFF-4000 ridge"): 0.75,
             ("CNN", "linear ridge"): 0.7, ("GIST-320", "Nystrom-500 ridge"): 0.3}  # fmt: skip
    (row,) = embedding_records(rates, 10, 4000, 500)  # GIST-320 has no RFF figure: no record
    assert row["name"] == (
        "CNN data-dependent Nystrom-500 ridge over data-independent RFF-4000 ridge, "
        "10 labelled/class"
    )
    assert row["value"] == 0.6 and row["peer_value"] == 0.75 and row["ratio"] == 0.6 / 0.75
    assert row["labelled_per_class"] == 10 and row["features"] == "CNN"


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
    # Paper 002's protocol on the CNN's rows: NCM with l2 is scikit-learn's NearestCentroid on
    # the same rows, and the held-back digits are added to the learned metric and zero-shot.
    ncm = rows["CNN NCM, l2: per-class rate"]
    assert ncm["features"] == "CNN" and ncm["value"] == pytest.approx(ncm["peer_value"], abs=0.01)
    added = [name for name in rows if name.startswith("CNN NCM, learned metric")
             and "added by add-class: add-class of 2 classes" in name]  # fmt: skip
    assert len(added) == 1 and rows[added[0]]["value"] > 0
    zero_shot = rows[
        "CNN zero-shot ancestors (paper rule) means, learned metric: the held classes' rate"
    ]
    assert 0 <= zero_shot["value"] <= 1 and zero_shot["held_back"] == "digit6, digit7"
    speed = benchmark_rows(tiny_run, "cnn-speed")
    for workers in (1, 2):
        cold, warm = [r for r in speed.values() if r["workers"] == workers]
        for row in (cold, warm):
            assert row["value"] > 0 and row["peer_value"] > 0
            # Ingest and ONNX Runtime in turn, round after round: the median of the rounds' ratios.
            assert row["repeats"] >= 2 and row["value_min"] <= row["value"] <= row["value_max"]
            assert row["ratio_min"] <= row["ratio"] <= row["ratio_max"]
            assert np.isfinite(row["load_1min"]) and row["first_partition_s"] > 0
