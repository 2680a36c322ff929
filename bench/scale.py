"""Out-of-core scale study: time and peak RSS of every streaming fit vs the number of rows.

The claim imgscale is built on: a fit is a pass (or a few) over a store that need not fit in
memory, so its time grows linearly with the rows and its memory does not grow at all. For each
size (Gaussian-mixture stores of 512-D float32 rows, up to one larger than the machine's RAM at
``--scale large``), each fit runs on the suite's cluster:

- **read-only pass**, once with the store's pages dropped from the page cache first (cold: its
  GB/s beside the disk's cold sequential read rate of the same run) and once warm;
- **class means** (``NearestClassMean``), **ridge** over the ρ grid with ρ validated,
  **RFF → ridge**, the **ALE** fit (paper 001), **PQ encode** (``compress``, training excluded).

Each fit runs once untimed on the smallest store first (numba compilation, worker imports), then
as many times as the scale's repetitions on each store (the cold pass drops the store's pages
before each); every figure is the median of its repetitions.
Records: seconds per million rows at each size beside the same fit's figure at the reference
size (the first ≥ 10⁶ rows, else the smallest; target: within 15%), peak RSS of the client and
every worker (target ≤ 2 GiB whatever the size), 1 → 2 workers on the largest store beside the
ideal 2× (own LocalClusters, skipped with --scheduler), and at the largest size the class sums
and the ridge Gram compared with a chunked numpy reference computed in float64 from the same rows
regenerated block by block (the benchmark fails if they differ beyond float64 rounding).
"""

from __future__ import annotations

import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from imgscale.bench.common import PeakRSS, mixture_blocks, mixture_store, record, repetitions
from imgscale.bench.machine import drop_page_cache
from imgscale.bench.registry import Context, benchmark
from imgscale.jobs.cluster import connect
from imgscale.jobs.compress import compress
from imgscale.pipeline.classify import NearestClassMean, RidgeClassifier
from imgscale.pipeline.compute import compute
from imgscale.pipeline.embed import ALE, RandomFourierFeatures
from imgscale.pipeline.reductions import reduce_rows, row_stats
from imgscale.storage import FeatureStore

GIB = 2**30
RSS_TARGET_GIB = 2.0
LINEAR_TOLERANCE = 0.15
# Float64 sums of ≤ 1.5e7 terms of size ~1 in different orders differ by far less than this.
REFERENCE_RTOL = 1e-9


def _rows_read(block: np.ndarray, row_start: int = 0) -> int:
    return len(block)


def _fits(rff_dim: int, ale_components: int, pq_m: int, scratch: Path) -> dict[str, Callable]:
    """Each streaming fit as ``fit(store) -> seconds``."""

    def timed(function: Callable[[], object]) -> float:
        started = time.perf_counter()
        function()
        return time.perf_counter() - started

    def read_pass(store: FeatureStore) -> float:
        X = store.features()
        return timed(lambda: compute(reduce_rows(_rows_read, [X], blocks_per_task="auto")))

    def class_means(store: FeatureStore) -> float:
        return timed(lambda: NearestClassMean().fit(store.features(), store.labels()))

    def ridge(store: FeatureStore) -> float:
        X, y = store.features("train"), store.labels("train")
        X_val, y_val = store.features("val"), store.labels("val")
        return timed(lambda: RidgeClassifier().fit(X, y, X_val=X_val, y_val=y_val))

    def rff_ridge(store: FeatureStore) -> float:
        X, y = store.features("train"), store.labels("train")
        X_val, y_val = store.features("val"), store.labels("val")

        def fit() -> None:
            rff = RandomFourierFeatures(rff_dim, random_state=0).fit(X)
            RidgeClassifier(gram_precision="float32").fit(
                rff.transform(X), y, X_val=rff.transform(X_val), y_val=y_val
            )

        return timed(fit)

    def ale(store: FeatureStore) -> float:
        return timed(lambda: ALE(n_components=ale_components).fit(store.features()))

    def pq_encode(store: FeatureStore) -> float:
        dst = scratch / "pq.zarr"
        shutil.rmtree(dst, ignore_errors=True)
        summary = compress(store, dst, pq_m)
        shutil.rmtree(dst)
        return store.committed_rows / summary["encode_rows_per_second"]

    return {
        "read-only pass, cold": read_pass,
        "read-only pass, warm": read_pass,
        "class means": class_means,
        "ridge, rho validated": ridge,
        f"RFF-{rff_dim} -> ridge": rff_ridge,
        f"ALE fit, {ale_components} eigenfunctions": ale,
        f"PQ encode, M={pq_m}": pq_encode,
    }


@benchmark(
    "scale",
    "out-of-core scale study: time and peak RSS vs rows of every streaming fit (read, class "
    "means, ridge, RFF -> ridge, ALE, PQ encode), cold read vs the disk, 1 -> 2 workers, "
    "results at the largest size vs a chunked numpy reference",
)
def suite(ctx: Context) -> list[dict]:
    sizes, dim, classes, rff_dim, ale_components, pq_m = ctx.pick(
        tiny=((2_000, 8_000), 32, 10, 64, 20, 8),
        small=((30_000, 100_000, 300_000), 512, 100, 1000, 200, 64),
        medium=((100_000, 1_000_000, 3_000_000), 512, 100, 1000, 200, 64),
        large=((100_000, 1_000_000, 10_000_000, 15_000_000), 512, 100, 1000, 200, 64),
    )
    scratch = ctx.scratch("scale")
    fits = _fits(rff_dim, ale_components, pq_m, scratch)
    reference = next((n for n in sizes if n >= 1_000_000), sizes[0])
    repeats = repetitions(ctx)
    seconds: dict[str, dict[int, list[float]]] = {name: {} for name in fits}
    rss: dict[str, dict[int, list[float]]] = {name: {} for name in fits}
    records = []
    for rows in sizes:
        path = scratch / f"mixture-{rows}x{dim}-{classes}.zarr"
        started = time.perf_counter()
        store = mixture_store(path, rows, dim, classes)
        ctx.log(f"scale: {rows} rows ready in {time.perf_counter() - started:.0f} s")
        records.append(record(f"store of {rows} rows, GiB", rows * dim * 4 / GIB, "GiB"))
        with connect(ctx.scheduler, quiet=True):
            for name, fit in fits.items():
                if rows == sizes[0]:
                    fit(store)  # untimed: compiles numba kernels, imports on the workers
                seconds[name][rows], rss[name][rows], splits = [], [], []
                for _ in range(repeats):
                    if name.endswith("cold"):
                        drop_page_cache(path)
                    with PeakRSS() as peak:
                        seconds[name][rows].append(fit(store))
                    rss[name][rows].append(peak.peak / GIB)
                    splits.append(peak.split_gib())
                ctx.log(
                    f"scale: {name}, {rows} rows: {statistics.median(seconds[name][rows]):.2f} s, "
                    f"{statistics.median(rss[name][rows]):.2f} GiB (medians of {repeats})"
                )
                records.append(
                    record(
                        f"{name}, {rows} rows, peak RSS", rss[name][rows], "GiB", RSS_TARGET_GIB,
                        peer="target: flat, <= 2 GiB (client + workers)", rows=rows,
                        split_gib=max(splits, key=lambda split: sum(split.values())),
                    )
                )  # fmt: skip
        cold = seconds["read-only pass, cold"][rows]
        disk = ctx.limits.get("disk sequential read, cold")
        records.append(
            record(
                f"read-only pass, cold, {rows} rows",
                [rows * dim * 4 / each / 1e9 for each in cold], "GB/s", disk,
                peer="disk sequential read, cold (dd-style, same run)", rows=rows,
            )
        )  # fmt: skip
        if rows == sizes[-1]:
            records += _reference_check(store, rows, dim, classes, ctx)
            if ctx.external_cluster:
                ctx.log("scale: 1 -> 2 workers left out: it starts LocalClusters of its own")
            else:
                records += _workers(store, fits, repeats, ctx)
        if rows != sizes[-1] or ctx.scale != "large":
            shutil.rmtree(path)
    for name, by_rows in seconds.items():
        anchor = [each / reference * 1e6 for each in by_rows[reference]]
        for rows, values in by_rows.items():
            records.append(
                record(
                    f"{name}, {rows} rows", [each / rows * 1e6 for each in values],
                    "s per 1M rows", anchor,
                    peer=f"same fit at {reference} rows (linear growth: ratio 1, target within "
                    f"{LINEAR_TOLERANCE:.0%}; the i-th repetition at each size paired)",
                    rows=rows, seconds=statistics.median(values),
                )
            )  # fmt: skip
    seconds_median = {
        name: {rows: statistics.median(values) for rows, values in by_rows.items()}
        for name, by_rows in seconds.items()
    }
    rss_median = {
        name: {rows: statistics.median(values) for rows, values in by_rows.items()}
        for name, by_rows in rss.items()
    }
    _plot_time(seconds_median, reference, dim, ctx.plot("time-vs-rows"))
    _plot_rss(rss_median, dim, ctx.plot("rss-vs-rows"))
    return records


def _reference_check(
    store: FeatureStore, rows: int, dim: int, classes: int, ctx: Context
) -> list[dict]:
    """Class sums and the ridge Gram of the store vs numpy in float64 over the same rows."""
    with connect(ctx.scheduler, quiet=True):
        ncm = NearestClassMean().fit(store.features(), store.labels())
        stats = row_stats(store.features(), store.labels(), classes, gram=True)
    sums = np.zeros((classes, dim))
    gram = np.zeros((dim, dim))
    for X, labels in mixture_blocks(rows, dim, classes):
        X64 = X.astype(np.float64)
        sums += (labels[:, None] == np.arange(classes)).T.astype(np.float64) @ X64
        gram += X64.T @ X64
    out = []
    for name, ours, truth in (
        ("class sums", ncm.class_sums_[np.argsort(ncm.classes_)], sums),
        ("ridge Gram XᵀX", stats.gram, gram),
    ):
        difference = float(np.abs(ours - truth).max() / np.abs(truth).max())
        if not difference <= REFERENCE_RTOL:
            raise AssertionError(
                f"{name} at {rows} rows differs from the numpy reference by {difference:.3g} "
                f"(relative to its largest entry; expected <= {REFERENCE_RTOL:g})"
            )
        out.append(
            record(
                f"{name} at {rows} rows vs chunked numpy float64, max relative difference",
                difference, "relative", REFERENCE_RTOL, peer="float64 tolerance",
            )
        )  # fmt: skip
    return out


def _workers(
    store: FeatureStore, fits: dict[str, Callable], repeats: int, ctx: Context
) -> list[dict]:
    """Throughput of the light passes with 1 and 2 single-threaded workers, ``repeats`` times
    each, and the speed-up of the i-th repetitions."""
    chosen = ("read-only pass, warm", "class means", "ridge, rho validated")
    rates: dict[str, dict[int, list[float]]] = {name: {} for name in chosen}
    for workers in (1, 2):
        with connect(quiet=True, n_workers=workers):
            for name in chosen:
                fits[name](store)  # warm-up: page cache, worker imports
                rates[name][workers] = [
                    store.committed_rows / fits[name](store) for _ in range(repeats)
                ]
    out = []
    for name, by_workers in rates.items():
        speed_ups = [two / one for one, two in zip(by_workers[1], by_workers[2], strict=True)]
        out.append(
            record(
                f"{name}, 1 -> 2 workers speed-up", speed_ups, "x", 2.0,
                peer="ideal (2x)", rows_per_s_1=statistics.median(by_workers[1]),
                rows_per_s_2=statistics.median(by_workers[2]),
            )
        )  # fmt: skip
    _plot_workers(
        {name: {w: statistics.median(r) for w, r in by.items()} for name, by in rates.items()},
        ctx.plot("workers"),
    )
    return out


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _plot_time(seconds: dict[str, dict[int, float]], reference: int, dim: int, path: Path) -> None:
    """Time vs rows on log-log axes, each fit with its linear-growth line through the reference."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 5))
    for i, (name, by_rows) in enumerate(seconds.items()):
        colour = f"C{i}"
        n = np.array(sorted(by_rows), dtype=float)
        t = np.array([by_rows[int(r)] for r in n])
        ax.plot(n, t, "o-", color=colour, label=name)
        ax.plot(n, by_rows[reference] * n / reference, ":", color=colour, linewidth=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(f"rows ({dim}-D float32)")
    ax.set_ylabel("seconds")
    ax.set_title("time vs rows; dotted: linear growth through the reference size", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_rss(rss: dict[str, dict[int, float]], dim: int, path: Path) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, by_rows in rss.items():
        n = sorted(by_rows)
        ax.plot(n, [by_rows[r] for r in n], "o-", label=name)
    ax.axhline(RSS_TARGET_GIB, color="black", linestyle="--", linewidth=1, label="2 GiB target")
    ax.set_xscale("log")
    ax.set_ylim(bottom=0)
    ax.set_xlabel(f"rows ({dim}-D float32)")
    ax.set_ylabel("peak RSS, client + workers (GiB)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_workers(rates: dict[str, dict[int, float]], path: Path) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for i, (name, by_workers) in enumerate(rates.items()):
        ax.plot([1, 2], [by_workers[1], by_workers[2]], "o-", color=f"C{i}", label=name)
        ax.plot([1, 2], [by_workers[1], 2 * by_workers[1]], ":", color=f"C{i}", linewidth=1)
    ax.set_xticks([1, 2])
    ax.set_xlabel("single-threaded workers")
    ax.set_ylabel("rows/s")
    ax.set_title("1 -> 2 workers; dotted: ideal (2x)", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
