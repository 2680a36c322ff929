"""Models saved by an earlier imgscale load and answer as they did when saved: moving an
estimator's code (en-HOPE out of ``pipeline/embed``) or changing how it declares its state must
not strand the models users already have."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_digits

from imgscale.jobs import models

# Saved by imgscale at 7b97115 (schema version 3), with their answers on digits rows 1000..1049.
MODEL_V3 = Path(__file__).parent / "data" / "model-v3"


@pytest.fixture(scope="module")
def rows() -> np.ndarray:
    return load_digits().data.astype(np.float32)[1000:1050]


@pytest.fixture(scope="module")
def expected() -> dict[str, np.ndarray]:
    return dict(np.load(MODEL_V3 / "expected.npz"))


def assert_equal_to_rounding(got: np.ndarray, saved: np.ndarray) -> None:
    """Equal to float32 rounding: a BLAS of another release may order a float32 product's sums
    differently and change its last bits, never more."""
    rounding = 32 * np.finfo(np.float32).eps * np.abs(saved).max()
    np.testing.assert_allclose(got, saved, rtol=0, atol=rounding)


def assert_same_scores(got: np.ndarray, saved: np.ndarray) -> None:
    """The same predicted classes, and scores equal to float32 rounding."""
    np.testing.assert_array_equal(got.argmax(axis=1), saved.argmax(axis=1))
    assert_equal_to_rounding(got, saved)


def test_an_en_hope_model_loads_and_embeds_and_scores_as_saved(rows, expected):
    model, provenance = models.load(MODEL_V3 / "hope.model")
    assert provenance["rows"] == 600
    assert_equal_to_rounding(model.transform(rows), expected["hope_transform"])
    assert_same_scores(model.decision_function(rows), expected["hope_decision"])


def test_a_knn_model_loads_and_scores_as_saved(rows, expected):
    model, _ = models.load(MODEL_V3 / "knn.model")
    assert_same_scores(model.decision_function(rows), expected["knn_decision"])


def test_a_pipeline_model_loads_and_scores_as_saved(rows, expected):
    model, _ = models.load(MODEL_V3 / "rff-ncm.model")
    assert_same_scores(model.decision_function(rows), expected["rff_ncm_decision"])
