"""Add a class to a saved nearest-class-mean model from a store's rows (paper 002 §4.4).

The class costs one pass over its rows for a mean (on a PQ store, centroids gathered from the
codes: no row is decoded); the projection W and every other class stay bit-identical. The model
is rewritten atomically: the new version is saved beside it and swapped in.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from imgscale.jobs import models
from imgscale.pipeline.classify import NearestClassMean
from imgscale.storage import FeatureStore


def add_class(
    model_path: str | os.PathLike,
    store: FeatureStore,
    label: str,
    *,
    split: str | None = None,
    out: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """Add (or add rows to) class ``label`` (a store class name) from the rows of ``store``.

    Returns a summary: ``label``, ``class_index`` (its integer label), ``rows``, ``classes``,
    ``seconds``, ``from_codes``. Writes to ``out`` if given, else replaces ``model_path``.
    """
    started = time.perf_counter()
    model, provenance = models.load(model_path)
    steps = list(model.steps) if hasattr(model, "steps") else [("model", model)]
    classifier = steps[-1][1]
    if not isinstance(classifier, NearestClassMean):
        raise ValueError(
            f"model {model_path}: {type(classifier).__name__} cannot add classes; expected a "
            "NearestClassMean or MetricNearestClassMean"
        )
    names = store.class_names
    if label not in names:
        raise ValueError(f"store {store.path}: no class named {label!r}; it has {names[:10]}...")
    class_index = names.index(label)
    labels = store.labels(split)
    mask = labels == class_index
    rows = int(mask.sum())
    if rows == 0:
        where = f" in split {split!r}" if split else ""
        raise ValueError(f"store {store.path}: class {label!r} has no rows{where}")
    y = np.full(rows, class_index, dtype=np.asarray(classifier.classes_).dtype)
    from_codes = getattr(store, "encoding", "raw") == "pq" and len(steps) == 1
    if from_codes:
        codec = store.codec
        codes = store.codes(split)[mask]
        classifier.partial_fit_codes(codes, y, codec.codebook, codec.rotation)
    else:
        X = store.features(split)[mask]
        for _, step in steps[:-1]:
            X = step.transform(X)
        classifier.partial_fit(X, y)
    _save_replacing(model, Path(model_path), None if out is None else Path(out), provenance, label)
    return {
        "label": label,
        "class_index": class_index,
        "rows": rows,
        "classes": len(classifier.classes_),
        "from_codes": from_codes,
        "seconds": time.perf_counter() - started,
    }


def _save_replacing(model, path: Path, out: Path | None, provenance: dict, label: str) -> None:
    added = [*provenance.get("added_classes", []), label]
    kept = {k: v for k, v in provenance.items() if k not in ("imgscale_version", "saved_at")}
    if out is not None:
        models.save(model, out, **{**kept, "added_classes": added})
        return
    staged = path.with_name(f".{path.name}.adding-{os.getpid()}")
    backup = path.with_name(f".{path.name}.replaced-{os.getpid()}")
    models.save(model, staged, **{**kept, "added_classes": added})
    os.replace(path, backup)
    os.replace(staged, path)
    shutil.rmtree(backup, ignore_errors=True)
