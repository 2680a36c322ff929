"""A model's classes by name: the table saved with it, and store labels translated into it.

A store's integer labels index its own class table, a model's labels the table of the store it
was trained on (saved with the model as ``class_names``, extended by ``add-class``). Two stores
may number the same class differently, so every command that brings a store's labels to a model
matches them by name; a store class the model does not know is refused, never scored.
"""

from __future__ import annotations

import numpy as np

from imgscale.storage import FeatureStore


def model_class_names(provenance: dict, store: FeatureStore) -> list[str]:
    """The model's class table; a model saved without one (from Python) uses the store's."""
    names = provenance.get("class_names")
    return list(names) if names is not None else store.class_names


def is_numbered(names: list[str]) -> bool:
    """Whether the classes are the numbers "0".."C-1" that integer labels are named with."""
    return names == [str(i) for i in range(len(names))]


def to_model_labels(
    labels: np.ndarray, store: FeatureStore, model_names: list[str], what: str
) -> np.ndarray:
    """``labels`` of ``store`` (-1 = unlabelled) as the model's labels for the same names."""
    store_names = store.class_names
    if store_names == model_names[: len(store_names)]:
        return labels
    index = {name: i for i, name in enumerate(model_names)}
    present = np.unique(labels[labels >= 0])
    unknown = [store_names[c] for c in present if store_names[c] not in index]
    if unknown:
        raise ValueError(
            f"store {store.path}: {what} has classes {unknown[:10]} that {model_names[:10]}... "
            "of the model do not include; expected only classes the model knows"
        )
    table = np.full(len(store_names) + 1, -1, dtype=np.int64)
    for c in present:
        table[c] = index[store_names[c]]
    return table[labels]
