"""Zero-shot prior means of new classes from a class hierarchy (paper 002 §4.4).

A new class with no images gets the average of its ancestors' means; an internal node's mean is
the average of the means of all training classes below it. With n images of sample mean μ_s the
prior μ_z enters as a MAP estimate, μ_p = (n μ_s + m μ_z)/(n + m), with m validated
(`MetricNearestClassMean.add_class_prior` and ``prior_weight``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def ancestors(children: Sequence[Any], parents: Sequence[Any]) -> dict[Any, list[Any]]:
    """Each node's ancestors, nearest first, from child → parent edges (roots have none)."""
    parent_of = dict(zip(children, parents, strict=True))
    if len(parent_of) != len(children):
        raise ValueError("a node has more than one parent: the hierarchy must be a tree")
    result: dict[Any, list[Any]] = {}
    for node in {*children, *parents}:
        chain, current = [], node
        while current in parent_of:
            current = parent_of[current]
            if current == node or current in chain:
                raise ValueError(f"the hierarchy has a cycle through {node!r}")
            chain.append(current)
        result[node] = chain
    return result


def prior_means(
    classes: Sequence[Any],
    means: np.ndarray,
    children: Sequence[Any],
    parents: Sequence[Any],
    new_classes: Sequence[Any],
) -> np.ndarray:
    """(len(new_classes), D) float32 prior means: the average of each new class's ancestors'
    means, an ancestor's mean being the average of the ``means`` of the training ``classes``
    below it. Ancestors with no training class below them are skipped."""
    means = np.asarray(means, dtype=np.float64)
    up = ancestors(children, parents)
    sums: dict[Any, np.ndarray] = {}
    counts: dict[Any, int] = {}
    for label, mean in zip(classes, means, strict=True):
        for node in up.get(label, []):
            sums[node] = sums.get(node, 0.0) + mean
            counts[node] = counts.get(node, 0) + 1
    out = np.empty((len(new_classes), means.shape[1]), dtype=np.float32)
    for i, label in enumerate(new_classes):
        nodes = [node for node in up.get(label, []) if counts.get(node)]
        if not nodes:
            raise ValueError(f"class {label!r} has no ancestor above a training class")
        out[i] = np.mean([sums[node] / counts[node] for node in nodes], axis=0)
    return out


def map_mean(sample_mean: Any, n: int, prior_mean: Any, weight: float) -> np.ndarray:
    """(n μ_s + m μ_z)/(n + m): the MAP mean of §4.4 (μ_z alone when n = 0)."""
    if n == 0:
        return np.asarray(prior_mean, dtype=np.float32)
    total = n * np.asarray(sample_mean, np.float64) + weight * np.asarray(prior_mean, np.float64)
    return (total / (n + weight)).astype(np.float32)
