"""`imgscale bench ale`: ALE fit + embed speed on a store, incremental embedding throughput, and
ALE + semi-supervised solve vs linear ridge on MNIST and USPS (papers 000 and 001).

Speed (paper 001 §3–4: 10 concepts × 150K rows, 512-D; its "training variables" took 3 min on 24
cores): one streamed ALE fit (PCA pass, range pass, histogram pass), then one pass that embeds
every row and accumulates the eq. 3 system (UᵀΛU, UᵀΛY) and solves it, all on the Dask cluster;
peak RSS of this process and its workers. The peer is the machine's own ceiling: one pass that only
reads the store. Incremental embedding: `jobs.embed.embed_new_rows` into a fresh store in batches
of 1,000 rows, each its own commit.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

from imgscale.bench.accuracy import load_dataset
from imgscale.bench.common import PeakRSS, mixture_store, record
from imgscale.bench.registry import Context, benchmark
from imgscale.jobs.cluster import connect
from imgscale.jobs.embed import embed_new_rows
from imgscale.pipeline.classify import RidgeClassifier
from imgscale.pipeline.classify.ssl import EigenvalueRidgeClassifier, SemiSupervisedEigenSolver
from imgscale.pipeline.compute import Mapper, compute, run_in_process
from imgscale.pipeline.embed import ALE
from imgscale.pipeline.metrics import mean_interpolated_average_precision, per_class_rate
from imgscale.pipeline.reductions import reduce_rows

GIB = 2**30


def _read_chunk(X: np.ndarray, row_start: int = 0) -> float:
    return float(X[:, 0].sum())


def run_speed(
    rows: int = 1_500_000,
    dim: int = 512,
    classes: int = 10,
    *,
    n_components: int = 500,
    incremental_rows: int = 100_000,
    batch_rows: int = 1000,
    workdir: str | None = None,
    scheduler: str | None = None,
    log: Callable[[str], None] = print,
) -> list[dict]:
    """Records: read pass, ALE fit, embed + SSL solve, total, peak RSS, incremental rows/s."""
    root = Path(workdir) if workdir else Path(tempfile.gettempdir()) / "imgscale-bench"
    root.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    store = mixture_store(root / f"mixture-{rows}x{dim}x{classes}.zarr", rows, dim, classes)
    log(f"store ready ({time.perf_counter() - started:.0f} s): {store}")
    labels = store.labels()
    y = np.where(store.splits() == "train", labels, -1)  # val rows: unlabelled
    X = store.features()
    records = []
    with connect(scheduler, quiet=True) as client, PeakRSS() as peak:
        workers = len(client.scheduler_info(n_workers=-1)["workers"])
        t = time.perf_counter()
        compute(reduce_rows(_read_chunk, [X], blocks_per_task="auto"))
        read_seconds = time.perf_counter() - t
        log(f"read pass {read_seconds:.1f} s")

        t = time.perf_counter()
        ale = ALE(n_components=n_components).fit(X)
        fit_seconds = time.perf_counter() - t
        log(f"ALE fit {fit_seconds:.1f} s")

        t = time.perf_counter()
        U = ale.transform(X)
        chunks = U.chunks[0]
        y_lazy = _as_dask_labels(y, chunks)
        ssl = SemiSupervisedEigenSolver(lam=100.0).fit(U, y_lazy, ale.eigenvalues_)
        embed_seconds = time.perf_counter() - t
        log(f"embed + eq. 3 system {embed_seconds:.1f} s")

        val = labels >= 0
        val &= store.splits() == "val"
        sample = np.flatnonzero(val)[:: max(1, val.sum() // 20_000)]
        scores = np.asarray(ssl.decision_function(ale.transform(compute(X[sample])[0])))
        relevant = labels[sample][:, None] == ssl.classes_[None, :]
        miap = mean_interpolated_average_precision(relevant, scores)
        rate = per_class_rate(labels[sample], ssl.classes_[scores.argmax(axis=1)])

        dst = root / "ale-incremental.zarr"
        shutil.rmtree(dst, ignore_errors=True)
        limit = min(incremental_rows, rows)
        t = time.perf_counter()
        summary = embed_new_rows(ale, store, dst, batch_rows=batch_rows, max_rows=limit)
        incremental_seconds = time.perf_counter() - t
        log(f"incremental {summary['rows_embedded']} rows in {incremental_seconds:.1f} s")
        shutil.rmtree(dst, ignore_errors=True)

    total = fit_seconds + embed_seconds
    shape = {"rows": rows, "dim": dim, "workers": workers}
    records += [
        record("read_pass_seconds", read_seconds, "s", **shape),
        record("ale_fit_seconds", fit_seconds, "s", peer_value=read_seconds, **shape, passes=3),
        record("embed_and_ssl_seconds", embed_seconds, "s", peer_value=read_seconds, **shape),
        record("fit_plus_embed_seconds", total, "s", peer_value=60.0, target="<= 60 s", **shape),
        record("fit_plus_embed_rows_per_second", rows / total, "rows/s", **shape),
        record("peak_rss_gib", peak.peak / GIB, "GiB", peer_value=2.0, target="<= 2 GiB", **shape),
        record("ssl_val_miap", miap, "MiAP", rows=len(sample)),
        record("ssl_val_per_class_rate", rate, "rate", rows=len(sample)),
        record(
            "incremental_embed_rows_per_second",
            summary["rows_embedded"] / incremental_seconds,
            "rows/s",
            rows=summary["rows_embedded"],
            batch_rows=batch_rows,
        ),
        record(
            "incremental_embed_batches_per_second",
            summary["batches_committed"] / incremental_seconds,
            "batches/s",
            batch_rows=batch_rows,
        ),
    ]
    return records


def _as_dask_labels(y: np.ndarray, chunks: tuple) -> object:
    import dask.array as da

    return da.from_array(y, chunks=(chunks,))


# -- accuracy: ALE + SSL vs linear ridge ---------------------------------------------------------

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


@benchmark(
    "ale",
    "ALE fit + embed + equation-3 solve on a store vs the store's read pass (paper 001 scale); "
    "incremental embedding rows/s",
)
def suite(ctx: Context) -> list[dict]:
    rows, dim, n_components, incremental = ctx.pick(
        tiny=(4_000, 32, 40, 2_000),
        small=(200_000, 512, 500, 20_000),
        medium=(1_500_000, 512, 500, 100_000),
        large=(1_500_000, 512, 500, 100_000),
    )
    return run_speed(
        rows, dim, 10, n_components=n_components, incremental_rows=incremental,
        workdir=ctx.scratch("ale"), scheduler=ctx.scheduler, log=ctx.log,
    )  # fmt: skip
