"""Paper 001's growing labelled sets on MNIST and USPS: ALE + the semi-supervised solve of
equation 3 and ALE + eigenvalue ridge against linear ridge on the same labelled rows, every other
train row unlabelled, mean ± std over random draws (the ``ale-ssl`` benchmark of
:mod:`imgscale_reproductions.protocols` and the draws of ``natural-ale``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

from imgscale.bench import record
from imgscale.pipeline.classify import (
    EigenvalueRidgeClassifier,
    RidgeClassifier,
    SemiSupervisedEigenSolver,
)
from imgscale.pipeline.compute import Mapper, run_in_process
from imgscale.pipeline.embed import ALE
from imgscale.pipeline.metrics import mean_interpolated_average_precision, per_class_rate
from imgscale_reproductions.accuracy import load_dataset

LABELLED_PER_CLASS = (3, 10, 30, 100, 300)
TRIALS = 5
ALE_DIRECTIONS, ALE_COMPONENTS = 50, 200
METHODS = ("linear ridge", "ALE + SSL (eq. 3)", "ALE + eigenvalue ridge")


def _scores(model, X) -> np.ndarray:
    return np.asarray(model.decision_function(X), dtype=np.float64)


def run_accuracy(
    datasets: tuple[str, ...] = ("usps", "mnist"),
    *,
    per_class: tuple[int, ...] = LABELLED_PER_CLASS,
    trials: int = TRIALS,
    data_dir: Path,
    log: Callable[[str], None] = print,
    mapper: Mapper = run_in_process,
) -> list[dict]:
    """Per (dataset, method, labelled per class): test MiAP and mean per-class rate, mean ± std
    over `trials` random labelled sets; every other train row is unlabelled.

    The trials of each labelled-set size run through ``mapper`` (default: one after the other
    here; ``imgscale.jobs.cluster.cluster_mapper`` runs them as parallel tasks on the cluster, the
    shared arrays sent to each worker once).
    """
    records = []
    for name in datasets:
        data = load_dataset(name, None, data_dir=data_dir)
        X, y, X_val, y_val = data["X_train"], data["y_train"], data["X_val"], data["y_val"]
        X_test, y_test = data["X_test"], data["y_test"]
        t = time.perf_counter()
        # Unsupervised: fitted once on every train row (labels never seen).
        ale = ALE(n_directions=ALE_DIRECTIONS, n_components=ALE_COMPONENTS).fit(X)
        U, U_val, U_test = ale.transform(X), ale.transform(X_val), ale.transform(X_test)
        log(f"{name}: ALE fit + embed {time.perf_counter() - t:.1f} s, U {U.shape}")
        shared = (X, y, X_val, y_val, X_test, y_test, U, U_val, U_test, ale.eigenvalues_)
        for count in per_class:
            trial = partial(_ale_trial, per_class=count)
            outcomes = mapper(trial, shared, [(t,) for t in range(trials)])
            results = {
                m: {k: [o[m][k] for o in outcomes] for k in ("miap", "rate")} for m in METHODS
            }
            for method, r in results.items():
                for metric, unit in (("miap", "MiAP"), ("rate", "per-class rate")):
                    values = np.asarray(r[metric])
                    records.append(
                        record(
                            f"{name}_{_slug(method)}_{metric}_{count}",
                            values.mean(),
                            unit,
                            dataset=name,
                            method=method,
                            metric=metric,
                            labelled_per_class=count,
                            std=float(values.std()),
                            trials=trials,
                        )
                    )
            line = ", ".join(
                f"{m}: MiAP {np.mean(r['miap']):.3f} rate {np.mean(r['rate']):.3f}"
                for m, r in results.items()
            )
            log(f"{name} {count}/class: {line}")
    return records


def _ale_trial(
    X, y, X_val, y_val, X_test, y_test, U, U_val, U_test, eigenvalues, trial: int, *, per_class: int
) -> dict[str, dict[str, float]]:
    """One random labelled set: each method's test MiAP and per-class rate (ρ or λ validated)."""
    rng = np.random.default_rng(1000 * per_class + trial)
    classes = np.unique(y)
    chosen = np.concatenate(
        [rng.choice(np.flatnonzero(y == c), per_class, replace=False) for c in classes]
    )
    y_l = np.full(len(y), -1)
    y_l[chosen] = y[chosen]
    models = {
        "linear ridge": (RidgeClassifier().fit(X, y_l, X_val=X_val, y_val=y_val), X_test),
        "ALE + SSL (eq. 3)": (
            SemiSupervisedEigenSolver(lam=None).fit(U, y_l, eigenvalues, X_val=U_val, y_val=y_val),
            U_test,
        ),
        "ALE + eigenvalue ridge": (
            EigenvalueRidgeClassifier().fit(U, y_l, eigenvalues, X_val=U_val, y_val=y_val),
            U_test,
        ),
    }
    relevant = y_test[:, None] == classes[None, :]
    outcome = {}
    for method, (model, rows) in models.items():
        scores = _scores(model, rows)
        predicted = model.classes_[scores.argmax(axis=1)]
        outcome[method] = {
            "miap": mean_interpolated_average_precision(relevant, scores),
            "rate": per_class_rate(y_test, predicted),
        }
    return outcome


def _slug(method: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in method.lower()).strip("_").replace("__", "_")


def plot_accuracy(records: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = list(dict.fromkeys(r["dataset"] for r in records))
    fig, axes = plt.subplots(2, len(datasets), figsize=(5.5 * len(datasets), 8), squeeze=False)
    styles = dict(zip(METHODS, ("k-o", "C0-s", "C1-^"), strict=True))
    for col, dataset in enumerate(datasets):
        for row, (metric, label) in enumerate((("miap", "test MiAP"), ("rate", "per-class rate"))):
            ax = axes[row, col]
            for method in METHODS:
                rs = sorted(
                    (
                        r
                        for r in records
                        if r["dataset"] == dataset and r["method"] == method
                        and r["metric"] == metric
                    ),
                    key=lambda r: r["labelled_per_class"],
                )  # fmt: skip
                x = [r["labelled_per_class"] for r in rs]
                mean = np.array([r["value"] for r in rs])
                std = np.array([r["std"] for r in rs])
                ax.errorbar(x, mean, yerr=std, fmt=styles[method], label=method, capsize=3)
            ax.set_xscale("log")
            ax.set_xlabel("labelled rows per class (rest unlabelled)")
            ax.set_ylabel(label)
            ax.set_title(f"{dataset}: {label}")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
