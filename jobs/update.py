"""Bring a saved model up to date with its store at the cost of the change (`imgscale update`).

A model records the batches it learned from (`jobs.models.store_provenance`). Against the store
as it is now, `storage.changes` lists the rows of its training split the model never saw
(batches added or committed again since) and the rows it saw that the store no longer holds
(batches removed or replaced since, whose rows stay on disk under their tombstone, and rows
forgotten since): one pass over those rows adds and subtracts their sufficient statistics, and
nothing else of the training split is read. The result is the model `train` would fit on the
store as it now is, to float64 rounding of the sums.

Methods whose fit is a sum over rows follow the store: NCM (class sums and counts, from codes on a
coded store; paper 002 §1, §4.4); ridge (Gram, XᵀY, row and class sums; ρ chosen again as `train`
chooses it, by the squared error on the validation split, whose statistics the model keeps too, so
that only its changed rows are read, or by GCV; paper 000 §3.3); NCM with a learned metric (the
class means, projected by the kept W, which is not relearned: how many rows changed since W was
learned is recorded and said); and the semi-supervised solve on an ALE / PCALap / RPLap embedding
(paper 001 eq. 3: UᵀΛU and UᵀΛY of the embedded rows, with the eigenfunctions kept unless
``refit_embedding``, which trains the model again); and kNN with a learned metric, whose neighbour
set (the labelled training rows projected by the kept W) follows the batches, in store order, k
kept. The others are refused by name, saying to train again.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.pipeline import Pipeline

from imgscale.jobs import models
from imgscale.jobs.models import check_store_features
from imgscale.jobs.on_cluster import store_on_cluster
from imgscale.storage import FeatureStore, StoreError, rows_changed_since

# The classifiers `update` brings up to date (a SemiSupervisedEigenSolver after its embedding).
UPDATABLE = (
    "MetricKNeighborsClassifier",
    "NearestClassMean",
    "RidgeClassifier",
    "MetricNearestClassMean",
    "SemiSupervisedEigenSolver",
)
# Estimator class → why its fit cannot follow its store, for the refusal.
NOT_A_SUM = {
    "ExemplarHOPE": "en-HOPE's network and exemplars are learned by gradient descent over "
    "all rows (paper 003 §3), not summed over them",
    "PredictedNeighbourhoodClassifier": "the local learners are fitted on predicted "
    "neighbourhoods of all rows (paper 004 §3), not summed over them",
    "EigenvalueRidgeClassifier": "the eigenvalue-regularised ridge is saved from Python by "
    "the ALE benchmark, without the record `update` follows",
}


def update_model(
    model: BaseEstimator,
    provenance: dict,
    store: FeatureStore,
    path: str | os.PathLike,
    *,
    refit_embedding: bool = False,
) -> tuple[BaseEstimator, dict, dict]:
    """``model`` (loaded from ``path`` with its ``provenance``) brought up to date with
    ``store``; returns it, its new provenance and a summary (flat, JSON-ready).

    Refused with one line naming the reason, before any row is read, for a model that cannot
    follow its store: of another store, saved before models recorded their batches, trained on
    a labelled sample (``--per-class``), or of a method whose fit is not a sum over rows.
    """
    started = time.perf_counter()
    embedding, classifier = _check_updatable(model, provenance, store, path)
    if refit_embedding and embedding is None:
        raise StoreError(f"model {path} has no embedding to refit (--refit-embedding)")
    split = provenance["split"]
    val_split = provenance.get("val_split", "val")
    keeps_rows = type(classifier).__name__ == "MetricKNeighborsClassifier"
    change = rows_changed_since(store, provenance["store_batches"], with_kept=keeps_rows)
    added, removed = change.added.in_split(split), change.removed.in_split(split)
    old_classes = np.asarray(classifier.classes_)
    updated = {**provenance}
    if refit_embedding:
        model = _train_again(model, store, split, val_split)
        dropped = np.setdiff1d(old_classes, model.steps[-1][1].classes_)
        classifier = model.steps[-1][1]
    elif embedding is not None:  # the semi-supervised solve on kept eigenfunctions
        validation = _validation(store, val_split, embedding)
        if classifier.lam is None and validation[0] is None:
            classifier.set_params(lam=100.0)  # as `train` does without validation rows
        dropped = classifier.update(
            (embedding.transform(store.features_at(added.positions)), added.labels),
            (embedding.transform(store.features_at(removed.positions)), removed.labels),
            *validation,
        )
    elif keeps_rows:
        dropped = _follow_neighbours(classifier, store, change, added, removed, split, path)
    elif isinstance(classifier, _ncm_classes()):  # codes summed by the store's codec, if any
        dropped = classifier.update(
            (store.stored_rows_at(added.positions), added.labels),
            (store.stored_rows_at(removed.positions), removed.labels),
            codec=store.codec,
        )
    else:  # RidgeClassifier: _check_updatable admits no other
        dropped = classifier.update(
            (store.features_at(added.positions), added.labels),
            (store.features_at(removed.positions), removed.labels),
            *_ridge_validation(classifier, store, change, val_split),
        )
    changed = len(added.positions) + len(removed.positions)
    if hasattr(classifier, "components_") and not refit_embedding:  # a learned W, kept
        updated.setdefault("metric_learned_rows", provenance["rows"])
        updated["rows_changed_since_metric"] = provenance.get("rows_changed_since_metric", 0)
        updated["rows_changed_since_metric"] += changed
    names = store.class_names
    new_classes = np.setdiff1d(classifier.classes_, old_classes)
    updated.update(
        {
            "rows": provenance["rows"] + len(added.positions) - len(removed.positions),
            "committed_rows": change.live_rows,
            "class_names": names,
            "store_batches": change.batches,
        }
    )
    summary = {
        "rows_added": len(added.positions),
        "rows_removed": len(removed.positions),
        "batches_added": change.added_batches,
        "batches_removed": change.removed_batches,
        "forgotten_rows": change.forgotten_rows,
        "classes_added": [_class_name(c, names) for c in new_classes],
        "classes_removed": [_class_name(c, names) for c in dropped],
        "rho": float(classifier.rho_) if hasattr(classifier, "rho_") else None,
        "embedding": "refitted" if refit_embedding else "kept" if embedding is not None else None,
        "metric_learned_rows": updated.get("metric_learned_rows"),
        "rows_changed_since_metric": updated.get("rows_changed_since_metric"),
        "seconds": time.perf_counter() - started,
    }
    return model, updated, summary


def update_saved_model(
    model_path: str | os.PathLike,
    store: str,
    *,
    out: str | os.PathLike | None = None,
    refit_embedding: bool = False,
    scheduler: str | None = None,
    quiet: bool = False,
) -> dict[str, Any]:
    """`imgscale update`: the model saved at ``model_path`` brought up to date with STORE on the
    cluster (`update_model`) and saved to ``out`` (default: in place, swapped atomically);
    returns the summary with the path saved to as ``model``."""
    model, provenance = models.load(model_path)
    with store_on_cluster(store, scheduler, quiet=quiet) as feature_store:
        model, provenance, summary = update_model(
            model, provenance, feature_store, model_path, refit_embedding=refit_embedding
        )
        models.save(model, out or model_path, replace=out is None, **provenance)
    return {"model": str(out or model_path), **summary}


def _follow_neighbours(
    classifier: BaseEstimator,
    store: FeatureStore,
    change: Any,
    added: Any,
    removed: Any,
    split: str,
    path: str | os.PathLike,
) -> np.ndarray:
    """kNN's neighbour set brought to the labelled training rows as they now are, in the order
    a fit from scratch holds them (row order of the store), under the kept W and k."""
    kept = change.kept.in_split(split)
    learned = np.concatenate([kept.positions, removed.positions])
    labels = np.concatenate([kept.labels, removed.labels])
    order = np.argsort(learned, kind="stable")
    learned, labels = learned[order], labels[order]
    learned = learned[labels >= 0]
    if len(learned) != len(classifier.reference_):
        raise StoreError(
            f"model {path} holds {len(classifier.reference_)} neighbour rows, but the store "
            f"says it learned from {len(learned)} labelled rows; train it again"
        )
    keep = ~np.isin(learned, removed.positions)
    new = added.positions[added.labels >= 0]
    final = np.concatenate([learned[keep], new])
    return classifier.update(
        keep,
        (store.features_at(added.positions), added.labels),
        np.argsort(final, kind="stable"),
    )


def _ncm_classes() -> tuple[type, ...]:
    from imgscale.pipeline.classify import MetricNearestClassMean, NearestClassMean

    return NearestClassMean, MetricNearestClassMean


def _train_again(model: Pipeline, store: FeatureStore, split: str, val_split: str) -> Pipeline:
    """The semi-supervised pipeline trained again, its embedding refitted on the rows as they
    now are (`imgscale train --method ssl` with the same embedding and λ)."""
    from sklearn.base import clone

    from imgscale.jobs.train import train

    embedding, classifier = model.steps[0][1], model.steps[-1][1]
    rho = None if classifier.lam is None else 1.0 / classifier.lam
    return train(
        store, "ssl", split=split, val_split=val_split, embedding=clone(embedding), rho=rho
    )


def _check_updatable(
    model: BaseEstimator, provenance: dict, store: FeatureStore, path: str | os.PathLike
) -> tuple[BaseEstimator | None, BaseEstimator]:
    """(embedding or None, classifier) of a model `update` can bring up to date; StoreError
    naming the reason otherwise."""
    embedding = None
    classifier = model
    if isinstance(model, Pipeline):
        embedding, classifier = model.steps[0][1], model.steps[-1][1]
        kind = type(classifier).__name__
        if len(model.steps) != 2 or kind != "SemiSupervisedEigenSolver":
            steps = " → ".join(type(step).__name__ for _, step in model.steps)
            raise StoreError(
                f"model {path} ({steps}) classifies rows embedded by an embedding fitted on "
                "them (Nyström landmarks, PCA axes, a bandwidth), which is not a sum over "
                "rows; train it again on the store as it is"
            )
    kind = type(classifier).__name__
    if kind in NOT_A_SUM:
        raise StoreError(
            f"model {path} is a {kind}: {NOT_A_SUM[kind]}; train it again on the store as it is"
        )
    if kind not in UPDATABLE:
        raise StoreError(f"model {path} is a {kind}, which `update` does not know; train it again")
    if getattr(classifier, "solver_", "primal") == "dual":
        raise StoreError(
            f"model {path} is a ridge solved in its dual form (fewer labelled rows than "
            "features), which keeps no D × D sums to add rows to or remove them from; train "
            "it again on the store as it is"
        )
    if provenance.get("store_batches") is None or "split" not in provenance:
        raise StoreError(
            f"model {path} does not record the batches it learned from (saved before models "
            "recorded them, or from Python); train it again to have a model that can follow it"
        )
    if provenance.get("store_created") != store.created:
        raise StoreError(
            f"model {path} was trained on another store than {store.path} (one created "
            f"{(provenance.get('store_created') or {}).get('time', '?')}); update it against "
            "that store"
        )
    if "labelled_per_class" in provenance:
        raise StoreError(
            f"model {path} learned from a sample of {provenance['labelled_per_class']} labelled "
            "rows a class (--per-class), drawn from all rows; train it again on the store as it is"
        )
    check_store_features(provenance, store, path)
    return embedding, classifier


def _validation(
    store: FeatureStore, val_split: str, embedding: BaseEstimator | None = None
) -> tuple[Any, Any]:
    """The validation rows `train` chooses ρ or λ on (`jobs.methods.TrainingData.validation`):
    all of ``val_split`` (embedded by ``embedding``) when it has labelled rows, else none."""
    if val_split not in store.split_counts():
        return None, None
    y_val = store.labels(val_split)
    if not (y_val >= 0).any():
        return None, None
    X_val = store.features(val_split)
    return (X_val if embedding is None else embedding.transform(X_val)), y_val


def _ridge_validation(
    classifier: BaseEstimator, store: FeatureStore, change: Any, val_split: str
) -> tuple[tuple[Any, Any] | None, tuple[Any, Any] | None]:
    """(validation rows added, validation rows removed) for `RidgeClassifier.update`: only the
    rows of ``val_split`` that changed when the model keeps its validation rows' statistics;
    all of them when it keeps none (read once for a model saved before models kept them, at
    every update for ρ chosen by the per-class rate); none for a fixed ρ."""
    if classifier.rho is not None:
        return None, None
    if hasattr(classifier, "validation_gram_"):
        added, removed = change.added.in_split(val_split), change.removed.in_split(val_split)
        return (
            (store.features_at(added.positions), added.labels),
            (store.features_at(removed.positions), removed.labels),
        )
    X_val, y_val = _validation(store, val_split)
    return (None if X_val is None else (X_val, y_val)), None


def _class_name(label: Any, names: list[str]) -> str:
    label = int(label)
    return names[label] if 0 <= label < len(names) else str(label)
