"""The hierarchy, zero-shot means and scoring of `imgscale bench natural-ncm`, against references
written by hand."""

import numpy as np
import pytest

from imgscale.pipeline.classify.zero_shot import prior_means
from imgscale_reproductions.natural_ncm import (
    CIFAR_GROUPS,
    DIGIT_GROUPS,
    hierarchy,
    nearest_mean_top_k,
    placement,
    scores,
    superclass_rate,
)

GROUPS = {"vehicles": ("car", "truck", "ship"), "animals": ("cat", "dog")}


def test_the_groups_cover_each_class_once():
    for groups, count in ((CIFAR_GROUPS, 10), (DIGIT_GROUPS, 10)):
        members = [name for classes in groups.values() for name in classes]
        assert len(members) == len(set(members)) == count


def test_hierarchy_puts_each_class_under_its_group_and_the_groups_under_a_root_if_asked():
    children, parents = hierarchy(GROUPS, root=False)
    assert dict(zip(children, parents, strict=True)) == {
        "car": "vehicles", "truck": "vehicles", "ship": "vehicles",
        "cat": "animals", "dog": "animals",
    }  # fmt: skip
    children, parents = hierarchy(GROUPS, root=True)
    edges = dict(zip(children, parents, strict=True))
    assert edges["vehicles"] == edges["animals"] == "root" and edges["cat"] == "animals"


def test_a_superclass_prior_is_the_mean_of_its_siblings_and_the_paper_rule_adds_the_root():
    means = np.array([[0.0, 0.0], [2.0, 0.0], [10.0, 10.0], [20.0, 30.0]])
    trained = ["car", "ship", "cat", "dog"]  # truck is the new class
    sibling = prior_means(trained, means, *hierarchy(GROUPS, root=False), ["truck"])
    assert sibling[0].tolist() == [1.0, 0.0]
    # §4.4: the average of its ancestors' means; the root's is the mean of every trained class.
    paper = prior_means(trained, means, *hierarchy(GROUPS, root=True), ["truck"])
    root = means.mean(axis=0)
    assert paper[0] == pytest.approx((np.array([1.0, 0.0]) + root) / 2)


def test_nearest_mean_top_k_ranks_the_means_by_euclidean_distance():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((30, 4))
    means = rng.standard_normal((6, 4))
    expected = [np.argsort([np.sum((x - m) ** 2) for m in means])[:3] for x in X]
    assert nearest_mean_top_k(X, means, 3).tolist() == np.array(expected).tolist()


def test_scores_of_a_subset_count_only_its_rows():
    y = np.array([0, 0, 1, 1, 2, 2])
    top = np.array([[0, 1], [1, 0], [1, 2], [1, 0], [0, 1], [2, 0]])
    every = scores(y, top)
    assert every["top1_error"] == pytest.approx(2 / 6)
    assert every["per_class_rate"] == pytest.approx((0.5 + 1.0 + 0.5) / 3)
    subset = scores(y, top, np.array([False, False, False, False, True, True]))
    assert subset["top1_error"] == pytest.approx(0.5)
    assert subset["top5_error"] == pytest.approx(0.5)  # row 4's labels are 0 and 1


def test_superclass_rate_counts_predictions_inside_the_true_class_group():
    group_of = np.array([0, 0, 1, 1])
    y = np.array([0, 0, 2, 3])
    predicted = np.array([1, 2, 3, 0])
    assert superclass_rate(y, predicted, group_of) == pytest.approx(2 / 4)


def test_placement_says_where_a_class_rows_go_and_what_it_draws_from_the_others():
    group_of = np.array([0, 0, 1, 1])
    y = np.array([0, 0, 1, 2, 3, 3])
    top = np.array([[1, 0], [2, 0], [0, 1], [2, 3], [3, 0], [3, 2]])
    out = placement(y, top, [0], group_of)
    assert out["superclass_rate"] == pytest.approx(1 / 2)  # class 0's rows: 1 (group 0), 2 (not)
    assert out["others_top1_share"] == pytest.approx(1 / 4)  # the other rows: only row 2
    assert out["others_top5_share"] == pytest.approx(2 / 4)  # rows 2 and 4 list class 0
