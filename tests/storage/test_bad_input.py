"""Every kind of bad input raises StoreError naming store and rows, and changes nothing."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from imgscale.storage import FeatureStore, StoreError, open_store
from tests.storage.conftest import DIM, random_rows, snapshot


def _with_nan(store: FeatureStore) -> None:
    X = random_rows(8, 1)
    X[5, 2] = np.nan
    store.append("bad", X)


def _with_inf(store: FeatureStore) -> None:
    X = random_rows(8, 1)
    X[0, 0] = -np.inf
    store.append("bad", X)


def _float64_beyond_float32(store: FeatureStore) -> None:
    store.append("bad", np.full((2, DIM), 1e300))


BAD_INPUTS: dict[str, tuple[Callable[[FeatureStore], None], str]] = {
    "nan": (_with_nan, "1 rows contain NaN/inf (first at row 30)"),
    "inf": (_with_inf, "first at row 25"),
    "float64_overflow": (_float64_beyond_float32, "finite float32"),
    "wrong_dim": (lambda s: s.append("bad", random_rows(3, 1, dim=DIM + 1)), "expected (n, 6)"),
    "one_dimensional": (lambda s: s.append("bad", np.ones(DIM)), "expected (n, 6)"),
    "strings": (lambda s: s.append("bad", np.full((2, DIM), "1.5")), "real numeric dtype"),
    "objects": (lambda s: s.append("bad", np.ones((2, DIM), dtype=object)), "real numeric"),
    "complex": (lambda s: s.append("bad", np.ones((2, DIM), np.complex64)), "real numeric"),
    "bool": (lambda s: s.append("bad", np.ones((2, DIM), bool)), "real numeric"),
    "label_below_minus_one": (
        lambda s: s.append("bad", random_rows(3, 1), labels=[0, -2, 1]),
        "first -2 at row 26",
    ),
    "label_past_class_names": (
        lambda s: s.append("bad", random_rows(3, 1), labels=[0, 1, 2]),
        "expected -1 (unlabelled) to 1",
    ),
    "labels_of_other_length": (
        lambda s: s.append("bad", random_rows(3, 1), labels=[0, 1]),
        "expected (3,)",
    ),
    "float_labels": (
        lambda s: s.append("bad", random_rows(2, 1), labels=[0.0, 1.0]),
        "expected integers",
    ),
    "duplicate_ids_in_batch": (
        lambda s: s.append("bad", random_rows(3, 1), ids=["a", "b", "a"]),
        "duplicate id 'a' at row 27",
    ),
    "id_already_committed": (
        lambda s: s.append("bad", random_rows(2, 1), ids=["new", "b0:4"]),
        "duplicate id 'b0:4' at row 26",
    ),
    "ids_of_other_length": (
        lambda s: s.append("bad", random_rows(2, 1), ids=["x"]),
        "expected (2,)",
    ),
    "split_of_other_length": (
        lambda s: s.append("bad", random_rows(2, 1), split=["train"]),
        "expected (2,)",
    ),
}


@pytest.mark.parametrize("case", BAD_INPUTS, ids=list(BAD_INPUTS))
def test_bad_input_is_refused_and_leaves_the_store_unchanged(
    store: FeatureStore, case: str
) -> None:
    make_bad, expected = BAD_INPUTS[case]
    before = snapshot(store)
    with pytest.raises(StoreError) as err:
        make_bad(store)
    message = str(err.value)
    assert f"store {store.path}" in message and "batch 'bad', rows 25–" in message
    assert expected in message
    assert snapshot(store) == before


def test_a_duplicate_id_across_blocks_of_one_batch_is_refused(store: FeatureStore) -> None:
    before = snapshot(store)
    with pytest.raises(StoreError, match="duplicate id 'x' at row 28"), store.writer("b") as w:
        w.write(random_rows(2, 1), ids=["x", "y"])
        w.write(random_rows(2, 2), ids=["z", "x"])
    assert snapshot(store) == before


def test_ids_committed_through_another_handle_are_seen(store: FeatureStore) -> None:
    """The writer's cached id set picks up batches another handle committed since it was read."""
    store.append("first", random_rows(2, 1), ids=["p", "q"])
    open_store(store.path).append("other", random_rows(2, 2), ids=["r", "s"])
    before = snapshot(store)
    with pytest.raises(StoreError, match="duplicate id 's' at row 30"):
        store.append("bad", random_rows(2, 3), ids=["t", "s"])
    assert snapshot(store) == before
    store.append("failed-ids-not-kept", random_rows(1, 4), ids=["t"])
    assert store.ids()[-5:].tolist() == ["p", "q", "r", "s", "t"]


def test_integer_features_are_accepted_as_float32(store: FeatureStore) -> None:
    X = np.arange(2 * DIM, dtype=np.uint8).reshape(2, DIM)
    store.append("ints", X)
    np.testing.assert_array_equal(store.features().compute()[25:], X.astype(np.float32))
