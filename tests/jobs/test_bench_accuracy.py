"""The accuracy benchmark's dual ridge is RidgeClassifier's solution (centred on all rows)."""

import numpy as np
from sklearn.datasets import load_digits

from jobs.bench.accuracy import dual_ridge_rates, markdown, write_section
from pipeline.classify import RidgeClassifier
from pipeline.metrics import per_class_rate


def test_dual_ridge_equals_ridge_classifier_centred_on_all_rows():
    X, y = load_digits(return_X_y=True)
    X = X.astype(np.float32)
    train, test = np.arange(1200), np.arange(1200, len(y))
    labelled = np.concatenate([np.flatnonzero(y[train] == c)[:3] for c in range(10)])
    y_partial = np.full(len(train), -1)
    y_partial[labelled] = y[train][labelled]
    model = RidgeClassifier(rho=2.0).fit(X[train], y_partial)
    expected = per_class_rate(y[test], model.predict(X[test]))
    mean = X[train].astype(np.float64).mean(axis=0)
    rate, rho = dual_ridge_rates(
        mean, X[labelled], y[labelled], X[test], y[test], X[test], y[test], grid=(2.0,)
    )
    assert rho == 2.0
    assert rate == expected


def test_results_section_is_replaced_in_place(tmp_path):
    path = tmp_path / "results.md"
    path.write_text("# Results\n\nkeep me\n")
    record = {"dataset": "d", "embedding": "e", "dim": 3, "labelled_per_class": 3,
              "value": 0.5, "std": 0.1, "trials": 5}  # fmt: skip
    write_section(path, "accuracy", markdown([record], "cmd"))
    write_section(path, "accuracy", markdown([{**record, "value": 0.25}], "cmd"))
    text = path.read_text()
    assert "keep me" in text and text.count("accuracy:begin") == 1
    assert "25.0 ± 10.0" in text and "50.0" not in text
