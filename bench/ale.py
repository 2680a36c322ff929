"""`imgscale bench ale`: ALE fit + embed + equation-3 solve speed on a store and incremental
embedding throughput, at paper 001's scale.

Speed (paper 001 §3–4: 10 concepts × 150K rows, 512-D; its "training variables" took 3 min on 24
cores): one streamed ALE fit (PCA pass, range pass, histogram pass), then one pass that embeds
every row and accumulates the eq. 3 system (UᵀΛU, UᵀΛY) and solves it, all on the Dask cluster;
peak RSS of this process and its workers. The peer is the machine's own ceiling: one pass that only
reads the store, run in turn with the fit. Incremental embedding: `jobs.embed_store.embed_new_rows`
into a fresh store in batches of 1,000 rows, each its own commit. Every timing is repeated as
many times as the scale's repetitions on the store built once; each figure is their median.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from imgscale.bench.common import PeakRSS, interleaved, mixture_store, record, repetitions
from imgscale.bench.registry import Context, benchmark
from imgscale.jobs.cluster import connect
from imgscale.jobs.embed_store import embed_new_rows
from imgscale.pipeline.classify import SemiSupervisedEigenSolver
from imgscale.pipeline.compute import compute
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
    repeats: int = 3,
) -> list[dict]:
    """Records: read pass, ALE fit, embed + SSL solve, total, peak RSS, incremental rows/s, each
    timed ``repeats`` times on the store built once (the read pass and the fit in turn)."""
    root = Path(workdir) if workdir else Path(tempfile.gettempdir()) / "imgscale-bench"
    root.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    store = mixture_store(root / f"mixture-{rows}x{dim}x{classes}.zarr", rows, dim, classes)
    log(f"store ready ({time.perf_counter() - started:.0f} s): {store}")
    labels = store.labels()
    y = np.where(store.splits() == "train", labels, -1)  # val rows: unlabelled
    X = store.features()
    with connect(scheduler, quiet=True) as client:
        workers = len(client.scheduler_info(n_workers=-1)["workers"])

        def read_pass() -> float:
            t = time.perf_counter()
            compute(reduce_rows(_read_chunk, [X], blocks_per_task="auto"))
            return time.perf_counter() - t

        fitted = {}

        def fit_and_embed() -> dict[str, float]:
            with PeakRSS() as peak:
                t = time.perf_counter()
                ale = ALE(n_components=n_components).fit(X)
                fit_seconds = time.perf_counter() - t
                t = time.perf_counter()
                U = ale.transform(X)
                y_lazy = _as_dask_labels(y, U.chunks[0])
                fitted["ssl"] = SemiSupervisedEigenSolver(lam=100.0).fit(
                    U, y_lazy, ale.eigenvalues_
                )
                embed_seconds = time.perf_counter() - t
            fitted["ale"] = ale
            log(f"ALE fit {fit_seconds:.1f} s, embed + eq. 3 system {embed_seconds:.1f} s")
            return {"fit": fit_seconds, "embed": embed_seconds, "peak": peak.peak / GIB}

        read_seconds, runs = interleaved(read_pass, fit_and_embed, repeats=repeats)
        ale, ssl = fitted["ale"], fitted["ssl"]

        val = labels >= 0
        val &= store.splits() == "val"
        sample = np.flatnonzero(val)[:: max(1, val.sum() // 20_000)]
        scores = np.asarray(ssl.decision_function(ale.transform(compute(X[sample])[0])))
        relevant = labels[sample][:, None] == ssl.classes_[None, :]
        miap = mean_interpolated_average_precision(relevant, scores)
        rate = per_class_rate(labels[sample], ssl.classes_[scores.argmax(axis=1)])

        dst = root / "ale-incremental.zarr"
        limit = min(incremental_rows, rows)

        def incremental() -> tuple[dict, float]:
            shutil.rmtree(dst, ignore_errors=True)  # each repetition embeds into a fresh store
            t = time.perf_counter()
            summary = embed_new_rows(ale, store, dst, batch_rows=batch_rows, max_rows=limit)
            seconds = time.perf_counter() - t
            log(f"incremental {summary['rows_embedded']} rows in {seconds:.1f} s")
            return summary, seconds

        increments = [incremental() for _ in range(repeats)]
        shutil.rmtree(dst, ignore_errors=True)

    fit_seconds = [run["fit"] for run in runs]
    embed_seconds = [run["embed"] for run in runs]
    total = [fit + embed for fit, embed in zip(fit_seconds, embed_seconds, strict=True)]
    summary = increments[-1][0]
    incremental_seconds = [seconds for _, seconds in increments]
    shape = {"rows": rows, "dim": dim, "workers": workers}
    return [
        record("read_pass_seconds", read_seconds, "s", **shape),
        record("ale_fit_seconds", fit_seconds, "s", peer_value=read_seconds, **shape, passes=3),
        record("embed_and_ssl_seconds", embed_seconds, "s", peer_value=read_seconds, **shape),
        record("fit_plus_embed_seconds", total, "s", peer_value=60.0, target="<= 60 s", **shape),
        record("fit_plus_embed_rows_per_second", [rows / t for t in total], "rows/s", **shape),
        record(
            "peak_rss_gib",
            [run["peak"] for run in runs],
            "GiB",
            peer_value=2.0,
            target="<= 2 GiB",
            **shape,
        ),
        record("ssl_val_miap", miap, "MiAP", rows=len(sample)),
        record("ssl_val_per_class_rate", rate, "rate", rows=len(sample)),
        record(
            "incremental_embed_rows_per_second",
            [summary["rows_embedded"] / seconds for seconds in incremental_seconds],
            "rows/s",
            rows=summary["rows_embedded"],
            batch_rows=batch_rows,
        ),
        record(
            "incremental_embed_batches_per_second",
            [summary["batches_committed"] / seconds for seconds in incremental_seconds],
            "batches/s",
            batch_rows=batch_rows,
        ),
    ]


def _as_dask_labels(y: np.ndarray, chunks: tuple) -> object:
    import dask.array as da

    return da.from_array(y, chunks=(chunks,))


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
        repeats=repetitions(ctx),
    )  # fmt: skip
