"""en-HOPE's exemplars (paper 003 §3.2): how many each class gets, where they start, and the
k-NN class scores of embedded rows against them."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.cluster import KMeans

from imgscale.pipeline.params import ParameterError
from imgscale.pipeline.rows import squared_distances


def exemplars_per_class(
    class_counts: np.ndarray, n_exemplars: int, classes: Any = None
) -> np.ndarray:
    """z_c: n_exemplars shared in proportion to class_counts (largest remainders), ≥ 1 each;
    errors name the class by its label in `classes` (default: its index)."""
    n_classes = len(class_counts)
    if not n_classes <= n_exemplars:
        raise ParameterError(
            "n_exemplars",
            f"n_exemplars is {n_exemplars}: need at least one exemplar for each of the "
            f"{n_classes} classes",
        )
    share = class_counts / class_counts.sum() * (n_exemplars - n_classes)
    per_class = 1 + np.floor(share).astype(np.int64)
    remainder = n_exemplars - per_class.sum()
    per_class[np.argsort(-(share - np.floor(share)), kind="stable")[:remainder]] += 1
    short = np.flatnonzero(per_class > class_counts)
    if len(short):
        c = short[0]
        label = c if classes is None else np.asarray(classes)[c].item()
        raise ParameterError(
            "n_exemplars",
            f"n_exemplars is {n_exemplars}, which gives class {label!r} {per_class[c]} exemplars "
            f"but it has only {class_counts[c]} labelled rows",
        )
    return per_class


def initial_exemplars(
    rows: np.ndarray, y_index: np.ndarray, per_class: np.ndarray, init: str, rng
) -> tuple[np.ndarray, np.ndarray]:
    """(exemplars (z, H) float64, their class index), ordered by class: per-class k-means
    centres (``kmeans``, ``learned``) or random rows of each class (``random``)."""
    exemplars, index = [], []
    for c, count in enumerate(per_class):
        members = rows[y_index == c]
        if len(members) < count:
            raise ValueError(
                f"class index {c}: {len(members)} rows sampled, fewer than its {count} exemplars"
            )
        if init == "random":
            centres = members[rng.choice(len(members), count, replace=False)]
        else:
            seed = int(rng.randint(2**31 - 1))
            centres = KMeans(count, n_init=3, random_state=seed).fit(members).cluster_centers_
        exemplars.append(np.asarray(centres, dtype=np.float64))
        index.append(np.full(count, c))
    return np.vstack(exemplars), np.concatenate(index)


def exemplar_knn_scores(
    Y: np.ndarray, Ye: np.ndarray, class_starts: np.ndarray, k: int
) -> np.ndarray:
    """Class scores (n, C) of embedded rows by k-NN among the embedded exemplars, which are
    ordered by class (class c holds columns class_starts[c]:class_starts[c + 1]).

    A class scores its votes among the k nearest exemplars plus 1/(2(1 + d_c)) ∈ (0, ½], d_c the
    squared distance to its nearest exemplar: ties in votes go to the class with the nearer
    exemplar, and classes without votes are ranked by their nearest exemplar (top-k).
    """
    distances = squared_distances(Y, Ye)
    n, z = distances.shape
    nearest = np.argpartition(distances, k - 1, axis=1)[:, :k] if k < z else np.arange(z)[None]
    exemplar_class = np.repeat(np.arange(len(class_starts) - 1), np.diff(class_starts))
    scores = 0.5 / (1 + np.minimum.reduceat(distances, class_starts[:-1], axis=1))
    rows = np.arange(n)
    for column in np.broadcast_to(nearest, (n, min(k, z))).T:
        scores[rows, exemplar_class[column]] += 1
    return scores.astype(np.float32)
