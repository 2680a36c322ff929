"""Train a classifier on a feature store's split, validating ρ on the store's validation split."""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator

from imgscale.jobs.models import classifier_pipeline
from imgscale.pipeline import embed
from imgscale.pipeline.classify import (
    MetricKNeighborsClassifier,
    MetricNearestClassMean,
    NearestClassMean,
    RidgeClassifier,
    SemiSupervisedEigenSolver,
)
from imgscale.storage import FeatureStore

METHODS = ("ridge", "ncm", "ncm-metric", "knn", "ssl")
# Classes from which ncm-metric validates W by the top-5 error rather than the top-1 error.
VALIDATE_TOP5_CLASSES = 100

# --embedding name → (class, fixed parameters); --n-components / --gamma apply where the class
# has that parameter. Defaults follow paper 000 §4.1.
EMBEDDINGS: dict[str, tuple[type, dict]] = {
    "rff": (embed.RandomFourierFeatures, {}),
    "sqrt": (embed.SquareRoot, {}),
    "hike": (embed.HistogramIntersection, {}),
    "nystrom": (embed.Nystrom, {"kernel": "gaussian"}),
    "nystrom-intersection": (embed.Nystrom, {"kernel": "intersection"}),
    "addkpca": (embed.AddKPCA, {}),
    "pca": (embed.PCA, {}),
    "random-projection": (embed.GaussianRandomProjection, {}),
    "pcalap": (embed.PCALap, {}),
    "rplap": (embed.RPLap, {}),
    "ale": (embed.ALE, {}),
}


def make_embedding(
    name: str, *, n_components: int | None = None, gamma: float | None = None, random_state=0
) -> BaseEstimator:
    """An unfitted embedding by its CLI name, with the options that apply to it."""
    if name not in EMBEDDINGS:
        raise ValueError(f"unknown embedding {name!r}; expected one of {', '.join(EMBEDDINGS)}")
    cls, params = EMBEDDINGS[name]
    accepted = cls().get_params()
    options = {"n_components": n_components, "gamma": gamma, "random_state": random_state}
    for key, value in options.items():
        if value is None:
            continue
        if key in accepted:
            params = {**params, key: value}
        elif key != "random_state":
            raise ValueError(f"--{key.replace('_', '-')} does not apply to embedding {name!r}")
    return cls(**params)


def train(
    store: FeatureStore,
    method: str,
    *,
    split: str = "train",
    val_split: str | None = "val",
    rho: float | None = None,
    embedding: BaseEstimator | None = None,
    eigenvalues=None,
    metric_dim: int = 64,
    max_iter: int | None = None,
    gram_precision: str = "float64",
) -> BaseEstimator:
    """Fit ``method`` on the rows of ``split`` (its unlabelled rows count for centering only).

    For ridge without a fixed ``rho``, the grid value is chosen on ``val_split`` when the store
    has such rows, else by generalized cross-validation (paper 000 §4.1 validates on a split).

    With an (unfitted) ``embedding``, it is first fitted on every row of ``split``, labelled or
    not (data-dependent embeddings use the unlabelled rows, paper 000 §4.1); the classifier then
    sees the embedded train rows and embedded validation rows, both computed lazily chunk by
    chunk, and the result is a ``ClassifierPipeline`` (embedding, classifier).

    ``ssl`` (paper 001 eq. 3) needs an embedding with eigenvalues (PCALap, RPLap, ALE); its λ is
    chosen on ``val_split`` like ρ, and a fixed ``rho`` means λ = 1/ρ.

    ``ncm-metric`` and ``knn`` learn a ``metric_dim``-dimensional metric by SGD (paper 002 §3),
    ``max_iter`` iterations at most (default: the estimator's); the labelled ``val_split`` rows,
    if any, choose the best W (and k for knn), else a fifth of the train rows at most is held out.
    On a PQ store ncm-metric takes its class means from the codes and decodes only the rows SGD
    samples.

    ``gram_precision`` is ridge's `RidgeClassifier.gram_precision` (``"float32"``: float32 Gram
    products, about twice as fast; see `pipeline.gram`).
    """
    X, y = store.features(split), store.labels(split)
    if len(y) == 0:
        raise ValueError(f"store {store.path}: no rows in split {split!r}")
    if embedding is not None:
        embedding.fit(X)
        embedded = _EmbeddedStore(store, embedding.transform)
        # ssl regularises by the embedding's eigenvalues (PCALap, RPLap, ALE: paper 001 eq. 3).
        eigenvalues = getattr(embedding, "eigenvalues_", None)
        classifier = train(
            embedded, method, split=split, val_split=val_split, rho=rho, eigenvalues=eigenvalues,
            metric_dim=metric_dim, max_iter=max_iter, gram_precision=gram_precision,
        )  # fmt: skip
        return classifier_pipeline(embedding, classifier)
    if method in ("ncm-metric", "knn"):
        return _train_metric(store, method, split, val_split, metric_dim, max_iter)
    if method == "ncm":
        if getattr(store, "encoding", "raw") == "pq":
            # Class means from the codes' centroids: no row is decoded (pipeline/pq.py).
            codec = store.codec
            return NearestClassMean().fit_codes(
                store.codes(split), y, codec.codebook, codec.rotation
            )
        return NearestClassMean().fit(X, y)
    if method == "ssl":
        if eigenvalues is None:
            raise ValueError("method 'ssl' needs --embedding pcalap, rplap or ale (eigenvalues)")
        model = SemiSupervisedEigenSolver(lam=None if rho is None else 1.0 / rho)
        y_val = store.labels(val_split) if val_split is not None else None
        if y_val is not None and (y_val >= 0).any():
            return model.fit(X, y, eigenvalues, X_val=store.features(val_split), y_val=y_val)
        return model.set_params(lam=model.lam or 100.0).fit(X, y, eigenvalues)
    if method != "ridge":
        raise ValueError(f"unknown method {method!r}; expected one of {', '.join(METHODS)}")
    model = RidgeClassifier(rho=rho, gram_precision=gram_precision)
    if rho is None and val_split is not None:
        y_val = store.labels(val_split)
        if (y_val >= 0).any():
            return model.fit(X, y, X_val=store.features(val_split), y_val=y_val)
    return model.fit(X, y)


def _train_metric(store, method, split, val_split, metric_dim, max_iter) -> BaseEstimator:
    cls = MetricNearestClassMean if method == "ncm-metric" else MetricKNeighborsClassifier
    y = store.labels(split)
    params = {"n_components": metric_dim, "random_state": 0}
    if max_iter is not None:
        params["max_iter"] = max_iter
    if method == "ncm-metric":
        # W is chosen by the top-5 error (§4.1, 1,000 classes); with few classes nearly every
        # W has a top-5 error of 0, so the top-1 error decides.
        params["validation_k"] = 5 if len(np.unique(y[y >= 0])) >= VALIDATE_TOP5_CLASSES else 1
    model = cls(**params)
    X_val = y_val = None
    if val_split is not None:
        labels = store.labels(val_split)
        labelled = labels >= 0
        if labelled.any():
            X_val, y_val = store.features(val_split, where=labelled), labels[labelled]
    if method == "ncm-metric" and getattr(store, "encoding", "raw") == "pq":
        codec = store.codec
        return model.fit_codes(store.codes(split), y, codec.codebook, codec.rotation, X_val, y_val)
    return model.fit(store.features(split), y, X_val, y_val)


class _EmbeddedStore:
    """A store's view whose ``features(split)`` are embedded on the fly (lazily, per chunk)."""

    def __init__(self, store: FeatureStore, transform):
        self._store, self._transform = store, transform
        self.path = store.path

    def features(self, split: str | None = None):
        return self._transform(self._store.features(split))

    def labels(self, split: str | None = None):
        return self._store.labels(split)
