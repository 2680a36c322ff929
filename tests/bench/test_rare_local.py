"""The rare-attribute tasks of `imgscale bench rare-local`: which images the subset keeps and how
a task splits them."""

import numpy as np
import pyarrow as pa

from imgscale_reproductions.rare_local import (
    POSITIVE_SHARE,
    attribute_tasks,
    class_subset,
    rare_task,
)


def test_class_subset_keeps_the_first_rows_of_each_label_in_order():
    labels = ["b", "a", "b", "c", "a", "b", "a", "c"]
    table = pa.table({"id": [f"i{n}" for n in range(8)], "label": labels})
    kept = class_subset(table, 2)
    assert kept.column("id").to_pylist() == ["i0", "i1", "i2", "i3", "i4", "i7"]


def test_rare_task_keeps_every_negative_subsamples_positives_and_balances_the_queries():
    y_train = np.repeat(np.arange(10), 300)
    y_test = np.repeat(np.arange(10), 100)
    train, test = rare_task(y_train, y_test, positive=3)
    positives = int(np.sum(y_train[train] == 3))
    assert np.sum(y_train[train] != 3) == 2_700  # every negative
    assert abs(positives / len(train) - POSITIVE_SHARE) < 0.001  # 172 of 2,872
    assert len(np.unique(train)) == len(train) and len(np.unique(test)) == len(test)
    assert np.sum(y_test[test] == 3) == 100 and np.sum(y_test[test] != 3) == 100
    # Another seed draws other positives, the same negatives.
    other, _ = rare_task(y_train, y_test, positive=3, seed=1)
    assert set(train[y_train[train] != 3]) == set(other[y_train[other] != 3])
    assert set(train[y_train[train] == 3]) != set(other[y_train[other] == 3])


def test_an_attribute_task_draws_its_rare_positives_from_each_of_its_classes():
    y_train = np.repeat(np.arange(10), 300)
    y_test = np.repeat(np.arange(10), 100)
    train, test = rare_task(y_train, y_test, positive=(1, 9))
    is_positive = np.isin(y_train[train], (1, 9))
    assert np.sum(~is_positive) == 2_400  # every row of the eight other classes
    assert abs(is_positive.mean() - POSITIVE_SHARE) < 0.001  # 153 of 2,553
    assert 0 < np.sum(y_train[train] == 1) < 153 and 0 < np.sum(y_train[train] == 9) < 153
    assert np.sum(np.isin(y_test[test], (1, 9))) == 200 and len(test) == 400


def test_attribute_tasks_name_their_classes_and_skip_attributes_whose_classes_are_missing():
    cifar = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
             "truck"]  # fmt: skip
    tasks = attribute_tasks(np.array(cifar), 2)
    assert tasks[""] == {"airplane": (0,), "automobile": (1,)}
    assert tasks["attributes "] == {"has wheels": (1, 9), "flies": (0, 2)}
    digits = attribute_tasks(np.array([f"digit{d}" for d in range(10)]), 1)
    assert digits == {"": {"digit0": (0,)}, "attributes ": {}}
