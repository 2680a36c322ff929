"""Bring a saved model up to date with its store at the cost of the change (`imgscale update`).

A model records the batches it learned from (`jobs.models.store_provenance`). Against the store
as it is now, `storage.changes` lists the rows of its training split the model never saw
(batches added or committed again since) and the rows it saw that the store no longer holds
(batches removed or replaced since, whose rows stay on disk under their tombstone, and rows
forgotten since): one pass over those rows adds and subtracts their sufficient statistics, and
nothing else of the training split is read. The result is the model `train` would fit on the
store as it now is, to float64 rounding of the sums.

Methods whose fit is a sum over rows follow the store: NCM (class sums and counts, from codes on
a PQ store; paper 002 §1, §4.4) and ridge (Gram, XᵀY, row and class sums; ρ chosen again as
`train` chooses it, on the validation split's rows, which are read again, or by GCV; paper 000
§3.3). The others are refused by name, saying to train again.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.pipeline import Pipeline

from imgscale.jobs.models import check_store_features
from imgscale.storage import FeatureStore, StoreError, rows_changed_since

# Estimator class → why its fit cannot follow its store, for the refusal.
NOT_A_SUM = {
    "ExemplarHOPE": "en-HOPE's network and exemplars are learned by gradient descent over "
    "all rows (paper 003 §3), not summed over them",
    "PredictedNeighbourhoodClassifier": "the local learners are fitted on predicted "
    "neighbourhoods of all rows (paper 004 §3), not summed over them",
    "MetricNearestClassMean": "following the store with the learned metric W kept is not "
    "supported yet",
    "MetricKNeighborsClassifier": "following the store with the learned metric W kept is not "
    "supported yet",
    "SemiSupervisedEigenSolver": "following the store with the eigenfunctions kept is not "
    "supported yet",
    "EigenvalueRidgeClassifier": "following the store with the eigenfunctions kept is not "
    "supported yet",
}


def update_model(
    model: BaseEstimator, provenance: dict, store: FeatureStore, path: str | os.PathLike
) -> tuple[BaseEstimator, dict, dict]:
    """``model`` (loaded from ``path`` with its ``provenance``) brought up to date with
    ``store``, in place; returns it, its new provenance and a summary (flat, JSON-ready).

    Refused with one line naming the reason, before any row is read, for a model that cannot
    follow its store: of another store, saved before models recorded their batches, trained on
    a labelled sample (``--per-class``), with an embedding, or of a method whose fit is not a
    sum over rows.
    """
    started = time.perf_counter()
    _check_updatable(model, provenance, store, path)
    split = provenance["split"]
    change = rows_changed_since(store, provenance["store_batches"])
    added, removed = change.added.in_split(split), change.removed.in_split(split)
    old_classes = np.asarray(model.classes_)
    if type(model).__name__ == "NearestClassMean":
        if store.encoding == "pq":
            codec = store.codec
            dropped = model.update_codes(
                (store.codes_at(added.positions), added.labels),
                (store.codes_at(removed.positions), removed.labels),
                codec.codebook,
                codec.rotation,
            )
        else:
            dropped = model.update(
                (store.features_at(added.positions), added.labels),
                (store.features_at(removed.positions), removed.labels),
            )
    else:  # RidgeClassifier: _check_updatable admits no other
        validation = _validation(model, store, provenance.get("val_split", "val"))
        dropped = model.update(
            (store.features_at(added.positions), added.labels),
            (store.features_at(removed.positions), removed.labels),
            *validation,
        )
    names = store.class_names
    new_classes = np.setdiff1d(model.classes_, old_classes)
    updated = {
        **provenance,
        "rows": provenance["rows"] + len(added.positions) - len(removed.positions),
        "committed_rows": change.live_rows,
        "class_names": names,
        "store_batches": change.batches,
    }
    summary = {
        "rows_added": len(added.positions),
        "rows_removed": len(removed.positions),
        "batches_added": change.added_batches,
        "batches_removed": change.removed_batches,
        "forgotten_rows": change.forgotten_rows,
        "classes_added": [_class_name(c, names) for c in new_classes],
        "classes_removed": [_class_name(c, names) for c in dropped],
        "rho": float(model.rho_) if hasattr(model, "rho_") else None,
        "seconds": time.perf_counter() - started,
    }
    return model, updated, summary


def _check_updatable(
    model: BaseEstimator, provenance: dict, store: FeatureStore, path: str | os.PathLike
) -> None:
    if isinstance(model, Pipeline):
        steps = " → ".join(type(step).__name__ for _, step in model.steps)
        raise StoreError(
            f"model {path} ({steps}) embeds its rows with an embedding fitted on them, which "
            "`update` does not refit; train it again on the store as it is"
        )
    kind = type(model).__name__
    if kind in NOT_A_SUM:
        raise StoreError(
            f"model {path} is a {kind}: {NOT_A_SUM[kind]}; train it again on the store as it is"
        )
    if kind not in ("NearestClassMean", "RidgeClassifier"):
        raise StoreError(f"model {path} is a {kind}, which `update` does not know; train it again")
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


def _validation(model: BaseEstimator, store: FeatureStore, val_split: str) -> tuple[Any, Any]:
    """The validation rows ridge's `train` chose ρ on (`jobs.methods`): all of ``val_split``
    when ρ is not fixed and it has labelled rows; else none (ρ fixed, or by GCV)."""
    if model.rho is not None or val_split not in store.split_counts():
        return None, None
    y_val = store.labels(val_split)
    if not (y_val >= 0).any():
        return None, None
    return store.features(val_split), y_val


def _class_name(label: Any, names: list[str]) -> str:
    label = int(label)
    return names[label] if 0 <= label < len(names) else str(label)
