"""Evaluation on a store agrees with the metrics computed on in-memory arrays."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_digits

from imgscale.jobs.evaluate import evaluate
from imgscale.pipeline.classify import NearestClassMean, RidgeClassifier
from imgscale.pipeline.metrics import mean_interpolated_average_precision, per_class_rate
from imgscale.storage import create_store


@pytest.mark.parametrize("classes", [2, 10])
def test_store_evaluation_equals_in_memory_metrics(tmp_path, classes):
    digits = load_digits(n_class=classes)
    X, y = digits.data.astype(np.float32), digits.target
    store = create_store(tmp_path / "s.zarr", X.shape[1], rows_per_chunk=97)
    store.append("all", X, y, split=np.where(np.arange(len(y)) % 3 == 0, "test", "train"))
    test = np.arange(len(y)) % 3 == 0
    for model in (RidgeClassifier(rho=2.0), NearestClassMean()):
        model.fit(X[~test], y[~test])
        result = evaluate(model, store, "test")
        # MiAP ranks by the posterior where the model has one (NCM), else by the scores.
        if hasattr(model, "predict_log_proba"):
            scores = model.predict_log_proba(X[test])
        else:
            scores = model.decision_function(X[test])
        if scores.ndim == 1:
            scores = np.column_stack([-scores, scores])
        relevant = y[test, None] == model.classes_[None, :]
        assert result["rows"] == test.sum()
        assert result["per_class_rate"] == pytest.approx(
            per_class_rate(y[test], model.predict(X[test]))
        )
        assert result["miap"] == pytest.approx(
            mean_interpolated_average_precision(relevant, scores)
        )


def test_unlabelled_rows_of_the_split_are_left_out_chunk_by_chunk(tmp_path):
    """Every third test row unlabelled: the metrics are those of the labelled rows alone."""
    digits = load_digits()
    X, y = digits.data.astype(np.float32), digits.target
    test = np.arange(len(y)) % 2 == 0
    y_stored = np.where(test & (np.arange(len(y)) % 3 == 0), -1, y)
    store = create_store(tmp_path / "s.zarr", X.shape[1], rows_per_chunk=97)
    store.append("all", X, y_stored, split=np.where(test, "test", "train"))
    model = NearestClassMean().fit(X[~test], y[~test])
    result = evaluate(model, store, "test")
    scored = test & (y_stored >= 0)
    assert result["rows"] == scored.sum() < test.sum()
    assert result["per_class_rate"] == pytest.approx(
        per_class_rate(y[scored], model.predict(X[scored]))
    )
