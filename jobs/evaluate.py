"""Evaluate a fitted classifier on a store's split without bringing its rows to the client;
`evaluate_saved_model` is ``imgscale evaluate``: a saved model scored on a store on the
cluster."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from sklearn.base import BaseEstimator

from imgscale.jobs.class_names import model_class_names, to_model_labels
from imgscale.jobs.on_cluster import model_on_cluster
from imgscale.pipeline.classify import top_k_columns
from imgscale.pipeline.compute import compute
from imgscale.pipeline.metrics import evaluate_top_k, mean_interpolated_average_precision
from imgscale.storage import FeatureStore

TOP_K = 5
# MiAP needs every score of every class at once; past this many scores it is left out.
MAP_MAX_SCORES = 20_000_000


def evaluate(
    model: BaseEstimator,
    store: FeatureStore,
    split: str | None = "test",
    class_names: list[str] | None = None,
) -> dict:
    """Per-class rate, top-1/top-5 flat error and (for small n×C) MiAP on the labelled rows.

    MiAP ranks rows by the model's posterior where it has one (``predict_log_proba``), else by
    its decision scores.

    ``class_names`` is the model's class table (`jobs.class_names`): the store's labels are
    matched to the model's by name. Without it, they are taken to be numbered alike.
    """
    store.require_split(split)
    labels = store.labels(split)
    if class_names is not None:
        labels = to_model_labels(labels, store, class_names, f"split {split!r}")
    labelled = labels >= 0
    if not labelled.any():
        raise ValueError(f"store {store.path}: no labelled rows in split {split!r}")
    X = store.features(split, where=None if labelled.all() else labelled)
    y = labels[labelled]
    classes = np.asarray(model.classes_)
    k = min(TOP_K, len(classes))
    if len(y) * len(classes) <= MAP_MAX_SCORES:
        # One pass over the rows: the scores give the top-k labels and, for a model without a
        # posterior, the MiAP ranking too.
        graphs = [model.decision_function(X)]
        if hasattr(model, "predict_log_proba"):
            graphs.append(model.predict_log_proba(X))
        scores, *posterior = (np.asarray(a) for a in compute(*graphs))
        if scores.ndim == 1:  # two classes: sklearn's single column scores classes_[1]
            scores = np.column_stack([-scores, scores])
        # Best first, ties to the lower class: the selection predict_top_k makes.
        result = evaluate_top_k(y, classes[top_k_columns(scores, k)])
        # MiAP ranks the rows of each class, so by a score comparable across rows: the
        # posterior log p(c|x) where the model has one (NCM's raw −‖x − μ_c‖² carries each
        # row's ‖x‖², which scrambles that ranking; paper 002 eq. 2).
        ranking = posterior[0] if posterior else scores
        result["miap"] = mean_interpolated_average_precision(y[:, None] == classes, ranking)
    else:
        result = evaluate_top_k(y, model.predict_top_k(X, k=k))
    if k < TOP_K:
        result["top5_error"] = None
    return result


def evaluate_saved_model(
    model: str,
    store: str,
    split: str | None = "test",
    *,
    scheduler: str | None = None,
    quiet: bool = False,
    warn: Callable[[str], None] | None = None,
) -> dict:
    """`evaluate` of the saved MODEL on STORE's ``split`` on the cluster, the store's labels
    matched to the model's classes by name. ``warn`` is told of batches the model learned from
    that STORE no longer holds as they were."""
    on_cluster = model_on_cluster(model, store, scheduler, quiet=quiet, splits=[split], warn=warn)
    with on_cluster as (fitted, provenance, feature_store):
        names = model_class_names(provenance, feature_store)
        return evaluate(fitted, feature_store, split, names)
