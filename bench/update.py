"""``imgscale bench update``: a model brought up to date with its store vs trained again, same run.

A store of N rows in 100 batches (a tenth of each batch in the validation split); NCM and ridge
(ρ chosen on the validation split) are trained on it. The store then changes: one batch is
added, a middle batch is removed and 100 rows are forgotten. Ours: `imgscale update`'s job on
each model (one pass over the changed rows, of the training split and, for ridge, of the
validation split, whose statistics ridge keeps to choose ρ again by their squared error). The
peer: `train` from scratch on the store as it now is.
The target is the cost of the change, not of the store: update ≤ 2 × (changed rows / all rows)
× train + 1 s. Both are timed at several N, in turn, as many rounds as the scale's repetitions
(each figure the median of its rounds, the ratio the median of the rounds'), and the updated
model's predictions are checked against the fresh one's on the validation rows.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from imgscale.bench.common import interleaved, mixture_blocks, record, repetitions
from imgscale.bench.registry import Context, benchmark
from imgscale.jobs import models
from imgscale.jobs.cluster import connect
from imgscale.jobs.train import train
from imgscale.jobs.update import update_model
from imgscale.storage import FeatureStore, create_store, open_store

BATCHES = 100
FORGOTTEN = 100
METHODS = ("ncm", "ridge")


def run(
    sizes: tuple[int, ...],
    dim: int,
    classes: int,
    *,
    repeats: int,
    workdir: str | None = None,
    scheduler: str | None = None,
    png: Path | None = None,
    log=print,
) -> list[dict]:
    """Time update against train at each of ``sizes`` rows; return benchmark records."""
    workdir = Path(workdir or tempfile.mkdtemp(prefix="imgscale-bench-"))
    records, curves = [], {m: {"rows": [], "update": [], "train": []} for m in METHODS}
    for rows in sizes:
        path = workdir / f"update-{rows}x{dim}-{classes}.zarr"
        with connect(scheduler):
            store = _batched_store(path, rows, dim, classes)
            saved = {m: _train_and_save(store, m, workdir / f"{m}-{rows}.model") for m in METHODS}
            changed = _change(store, rows, dim, classes)
            total = store.committed_rows
            for method in METHODS:
                update_times, train_times, done = _update_and_train(
                    store, saved[method], method, repeats
                )
                model, _, summary = done["update"]
                agreement = _agreement(model, done["fresh"], store)
                update_seconds = statistics.median(update_times)
                train_seconds = statistics.median(train_times)
                fraction = changed / total
                target = 2 * fraction * train_seconds + 1
                log(
                    f"update {method} at {rows:,} rows: {update_seconds:.2f} s "
                    f"(train {train_seconds:.2f} s, target {target:.2f} s)"
                )
                records.append(
                    record(
                        f"{method} update, {rows:,} rows, 1 of {BATCHES} batches added, 1 "
                        f"removed, {FORGOTTEN} rows forgotten",
                        update_times,
                        "s",
                        train_times,
                        peer="train from scratch on the changed store, same run",
                        rows=rows,
                        dim=dim,
                        classes=classes,
                        changed_rows=changed,
                        changed_fraction=fraction,
                        target_seconds=target,
                        within_target=update_seconds <= target,
                        rows_added=summary["rows_added"],
                        rows_removed=summary["rows_removed"],
                        prediction_agreement=agreement,
                    )
                )
                curves[method]["rows"].append(rows)
                curves[method]["update"].append(update_seconds)
                curves[method]["train"].append(train_seconds)
    if png is not None:
        plot(curves, png)
    return records


def _update_and_train(
    store: FeatureStore, saved: Path, method: str, repeats: int
) -> tuple[list[float], list[float], dict]:
    """Seconds of updating the saved model to the store and of training anew, in turn,
    ``repeats`` rounds; and the last round's results (``update``: update_model's, ``fresh``:
    the new model)."""
    done = {}

    def update_once() -> float:
        model, provenance = models.load(saved)
        started = time.perf_counter()
        done["update"] = update_model(model, provenance, store, saved)
        return time.perf_counter() - started

    def train_once() -> float:
        started = time.perf_counter()
        done["fresh"] = train(store, method)
        return time.perf_counter() - started

    update_times, train_times = interleaved(update_once, train_once, repeats=repeats)
    return update_times, train_times, done


def _batched_store(path: Path, rows: int, dim: int, classes: int) -> FeatureStore:
    """The mixture's rows in `BATCHES` batches, built anew (the benchmark changes it)."""
    if path.exists():
        open_store(path)  # only ever remove a store
        shutil.rmtree(path)
    store = create_store(path, dim, class_names=[f"class{c}" for c in range(classes)])
    per_batch = rows // BATCHES
    blocks = mixture_blocks(rows, dim, classes, seed=0, block_rows=per_batch)
    for b, (X, labels) in enumerate(blocks):
        _append(store, f"batch{b:03d}", X, labels)
    return store


def _append(store: FeatureStore, batch_id: str, X: np.ndarray, labels: np.ndarray) -> None:
    split = np.where(np.arange(len(labels)) % 10 == 0, "val", "train")
    ids = [f"{batch_id}:{i}" for i in range(len(labels))]
    store.append(batch_id, X, labels, ids=ids, split=split)


def _train_and_save(store: FeatureStore, method: str, path: Path) -> Path:
    """The model `imgscale train` saves (same provenance), at ``path``."""
    model = train(store, method)
    models.save(
        model,
        path,
        replace=True,
        split="train",
        val_split="val",
        rows=len(store.labels("train")),
        committed_rows=store.committed_rows,
        class_names=store.class_names,
        **models.store_provenance(store),
    )
    return path


def _change(store: FeatureStore, rows: int, dim: int, classes: int) -> int:
    """Add a batch, remove a middle batch, forget `FORGOTTEN` rows; returns the rows changed."""
    per_batch = rows // BATCHES
    X, labels = next(mixture_blocks(per_batch, dim, classes, seed=1, block_rows=per_batch))
    _append(store, "added", X, labels)
    store.remove_batch(f"batch{BATCHES // 2:03d}")
    ids = [f"batch{BATCHES // 4 + i // per_batch:03d}:{i % per_batch}" for i in range(FORGOTTEN)]
    store.forget(ids, reason="benchmark")
    return 2 * per_batch + FORGOTTEN


def _agreement(updated, fresh, store: FeatureStore) -> float:
    """Fraction of validation rows both models predict the same class for."""
    X = store.features("val")
    return float(np.mean(np.asarray(updated.predict(X)) == np.asarray(fresh.predict(X))))


def plot(curves: dict, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(curves), figsize=(4.6 * len(curves), 3.6))
    for ax, (method, curve) in zip(np.atleast_1d(axes), curves.items(), strict=True):
        ax.loglog(curve["rows"], curve["train"], marker="o", label="train from scratch")
        ax.loglog(curve["rows"], curve["update"], marker="s", label="update (the change only)")
        ax.set_xlabel("rows in the store (N)")
        ax.set_ylabel("seconds")
        ax.set_title(method)
        ax.grid(alpha=0.3, which="both")
    np.atleast_1d(axes)[0].legend()
    fig.suptitle(f"1 of {BATCHES} batches added, 1 removed, {FORGOTTEN} rows forgotten")
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


@benchmark(
    "update",
    "a model brought up to date with its store (1 batch of 100 added, 1 removed, 100 rows "
    "forgotten) vs train from scratch, NCM and ridge",
)
def suite(ctx: Context) -> list[dict]:
    sizes, dim, classes = ctx.pick(
        tiny=((4_000,), 16, 5),
        small=((10_000, 30_000, 100_000), 128, 100),
        medium=((100_000, 300_000, 1_000_000), 128, 100),
        large=((1_000_000, 3_000_000, 10_000_000), 128, 100),
    )
    return run(
        sizes, dim, classes, repeats=repetitions(ctx), workdir=ctx.scratch("update"),
        scheduler=ctx.scheduler, png=ctx.plot("times"), log=ctx.log,
    )  # fmt: skip
