"""Train a classifier on a feature store's split, validating ρ on the store's validation split;
`train_and_save` is ``imgscale train``: the store on the cluster, the fit, the model saved with
its record of the store."""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from sklearn.base import BaseEstimator

from imgscale.jobs import models
from imgscale.jobs.methods import (
    EMBEDDINGS,
    TrainingData,
    estimator_class,
    get_method,
    resolve_options,
)
from imgscale.jobs.on_cluster import store_on_cluster
from imgscale.pipeline.params import ParameterError
from imgscale.storage import FeatureStore

if TYPE_CHECKING:
    from imgscale.pipeline.classify import Validation


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
    return classifier if embedding is None else models.classifier_pipeline(embedding, classifier)


def train_and_save(
    store: str,
    model: str | os.PathLike,
    method: str,
    *,
    options: dict[str, Any],
    split: str = "train",
    val_split: str = "val",
    val_split_given: bool = False,
    embedding: str | None = None,
    n_components: int | None = None,
    gamma: float | None = None,
    per_class: int | None = None,
    seed: int = 0,
    scheduler: str | None = None,
    quiet: bool = False,
    say: Callable[[str], None] | None = None,
    on_validation: Callable[[Validation], None] | None = None,
) -> tuple[BaseEstimator, dict[str, Any]]:
    """Fit ``method`` on the rows of STORE's ``split`` on the cluster (`train`) and save it as
    MODEL with what it learned from: the store, splits, rows, class names and the store's
    batches (`jobs.models.store_provenance`). Returns the fitted model and the summary
    ``imgscale train`` reports.

    ``options`` are the method's own; ``embedding`` names one of `jobs.methods.EMBEDDINGS`,
    built with ``n_components`` and ``gamma`` (`make_embedding`). The validation split is
    required only when ``val_split_given``; a method that validates says through ``say`` that
    it does without one the store lacks. ``on_validation`` watches an iterative fit's
    validations (`pipeline.classify.watch_validations`).
    """
    from imgscale.jobs.cluster import shared_path
    from imgscale.pipeline.classify import watch_validations

    started = time.perf_counter()
    embedder = None
    if embedding is not None:
        embedder = make_embedding(embedding, n_components=n_components, gamma=gamma)
    sample = {} if per_class is None else {"labelled_per_class": per_class, "sample_seed": seed}
    splits = (split, val_split) if val_split_given else (split,)
    with store_on_cluster(store, scheduler, quiet=quiet, splits=splits) as feature_store:
        if get_method(method).uses_validation and not val_split_given:
            if say is not None and val_split not in feature_store.split_counts():
                say(f"{store}: no split {val_split!r}; {method} validates without it")
        watching = watch_validations(on_validation) if on_validation else contextlib.nullcontext()
        with watching:
            fitted = train(
                feature_store, method, split=split, val_split=val_split, embedding=embedder,
                per_class=per_class, seed=seed, **options,
            )  # fmt: skip
        rows = len(feature_store.labels(split))
        models.save(
            fitted,
            model,
            store=str(shared_path(feature_store.path)),
            split=split,
            val_split=val_split,
            rows=rows,
            committed_rows=feature_store.committed_rows,
            class_names=feature_store.class_names,
            **models.store_provenance(feature_store),
            **sample,
        )
    rho = getattr(models.model_steps(fitted)[-1], "rho_", None)
    summary = {
        "model": str(model),
        "method": method,
        "rows": rows,
        "rho": None if rho is None else float(rho),
        "seconds": time.perf_counter() - started,
        **sample,
    }
    return fitted, summary


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
