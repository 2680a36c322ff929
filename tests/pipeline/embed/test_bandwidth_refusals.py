"""An RBF bandwidth that is 0 or not finite is refused by name instead of fitting gamma_ = 0 (every
row then embeds alike and a classifier on top scores at chance)."""

import numpy as np
import pytest

from imgscale.pipeline.embed import Nystrom, RandomFourierFeatures


def _rows_with_one_huge_value() -> np.ndarray:
    X = np.random.default_rng(0).normal(size=(60, 8)).astype(np.float32)
    X[::3, 0] = 3e38  # finite float32 values whose squared distances overflow
    return X


@pytest.mark.parametrize("embedding", [RandomFourierFeatures(n_components=16), Nystrom()])
def test_a_non_finite_bandwidth_is_refused_by_name(embedding) -> None:
    with pytest.raises(ValueError, match=r"^RBF bandwidth σ \(mean distance to the \d+th"):
        embedding.set_params(n_neighbors=5, random_state=0).fit(_rows_with_one_huge_value())


@pytest.mark.parametrize("gamma", [np.inf, np.nan, 0.0, -1.0])
@pytest.mark.parametrize("cls", [RandomFourierFeatures, Nystrom])
def test_a_zero_or_non_finite_gamma_is_refused_by_name(cls, gamma) -> None:
    X = np.random.default_rng(1).normal(size=(40, 4)).astype(np.float32)
    with pytest.raises(ValueError, match=r"^gamma must be positive and finite or None, got"):
        cls(n_components=8, gamma=gamma).fit(X)
