"""pipeline.metrics against scikit-learn and hand-computed cases."""

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, recall_score, top_k_accuracy_score

from imgscale.pipeline.metrics import (
    class_hit_counts,
    evaluate_top_k,
    interpolated_average_precision,
    mean_interpolated_average_precision,
    per_class_rate,
    precision_at_k,
    top_k_error,
)
from tests.pipeline.conftest import as_dask


@pytest.fixture
def scored():
    """Labels of 300 rows over 6 classes, noisy scores, and the top-5 labels they give."""
    rng = np.random.default_rng(3)
    y = rng.integers(0, 6, 300)
    scores = rng.normal(size=(300, 6)) + 1.5 * np.eye(6)[y]
    top = np.argsort(-scores, axis=1, kind="stable")[:, :5]
    return y, scores, top


def test_per_class_rate_equals_macro_recall_over_true_classes(scored):
    y, _, top = scored
    expected = recall_score(y, top[:, 0], labels=np.unique(y), average="macro")
    assert per_class_rate(y, top[:, 0]) == pytest.approx(expected)


def test_per_class_rate_ignores_classes_only_predicted():
    assert per_class_rate([0, 0, 1, 1], [0, 2, 1, 1]) == pytest.approx(0.75)


@pytest.mark.parametrize("k", [1, 3, 5])
def test_top_k_error_equals_one_minus_sklearn_top_k_accuracy(scored, k):
    y, scores, top = scored
    assert top_k_error(y, top, k) == pytest.approx(1 - top_k_accuracy_score(y, scores, k=k))


def test_precision_at_k_counts_relevant_among_best_scored():
    relevant = np.array([1, 0, 1, 1, 0], dtype=bool)
    scores = np.array([0.9, 0.8, 0.1, 0.7, 0.6])
    assert precision_at_k(relevant, scores, k=3) == pytest.approx(2 / 3)


def test_interpolated_ap_takes_best_precision_at_higher_recall():
    # ranks 2 and 3 relevant: precisions 1/2, 2/3 → interpolated 2/3, 2/3 (sklearn AP: 7/12)
    relevant = np.array([0, 1, 1, 0], dtype=bool)
    scores = np.array([4.0, 3.0, 2.0, 1.0])
    assert interpolated_average_precision(relevant, scores) == pytest.approx(2 / 3)
    assert average_precision_score(relevant, scores) == pytest.approx(7 / 12)


def test_interpolated_ap_is_at_least_sklearn_ap(scored):
    y, scores, _ = scored
    for c in range(6):
        interpolated = interpolated_average_precision(y == c, scores[:, c])
        assert interpolated >= average_precision_score(y == c, scores[:, c]) - 1e-12


def test_tied_scores_rank_in_input_order():
    relevant = np.array([0, 1], dtype=bool)
    assert interpolated_average_precision(relevant, np.zeros(2)) == pytest.approx(0.5)
    assert precision_at_k(relevant, np.zeros(2), k=1) == 0.0


def test_miap_averages_columns_that_have_relevant_items():
    relevant = np.array([[1, 0, 0], [0, 1, 0], [0, 1, 0]], dtype=bool)
    scores = np.array([[3.0, 3.0, 1.0], [2.0, 2.0, 2.0], [1.0, 1.0, 3.0]])
    # column 0: AP 1; column 1: relevant at ranks 2, 3 → 2/3; column 2: no relevant item
    assert mean_interpolated_average_precision(relevant, scores) == pytest.approx((1 + 2 / 3) / 2)


def test_class_hit_counts_by_hand():
    y = np.array([0, 0, 1, 2, -1])
    top = np.array([[0, 1], [1, 0], [2, 0], [0, 1], [0, 1]])
    top1, topk, totals = class_hit_counts(y, top, np.array([0, 1, 2]))
    assert (top1.tolist(), topk.tolist(), totals.tolist()) == ([1, 0, 0], [2, 0, 0], [2, 1, 1])


def test_evaluate_top_k_on_dask_labels_equals_the_numpy_metrics(scored):
    y, _, top = scored
    y = np.where(np.arange(len(y)) % 10 == 0, -1, y)  # unlabelled rows are skipped
    labelled = y >= 0
    result = evaluate_top_k(y, as_dask(top, rows=40))
    assert result == pytest.approx(
        {
            "per_class_rate": per_class_rate(y[labelled], top[labelled, 0]),
            "top1_error": top_k_error(y[labelled], top[labelled], 1),
            "top5_error": top_k_error(y[labelled], top[labelled], 5),
            "rows": int(labelled.sum()),
        }
    )
