"""The rare-attribute tasks of `imgscale bench rare-local`: which images the subset keeps and how
a task splits them."""

import numpy as np
import pyarrow as pa

from imgscale.bench.rare_local import POSITIVE_SHARE, class_subset, rare_task


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
