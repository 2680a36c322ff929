"""``imgscale bench ncm``: 10K-class means from raw and PQ stores, eq. 9 scoring, SGD speed.

Measured in one run (paper 002 §4.4: ImageNet-10K, 4.5M rows, 10,184 classes):
- class means of ``classes`` classes over a synthetic ``rows × dim`` store, raw (one streamed
  pass of class sums) and PQ (one pass counting codes, nothing decoded; needs ``imgscale
  compress``, i.e. ``jobs.compress``);
- top-5 NCM scoring by eq. 9 of ``queries`` rows against the class means projected to
  ``n_components``, as a fraction of the same run's plain numpy GEMMs of the same shapes
  (queries × D by D × d, then queries × d by d × C) in the same blocks of query rows — the
  peer is the arithmetic alone; the two alternate;
- SGD iterations per second of the learned metric on MNIST (if the data is there) and the
  wall time to reach the validated optimum.

Each timed part runs as many times as the scale's repetitions, on the store built once; every
figure is the median of its repetitions, the scoring's ratio the median of its rounds'.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np

from imgscale.bench.common import (
    STORE_BUILT_ONCE,
    PeakRSS,
    interleaved,
    mixture_store,
    record,
    repetitions,
)
from imgscale.bench.registry import Context, benchmark
from imgscale.jobs.cluster import connect
from imgscale.pipeline.classify import MetricNearestClassMean, NearestClassMean
from imgscale.pipeline.classify.ncm_metric import SCORE_ROWS

Model = TypeVar("Model")


def run(
    rows: int,
    dim: int,
    classes: int,
    *,
    queries: int = 100_000,
    n_components: int = 256,
    pq_m: int = 64,
    data_dir: str | None = None,
    workdir: str | None = None,
    scheduler: str | None = None,
    log: Callable[[str], None] | None = None,
    repeats: int = 3,
) -> list[dict]:
    """Each timed part ``repeats`` times on the store built once; return benchmark records."""
    log = log or (lambda line: None)
    workdir = Path(workdir or tempfile.mkdtemp(prefix="imgscale-bench-ncm-"))
    records = []
    started = time.perf_counter()
    store = mixture_store(workdir / f"mixture-{rows}x{dim}-{classes}.zarr", rows, dim, classes)
    records.append(
        record(
            "raw store build", time.perf_counter() - started, "s", rows=rows,
            why_once=STORE_BUILT_ONCE,
        )
    )  # fmt: skip
    log(f"store built: {records[-1]['value']:.1f} s")
    labels = store.labels()
    with connect(scheduler, quiet=True), PeakRSS() as rss:
        raw, seconds = _timed_fits(
            lambda: NearestClassMean().fit(store.features(), labels), repeats
        )
    records.append(
        record(
            f"{classes}-class means, raw store, wall", seconds, "s",
            rows=rows, dim=dim, peak_rss_gib=rss.peak / 2**30,
        )
    )  # fmt: skip
    records.append(record("class means throughput, raw", [rows / s for s in seconds], "rows/s"))
    log(f"raw means: {statistics.median(seconds):.1f} s")
    if pq_m:
        records += _pq_means(store, workdir, pq_m, classes, raw.means_, scheduler, log, repeats)
    records += _scoring(raw.means_, dim, queries, n_components, log, repeats)
    if data_dir:
        records += _sgd(Path(data_dir), log, repeats)
    return records


def _timed_fits(fit: Callable[[], Model], repeats: int) -> tuple[Model, list[float]]:
    """The last fitted model and the wall seconds of each of ``repeats`` fits."""
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        model = fit()
        seconds.append(time.perf_counter() - started)
    return model, seconds


def _pq_means(store, workdir, m, classes, raw_means, scheduler, log, repeats) -> list[dict]:
    try:
        from imgscale.jobs.compress import compress
    except ImportError:
        log("jobs.compress not available: PQ class means skipped")
        return []
    from imgscale.storage import open_store

    path = workdir / f"{store.path.stem}-pq{m}.zarr"
    with connect(scheduler, quiet=True):
        if not path.exists():
            started = time.perf_counter()
            compress(store, path, m)
            log(f"compressed: {time.perf_counter() - started:.1f} s")
        pq = open_store(path)
        codec = pq.codec
        with PeakRSS() as rss:
            model, seconds = _timed_fits(
                lambda: NearestClassMean().fit(pq.codes(), pq.labels(), codec=codec), repeats
            )
    difference = float(np.abs(model.means_ - raw_means).max())
    log(f"PQ means: {statistics.median(seconds):.1f} s")
    return [
        record(
            f"{classes}-class means, PQ store (M={m}), wall", seconds, "s",
            rows=pq.committed_rows, peak_rss_gib=rss.peak / 2**30,
            max_abs_difference_to_raw_means=difference,
        ),
        record(
            "class means throughput, PQ", [pq.committed_rows / s for s in seconds], "rows/s"
        ),
    ]  # fmt: skip


def _scoring(means, dim, queries, n_components, log, repeats) -> list[dict]:
    rng = np.random.default_rng(0)
    classes = len(means)
    model = MetricNearestClassMean(n_components=n_components)
    W = np.linalg.qr(rng.standard_normal((dim, n_components)))[0].T.astype(np.float32)
    model.components_, model.means_ = W, means
    model.projected_means_ = means @ W.T
    model.classes_, model.n_features_in_ = np.arange(classes), dim
    model.class_sums_, model.class_counts_ = means.astype(np.float64), np.ones(classes, np.int64)
    X = rng.standard_normal((queries, dim), dtype=np.float32)
    P = model.projected_means_

    def top_5() -> float:
        started = time.perf_counter()
        model.predict_top_k(X, k=5)
        return time.perf_counter() - started

    def gemm() -> float:
        # The peer computes the same blocks of query rows as predict_top_k, without the top-k.
        started = time.perf_counter()
        for start in range(0, queries, SCORE_ROWS):
            (X[start : start + SCORE_ROWS] @ W.T) @ P.T
        return time.perf_counter() - started

    # Alternated: other jobs on the shared cores slow single runs, and both of a round alike.
    ours, peer = interleaved(top_5, gemm, repeats=repeats)
    flops = 2 * queries * n_components * (dim + classes)
    log(f"scoring: ours {statistics.median(ours):.2f} s, GEMM {statistics.median(peer):.2f} s")
    return [
        record(
            f"eq. 9 top-5 scoring, {queries} x {classes} classes, d={n_components}",
            [queries / s for s in ours], "rows/s", [queries / s for s in peer],
            peer="plain numpy GEMMs of the same shapes (same run)",
            gemm_gflops=flops / statistics.median(peer) / 1e9,
        )
    ]  # fmt: skip


def _sgd(data_dir: Path, log, repeats) -> list[dict]:
    path = data_dir / "mnist.npz"
    if not path.exists():
        log(f"{path} missing: SGD speed skipped")
        return []
    with np.load(path, allow_pickle=False) as data:
        X = data["X_train"].astype(np.float32) / 255
        y = data["y_train"].astype(np.int64)
    model, seconds = _timed_fits(
        lambda: MetricNearestClassMean(
            n_components=64, max_iter=1000, validate_every=50, validation_k=1, random_state=0
        ).fit(X, y),
        repeats,
    )
    rates = [model.n_iter_ / s for s in seconds]
    log(f"SGD: {statistics.median(rates):.1f} it/s")
    return [
        record("SGD on MNIST (d=64, m=1000), incl. validation", rates, "it/s"),
        record(
            "SGD time to the validated optimum (MNIST)",
            [model.best_iteration_ / rate for rate in rates],
            "s", best_iteration=model.best_iteration_,
        ),
    ]  # fmt: skip


@benchmark(
    "ncm",
    "class means of many classes from raw and PQ stores, equation-9 top-5 scoring vs a plain "
    "GEMM, metric-learning SGD it/s on MNIST (paper 002 section 4.4)",
    needs=("mnist.npz (SGD part only)",),
)
def suite(ctx: Context) -> list[dict]:
    rows, dim, classes, queries, n_components, pq_m = ctx.pick(
        tiny=(8_000, 32, 50, 2_000, 16, 8),
        small=(500_000, 512, 1000, 20_000, 256, 64),
        medium=(4_500_000, 512, 10_000, 100_000, 256, 64),
        large=(4_500_000, 512, 10_000, 100_000, 256, 64),
    )
    return run(
        rows, dim, classes, queries=queries, n_components=n_components, pq_m=pq_m,
        data_dir=ctx.data_dir if ctx.scale != "tiny" else None,
        workdir=ctx.scratch("ncm"), scheduler=ctx.scheduler, log=ctx.log,
        repeats=repetitions(ctx),
    )  # fmt: skip
