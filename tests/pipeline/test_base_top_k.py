"""The top-k scan shared by every classifier's predict_top_k, against numpy's stable sort."""

import numpy as np
import pytest

from imgscale.pipeline.top_k import top_k_columns


def stable_top_k(scores: np.ndarray, k: int) -> np.ndarray:
    return np.argsort(-scores, axis=1, kind="stable")[:, :k]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_top_k_equals_stable_argsort(dtype):
    scores = np.random.default_rng(4).normal(size=(50, 1000)).astype(dtype)
    np.testing.assert_array_equal(top_k_columns(scores, 7), stable_top_k(scores, 7))


def test_ties_go_to_the_lower_column():
    # Few distinct values: most of the k best are ties.
    scores = np.random.default_rng(5).integers(0, 4, size=(200, 30)).astype(np.float32)
    np.testing.assert_array_equal(top_k_columns(scores, 5), stable_top_k(scores, 5))


def test_offsets_are_subtracted_before_ranking():
    rng = np.random.default_rng(6)
    scores = rng.normal(size=(40, 300)).astype(np.float32)
    offsets = rng.normal(size=300).astype(np.float32)
    expected = stable_top_k(scores - offsets, 5)
    np.testing.assert_array_equal(top_k_columns(scores, 5, offsets), expected)


def test_k_is_capped_at_the_number_of_columns_and_nan_ranks_last():
    scores = np.array([[0.5, np.nan, 2.0], [np.nan, -1.0, -3.0]], dtype=np.float32)
    np.testing.assert_array_equal(top_k_columns(scores, 5), stable_top_k(scores, 3))
