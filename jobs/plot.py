"""2-D scatter plots of a model's embedding of a store's rows, coloured by class (paper 003 Fig. 1).

Only a sample of rows (a few thousand) is read and embedded: a plot of 10⁶ points is a blot, and
the sample keeps the plot of a large split to one read of the sampled rows. `plot_saved_model`
is ``imgscale plot``: a saved model's embedding of a store's rows, on the cluster.
"""

from __future__ import annotations

import os

import numpy as np
from sklearn.base import BaseEstimator

from imgscale.jobs.on_cluster import model_on_cluster
from imgscale.pipeline.compute import compute
from imgscale.storage import FeatureStore

PLOT_HINT = "`imgscale plot` needs matplotlib: pip install 'imgscale[plot]'"


def embedded_sample(
    model: BaseEstimator, store: FeatureStore, split: str | None, max_points: int, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """(embedded rows (k, 2), labels) of at most `max_points` labelled rows of `split`, drawn
    uniformly without replacement."""
    labels = store.labels(split)
    labelled = np.flatnonzero(labels >= 0)
    if len(labelled) == 0:
        raise ValueError(f"store {store.path}: no labelled rows in split {split!r}")
    if not hasattr(model, "transform"):
        raise ValueError(f"model {type(model).__name__} has no embedding to plot (no transform)")
    rng = np.random.default_rng(seed)
    keep = np.sort(rng.choice(labelled, min(max_points, len(labelled)), replace=False))
    mask = np.zeros(len(labels), dtype=bool)
    mask[keep] = True
    (embedded,) = compute(model.transform(store.features(split, where=mask)))
    embedded = np.asarray(embedded)
    if embedded.ndim != 2 or embedded.shape[1] < 2:
        raise ValueError(f"model embeds to {embedded.shape[1:]} dimensions; a plot needs 2")
    return embedded[:, :2], labels[keep]


def plot_embedding(
    model: BaseEstimator,
    store: FeatureStore,
    out: str | os.PathLike,
    *,
    split: str | None = "test",
    max_points: int = 5000,
) -> dict:
    """Write a PNG scatter of the embedded rows of `split` with the model's exemplars (if any)
    drawn as red open circles, as in paper 003 Fig. 1; returns what was drawn."""
    require_pyplot()  # before any rows are read
    points, labels = embedded_sample(model, store, split, max_points)
    exemplars = getattr(model, "embedded_exemplars_", None)
    title = f"{type(model).__name__}: {len(points)} rows of split {split!r} of {store.path.name}"
    draw_embedding(points, labels, store.class_names, exemplars, title, out)
    return {
        "points": len(points),
        "classes": len(np.unique(labels)),
        "exemplars": 0 if exemplars is None else len(exemplars),
        "out": str(out),
    }


def plot_saved_model(
    model: str,
    store: str,
    out: str | os.PathLike,
    *,
    split: str | None = "test",
    max_points: int = 5000,
    scheduler: str | None = None,
    quiet: bool = False,
) -> dict:
    """`plot_embedding` of the saved MODEL's embedding of STORE's rows, on the cluster;
    matplotlib is checked before any cluster starts. Returns what was drawn."""
    require_pyplot()
    with model_on_cluster(model, store, scheduler, quiet=quiet, splits=[split]) as on_cluster:
        fitted, _, feature_store = on_cluster
        return plot_embedding(fitted, feature_store, out, split=split, max_points=max_points)


def draw_embedding(
    points: np.ndarray,
    labels: np.ndarray,
    names: list[str],
    exemplars: np.ndarray | None,
    title: str,
    out: str | os.PathLike,
) -> None:
    """The scatter itself: one colour per class (legend by name), exemplars as red circles."""
    plt = require_pyplot()
    classes = np.unique(labels)
    colours = plt.get_cmap("tab10" if len(classes) <= 10 else "tab20")
    figure, axes = plt.subplots(figsize=(8, 7), dpi=120)
    for i, c in enumerate(classes):
        at = labels == c
        name = names[c] if 0 <= c < len(names) else str(c)
        axes.scatter(*points[at].T, s=4, alpha=0.6, color=colours(i % colours.N), label=name)
    if exemplars is not None:
        axes.scatter(
            *np.asarray(exemplars)[:, :2].T, s=120, facecolors="none", edgecolors="red",
            linewidths=1.5, label="exemplars",
        )  # fmt: skip
    axes.set_title(title)
    axes.set_xlabel("dimension 1")
    axes.set_ylabel("dimension 2")
    legend = axes.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    for handle, text in zip(legend.legend_handles, legend.get_texts(), strict=True):
        handle.set_alpha(1)
        handle.set_sizes([60 if text.get_text() == "exemplars" else 25])
    figure.savefig(out, bbox_inches="tight")
    plt.close(figure)


def require_pyplot():
    """matplotlib.pyplot on the file-only Agg backend, or the one-line install hint."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise RuntimeError(PLOT_HINT) from exc
    return plt
