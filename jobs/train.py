"""Train a classifier on a feature store's split, validating ρ on the store's validation split."""

from __future__ import annotations

import hashlib

import numpy as np
from sklearn.base import BaseEstimator

from imgscale.jobs.methods import (
    EMBEDDINGS,
    TrainingData,
    estimator_class,
    get_method,
    resolve_options,
)
from imgscale.jobs.models import classifier_pipeline
from imgscale.pipeline.params import ParameterError
from imgscale.storage import FeatureStore


def make_embedding(
    name: str, *, n_components: int | None = None, gamma: float | None = None, random_state=0
) -> BaseEstimator:
    """An unfitted embedding by its CLI name, with the options that apply to it."""
    if name not in EMBEDDINGS:
        raise ValueError(f"unknown embedding {name!r}; expected one of {', '.join(EMBEDDINGS)}")
    reference, params = EMBEDDINGS[name]
    cls = estimator_class(reference)
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
    embedding: BaseEstimator | None = None,
    per_class: int | None = None,
    seed: int = 0,
    **options,
) -> BaseEstimator:
    """Fit ``method`` (a `jobs.methods.METHODS` name) on the rows of ``split``.

    Unlabelled rows of ``split`` count for centering only. ``val_split`` holds the rows that
    choose a method's regulariser (ρ, λ, W, k; paper 000 §4.1 validates on a split); each method
    says in `jobs.methods` what it does without them. ``options`` are the method's own (``rho``,
    ``metric_dim``, ``max_iter``, ``gram_precision``, …); one it does not take is refused.

    With an (unfitted) ``embedding``, it is first fitted on every row of ``split``, labelled or
    not (data-dependent embeddings use the unlabelled rows, paper 000 §4.1); the classifier then
    sees the embedded train rows and embedded validation rows, both computed lazily chunk by
    chunk, and the result is a ``ClassifierPipeline`` (embedding, classifier).
    """
    entry = get_method(method)
    options = resolve_options(entry, options)
    store.require_split(split)
    y = store.labels(split)
    if per_class is not None:
        y = labelled_sample(
            y, store.ids(split), per_class, seed, class_names=store.class_names, split=split
        )
        store = _RelabelledStore(store, split, y)
    classes = np.unique(y[y >= 0])
    if len(classes) < 2:
        names = [store.class_names[c] for c in classes]
        raise ValueError(
            f"store {store.path}: split {split!r} has {len(classes)} labelled classes {names}; "
            "expected at least 2 to train a classifier"
        )
    eigenvalues = None
    if embedding is not None:
        embedding.fit(store.features(split))
        # ssl regularises by the embedding's eigenvalues (PCALap, RPLap, ALE: paper 001 eq. 3).
        eigenvalues = getattr(embedding, "eigenvalues_", None)
    if entry.needs_eigenvalues and eigenvalues is None:
        raise ValueError(f"method {method!r} needs --embedding pcalap, rplap or ale (eigenvalues)")
    data = TrainingData(store, split, val_split, eigenvalues, embedding)
    try:
        classifier = entry.fit(data, options)
    except ParameterError as exc:  # said by the flag that set it, not the estimator's name
        flag = entry.flag_of(exc.parameter)
        if flag is None:
            raise
        raise ValueError(flag + str(exc).removeprefix(exc.parameter)) from None
    return classifier if embedding is None else classifier_pipeline(embedding, classifier)


def labelled_sample(
    y: np.ndarray,
    ids: np.ndarray,
    per_class: int,
    seed: int = 0,
    *,
    class_names: list[str] | None = None,
    split: str = "train",
) -> np.ndarray:
    """``y`` with the labels of all but ``per_class`` rows of each class set to -1 (unlabelled).

    The rows kept are a random sample of each class, seeded by ``seed`` and drawn by the rows'
    ``ids``: each labelled row gets a key, a hash of its id keyed by the seed, and each class
    keeps its ``per_class`` rows of smallest key. The sample is therefore the same images
    whatever order the store holds them in (an ingest commits rows in the order its tasks
    finish), and since a key does not depend on ``per_class``, with one seed the sample for 100
    a class is part of the sample for 1,000: a sweep over sizes adds labels rather than drawing
    new ones. A class with fewer labelled rows than ``per_class`` is refused, naming it:
    silently training on fewer rows would mislabel the size of the experiment.
    """
    if not isinstance(per_class, int | np.integer) or per_class < 1:
        raise ValueError(f"--per-class must be a positive integer, got {per_class!r}")
    y = np.asarray(y)
    salt = str(int(seed)).encode()
    out = np.full_like(y, -1)
    for label in np.unique(y[y >= 0]):
        rows = np.flatnonzero(y == label)
        if len(rows) < per_class:
            name = class_names[label] if class_names is not None else str(label)
            raise ValueError(
                f"--per-class {per_class}: class {name!r} has only {len(rows)} labelled rows "
                f"in split {split!r}"
            )
        keys = [hashlib.blake2b(str(ids[row]).encode(), key=salt).digest() for row in rows]
        order = sorted(range(len(rows)), key=keys.__getitem__)
        out[rows[order[:per_class]]] = label
    return out


class _RelabelledStore:
    """A store's view in which ``split`` has other labels (a labelled sample); rows unchanged."""

    def __init__(self, store: FeatureStore, split: str, labels: np.ndarray):
        self._store, self._split, self._labels = store, split, labels
        self.path = store.path

    def __getattr__(self, name: str):
        return getattr(self._store, name)

    def labels(self, split: str | None = None):
        if split is None:
            raise ValueError("a labelled sample belongs to one split: ask for its labels by name")
        if split == self._split:
            return self._labels
        return self._store.labels(split)
