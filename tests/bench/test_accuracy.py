"""The accuracy benchmark: its dual ridge is RidgeClassifier's solution (centred on all rows),
and its 20 Newsgroups reader."""

import io
import tarfile

import numpy as np
from sklearn.datasets import load_digits

from imgscale.pipeline.classify import RidgeClassifier
from imgscale.pipeline.metrics import per_class_rate
from imgscale_reproductions.accuracy import (
    dual_ridge_rates,
    newsgroups_histograms,
)


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


def test_newsgroups_histograms_drop_headers_and_normalise(tmp_path):
    messages = {
        "20news-bydate-train/sci.space/1": "From: orbit\nSubject: x\n\nrocket rocket moon",
        "20news-bydate-train/rec.autos/2": "From: orbit\n\nengine wheel engine engine",
        "20news-bydate-test/sci.space/3": "Subject: orbit\n\nmoon engine unseen",
        "20news-bydate-test/rec.autos/4": "From: a\n\n",
    }
    archive = tmp_path / "20news.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, text in messages.items():
            data = text.encode("latin-1")
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    X_train, y_train, X_test, y_test = newsgroups_histograms(archive, vocabulary=10)
    # Vocabulary (sorted): engine, moon, rocket, wheel; "orbit" is only in headers.
    np.testing.assert_allclose(X_train, [[0, 1 / 3, 2 / 3, 0], [3 / 4, 0, 0, 1 / 4]])
    np.testing.assert_allclose(X_test, [[1 / 2, 1 / 2, 0, 0], [0, 0, 0, 0]])
    assert y_train.tolist() == [1, 0] and y_test.tolist() == [1, 0]  # rec.autos < sci.space
