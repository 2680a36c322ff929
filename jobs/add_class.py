"""Add a class to a saved nearest-class-mean model from a store's rows (paper 002 §4.4).

The class costs one pass over its rows for a mean (on a coded store, summed from the codes by
the store's codec: a PQ codec gathers centroids, decoding no row); the projection W and every
other class stay bit-identical. Classes are matched by name: the new rows' store may number its
classes differently from the store the model was trained on. The model is rewritten atomically:
the new version is saved beside it and swapped in.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from imgscale.jobs import models
from imgscale.jobs.class_names import model_class_names
from imgscale.jobs.on_cluster import store_on_cluster
from imgscale.pipeline.classify import NearestClassMean
from imgscale.storage import FeatureStore


def add_class(
    model_path: str | os.PathLike,
    store: FeatureStore,
    label: str,
    *,
    split: str | None = None,
    out: str | os.PathLike | None = None,
    replace: bool = False,
) -> dict[str, Any]:
    """Add class ``label`` (a class name of ``store``) to the model from its rows in ``store``.

    A name the model already has is refused unless ``replace``, which makes the rows of
    ``store`` that class's only rows; ``replace`` of a class the model does not have is refused
    (it would add a class where the caller meant to change one). Returns a summary: ``label``,
    ``class_index`` (its label in the model), ``rows``, ``classes``, ``seconds``,
    ``from_codes``, ``store_changes`` (`models.store_changes`: the batches of the store the
    model was trained on that ``store`` no longer holds as they were, or None). Writes to
    ``out`` if given, else replaces ``model_path``.
    """
    started = time.perf_counter()
    model, provenance = models.load(model_path)
    models.check_store_features(provenance, store, model_path)
    changes = models.store_changes(provenance, store, model_path)
    *embeddings, classifier = models.model_steps(model)
    if not isinstance(classifier, NearestClassMean):
        raise ValueError(
            f"model {model_path}: {type(classifier).__name__} cannot add classes; expected a "
            "NearestClassMean or MetricNearestClassMean"
        )
    store.require_split(split)
    names = store.class_names
    if label not in names:
        raise ValueError(f"store {store.path}: no class named {label!r}; it has {names[:10]}...")
    mask = store.labels(split) == names.index(label)
    rows = int(mask.sum())
    if rows == 0:
        where = f" in split {split!r}" if split else ""
        raise ValueError(f"store {store.path}: class {label!r} has no rows{where}")
    model_names = model_class_names(provenance, store)
    has_class = label in model_names and model_names.index(label) in classifier.classes_
    if replace and not has_class:
        known = [model_names[int(c)] for c in classifier.classes_ if int(c) < len(model_names)]
        raise ValueError(
            f"model {model_path}: has no class {label!r} to replace; expected one of "
            f"{known[:10]}{'...' if len(known) > 10 else ''} (without --replace it is added)"
        )
    if has_class:
        class_index = model_names.index(label)
        if not replace:
            raise ValueError(
                f"model {model_path}: already has class {label!r}; expected a new name "
                "(--replace makes these rows its only rows)"
            )
    elif label in model_names:
        class_index = model_names.index(label)
    else:
        class_index = len(model_names)
        model_names.append(label)
    model_label = np.asarray(classifier.classes_).dtype.type(class_index)
    if embeddings:  # the classifier's rows are embedded float rows
        X, codec = store.features(split)[mask], None
        for embedding in embeddings:
            X = embedding.transform(X)
    else:  # the rows as the store keeps them, and the codec that decodes codes (None: floats)
        X, codec = store.stored_rows(split)[mask], store.codec
    classifier.add_class(X, model_label, replace=replace, codec=codec)
    provenance = {**provenance, "class_names": model_names}
    _save_replacing(model, model_path, out, provenance, label)
    return {
        "label": label,
        "class_index": class_index,
        "rows": rows,
        "classes": len(classifier.classes_),
        "from_codes": codec is not None,
        "store_changes": changes,
        "seconds": time.perf_counter() - started,
    }


def add_class_from_store(
    model_path: str | os.PathLike,
    store: str,
    label: str,
    *,
    split: str = "train",
    out: str | os.PathLike | None = None,
    replace: bool = False,
    scheduler: str | None = None,
    quiet: bool = False,
) -> dict[str, Any]:
    """`imgscale add-class`: open STORE on the cluster, refusing it without rows of ``split``
    before any cluster starts, and `add_class` from them; returns its summary."""
    with store_on_cluster(store, scheduler, quiet=quiet, splits=[split]) as feature_store:
        return add_class(model_path, feature_store, label, split=split, out=out, replace=replace)


def _save_replacing(
    model, path: str | os.PathLike, out: str | os.PathLike | None, provenance: dict, label: str
) -> None:
    added = [*provenance.get("added_classes", []), label]
    kept = {k: v for k, v in provenance.items() if k not in ("imgscale_version", "saved_at")}
    target = path if out is None else out
    models.save(model, target, replace=out is None, **{**kept, "added_classes": added})
