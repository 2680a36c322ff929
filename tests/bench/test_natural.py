"""The task construction and diagnostics of `imgscale bench natural-local` and the claim figures
of `natural-embeddings`, against references written by hand."""

import numpy as np
import pytest

from imgscale_reproductions.natural_embeddings import findings, split
from imgscale_reproductions.natural_local import attribute_labels, draw_task, neighbour_purity


def test_attribute_labels_mark_the_rows_of_the_named_classes():
    names = np.array(["airplane", "automobile", "bird", "truck"])
    y = np.array([0, 1, 2, 3, 1, 0])
    assert attribute_labels(y, names, ("automobile", "truck")).tolist() == [0, 1, 0, 1, 1, 0]


def test_draw_task_balances_the_queries_and_keeps_the_attributes_share_in_training():
    rng = np.random.default_rng(0)
    y_train = (rng.random(5_000) < 0.1).astype(np.int64)
    y_test = (rng.random(1_000) < 0.1).astype(np.int64)
    train, test = draw_task(y_train, y_test, 2_000, 60, seed=3)
    assert np.bincount(y_test[test]).tolist() == [30, 30]
    assert len(np.unique(test)) == 60
    assert len(np.unique(train)) == pytest.approx(2_000, abs=1)
    share = y_train[train].mean()
    assert share == pytest.approx(y_train.mean(), abs=1e-3)


def test_neighbour_purity_is_the_label_balanced_share_of_same_label_neighbours():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((200, 5)).astype(np.float32)
    y = (rng.random(200) < 0.3).astype(np.int64)
    X_test = rng.standard_normal((40, 5)).astype(np.float32)
    y_test = np.repeat([0, 1], 20)
    shares = {0: [], 1: []}
    for row, label in zip(X_test, y_test, strict=True):
        nearest = np.argsort(((X - row) ** 2).sum(axis=1))[:7]
        shares[label].append((y[nearest] == label).mean())
    expected = (np.mean(shares[0]) + np.mean(shares[1])) / 2
    assert neighbour_purity(X, y, X_test, y_test, k=7) == pytest.approx(expected)


def test_split_holds_the_last_rows_out_for_validation():
    data = {"X_train": np.arange(20)[:, None], "y_train": np.arange(20),
            "X_test": np.zeros((3, 1)), "y_test": np.zeros(3)}  # fmt: skip
    parts = split(data, 100, 5)
    assert parts["y_train"].tolist() == list(range(15))
    assert parts["y_val"].tolist() == list(range(15, 20))


def test_findings_compare_the_best_of_each_family():
    def r(regime, family, count, value):
        return {"dataset": f"CIFAR-10 GIST, {regime} labels", "family": family,
                "labelled_per_class": count, "value": value}  # fmt: skip

    records = [r("few", "linear", 1, 0.20), r("few", "RFF", 1, 0.22), r("few", "PCALap", 1, 0.25),
               r("few", "AddKPCA", 1, 0.21), r("many", "linear", 100, 0.40),
               r("many", "RFF", 100, 0.45), r("many", "Nystrom", 100, 0.47)]  # fmt: skip
    few, many = findings(records)
    assert (few["value"], few["peer_value"]) == (0.25, 0.22)
    assert (many["value"], many["peer_value"]) == (0.47, 0.40)


def test_knn_error_is_the_error_of_a_majority_vote_of_the_nearest_rows():
    from imgscale_reproductions.natural_hope import knn_error

    X = np.array([[0.0], [0.1], [0.2], [1.0], [1.1], [5.0]])
    y = np.array([0, 0, 1, 1, 1, 0])
    X_test = np.array([[0.05], [1.05], [4.9]])
    # 3 nearest: {0, 0, 1} → 0; {1, 1, 1} → 1; {5.0: 0, 1.1: 1, 1.0: 1} → 1.
    assert knn_error(X, y, X_test, np.array([0, 1, 0]), 3) == pytest.approx(1 / 3)
