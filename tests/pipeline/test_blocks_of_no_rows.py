"""Every embedding and classifier on a store's split, whose chunks include some of no rows.

A split's rows keep the store's chunks (`FeatureStore.features`): a chunk holding only other
splits' rows is a block of no rows, and `reduce_rows`, `transform` and `predict` hand it to
the block functions as it is (HIKE's reshape failed on one). Each estimator is fitted on the
train split of a real zarr store and must give what it gives on the same rows without the
empty blocks; its transform or scores on the validation split must be the numpy ones.
"""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest
from sklearn.base import clone

from imgscale.pipeline.classify import (
    EigenvalueRidgeClassifier,
    ExemplarHOPE,
    MetricKNeighborsClassifier,
    MetricNearestClassMean,
    NearestClassMean,
    PredictedNeighbourhoodClassifier,
    RidgeClassifier,
    SemiSupervisedEigenSolver,
)
from imgscale.pipeline.embed import (
    ALE,
    PCA,
    AddKPCA,
    GaussianRandomProjection,
    HistogramIntersection,
    Nystrom,
    PCALap,
    RandomFourierFeatures,
    RPLap,
    SquareRoot,
)
from imgscale.storage import create_store

ROWS_PER_CHUNK = 20
# Chunk by chunk: train, train, val, train, val, val, train: each split has empty blocks.
CHUNK_SPLITS = ("train", "train", "val", "train", "val", "val", "train")

EMBEDDINGS = [
    RandomFourierFeatures(16, random_state=0),
    SquareRoot(),
    HistogramIntersection(n_levels=4),
    GaussianRandomProjection(8, random_state=0),
    Nystrom(n_components=8, n_landmarks=30, random_state=0),
    Nystrom(n_components=8, n_landmarks=30, kernel="intersection", random_state=0),
    AddKPCA(n_landmarks=16, random_state=0),
    PCA(n_components=4),
    PCA(n_components=4, whiten=True),
    PCALap(n_directions=4, n_components=8, n_bins=10),
    RPLap(n_directions=8, n_components=8, n_bins=10, random_state=0),
    ALE(n_directions=4, n_components=8, n_bins=10),
]
CLASSIFIERS = [
    RidgeClassifier(rho=1.0, solver="primal"),
    RidgeClassifier(rho=1.0, solver="dual"),
    NearestClassMean(),
    MetricNearestClassMean(n_components=3, max_iter=20, random_state=0),
    MetricKNeighborsClassifier(n_neighbors=3, n_components=3, max_iter=20, random_state=0),
    ExemplarHOPE(n_components=3, max_iter=20, random_state=0),
    SemiSupervisedEigenSolver(lam=1.0),
    EigenvalueRidgeClassifier(rho=1.0),
    PredictedNeighbourhoodClassifier(n_neighbourhoods=20, random_state=0),
]


@pytest.fixture(scope="module")
def split_store(tmp_path_factory):
    """(store, {split: (rows, labels)}): non-negative rows (histogram-like, for the additive
    kernels) of 3 classes, each chunk of the store holding one split's rows."""
    rng = np.random.default_rng(0)
    n = ROWS_PER_CHUNK * len(CHUNK_SPLITS)
    labels = rng.integers(0, 3, n)
    X = (rng.gamma(2.0, 1.0, size=(n, 6)) + labels[:, None] * [1, 0, 0.5, 0, 0, 2]).astype(
        np.float32
    )
    splits = np.repeat(CHUNK_SPLITS, ROWS_PER_CHUNK)
    store = create_store(tmp_path_factory.mktemp("split") / "s.zarr", 6,
                         rows_per_chunk=ROWS_PER_CHUNK)  # fmt: skip
    store.append("b", X, labels, [f"r{i}" for i in range(n)], split=splits)
    return store, {s: (X[splits == s], labels[splits == s]) for s in ("train", "val")}


def _without_empty_blocks(X: np.ndarray, blocks: da.Array) -> da.Array:
    """``X`` chunked as ``blocks`` is, its blocks of no rows left out."""
    return da.from_array(X, chunks=(tuple(c for c in blocks.chunks[0] if c), X.shape[1]))


def test_each_split_of_the_store_has_blocks_of_no_rows(split_store):
    store, _ = split_store
    for split in ("train", "val"):
        assert 0 in store.features(split).chunks[0]


@pytest.mark.parametrize("estimator", EMBEDDINGS, ids=repr)
def test_an_embedding_fits_and_maps_a_split_with_blocks_of_no_rows(estimator, split_store):
    store, rows = split_store
    (X, _), (X_val, _) = rows["train"], rows["val"]
    train = store.features("train")
    expected = clone(estimator).fit(_without_empty_blocks(X, train))
    model = clone(estimator).fit(train)
    np.testing.assert_allclose(model.transform(X_val), expected.transform(X_val),
                               rtol=1e-4, atol=1e-5)  # fmt: skip
    val = store.features("val")
    mapped = model.transform(val)
    assert mapped.chunks[0] == val.chunks[0]
    np.testing.assert_allclose(mapped.compute(), model.transform(X_val), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("estimator", CLASSIFIERS, ids=repr)
def test_a_classifier_fits_and_scores_a_split_with_blocks_of_no_rows(estimator, split_store):
    store, rows = split_store
    (X, y), (X_val, _) = rows["train"], rows["val"]
    train = store.features("train")
    expected = clone(estimator).fit(_without_empty_blocks(X, train), y)
    model = clone(estimator).fit(train, store.labels("train"))
    np.testing.assert_array_equal(model.predict(X_val), expected.predict(X_val))
    np.testing.assert_allclose(model.decision_function(X_val), expected.decision_function(X_val),
                               rtol=1e-4, atol=1e-5)  # fmt: skip
    val = store.features("val")
    predicted, scores = dask.compute(model.predict(val), model.decision_function(val))
    np.testing.assert_array_equal(predicted, model.predict(X_val))
    np.testing.assert_allclose(scores, model.decision_function(X_val), rtol=1e-4, atol=1e-5)
