"""Train a classifier on a feature store's split, validating ρ on the store's validation split."""

from __future__ import annotations

from sklearn.base import BaseEstimator

from pipeline.classify import NearestClassMean, RidgeClassifier
from storage import FeatureStore

METHODS = ("ridge", "ncm")


def train(
    store: FeatureStore,
    method: str,
    *,
    split: str = "train",
    val_split: str | None = "val",
    rho: float | None = None,
) -> BaseEstimator:
    """Fit ``method`` on the rows of ``split`` (its unlabelled rows count for centering only).

    For ridge without a fixed ``rho``, the grid value is chosen on ``val_split`` when the store
    has such rows, else by generalized cross-validation (paper 000 §4.1 validates on a split).
    """
    X, y = store.features(split), store.labels(split)
    if len(y) == 0:
        raise ValueError(f"store {store.path}: no rows in split {split!r}")
    if method == "ncm":
        return NearestClassMean().fit(X, y)
    if method != "ridge":
        raise ValueError(f"unknown method {method!r}; expected one of {', '.join(METHODS)}")
    model = RidgeClassifier(rho=rho)
    if rho is None and val_split is not None:
        y_val = store.labels(val_split)
        if (y_val >= 0).any():
            return model.fit(X, y, X_val=store.features(val_split), y_val=y_val)
    return model.fit(X, y)
