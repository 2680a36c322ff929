"""``imgscale bench ridge``: streamed ridge over the ρ grid vs scikit-learn in memory, same run.

Ours: one pass over the store's train rows for the statistics, one eigendecomposition for the
whole grid, one pass over the validation rows to choose ρ. The peer: scikit-learn's
``RidgeClassifier`` fitted in memory once per ρ and scored on the same validation rows, in a
child process (so its peak RSS is its own) under an address-space cap so that running out of
memory is a reported result rather than a dead machine. If the peer fails at full size it is
run on a tenth of the rows and its time scaled by ten (ridge's cost is linear in rows), and the
record says so. Ours and the peer run in turn, as many rounds as the scale's repetitions, on the
store built once; each figure is the median of its rounds, each ratio the median of the rounds'.
"""

from __future__ import annotations

import time

from imgscale.bench.common import (
    STORE_BUILT_ONCE,
    PeakRSS,
    interleaved,
    mixture_in_memory,
    peer_note,
    record,
    repetitions,
    run_peer,
    sklearn_ridge_grid,
    timed_mixture_store,
)
from imgscale.bench.registry import Context, benchmark
from imgscale.jobs.cluster import connect
from imgscale.pipeline.classify import RidgeClassifier

PEER_MEMORY_CAP = 20 * 2**30


def run(
    rows: int,
    dim: int,
    classes: int,
    *,
    workdir: str | None = None,
    scheduler: str | None = None,
    peer: bool = True,
    repeats: int = 3,
) -> list[dict]:
    """Measure ours and (unless ``peer`` is false) scikit-learn's in turn, ``repeats`` rounds on
    the same store; return benchmark records."""
    store, build_seconds = timed_mixture_store(workdir, rows, dim, classes)

    with connect(scheduler):

        def ours() -> tuple[float, float, RidgeClassifier]:
            with PeakRSS() as rss:
                started = time.perf_counter()
                # ρ by the validation rows' per-class rate, which `ours_rate` reports, as the
                # peer's is.
                model = RidgeClassifier(rho_criterion="rate").fit(
                    store.features("train"),
                    store.labels("train"),
                    X_val=store.features("val"),
                    y_val=store.labels("val"),
                )
                seconds = time.perf_counter() - started
            return seconds, rss.peak, model

        rho_grid = list(RidgeClassifier().rho_grid)  # ours' grid, the default

        def theirs() -> dict:
            return run_peer(_peer_fit, rows, dim, classes, rho_grid, memory_cap=PEER_MEMORY_CAP)

        ours_runs, *peer_runs = interleaved(*((ours, theirs) if peer else (ours,)), repeats=repeats)
    ours_seconds = [seconds for seconds, _, _ in ours_runs]
    model = ours_runs[-1][2]
    ours_rate = float(model.rho_scores_.max())
    peer_runs = peer_runs[0] if peer_runs else []
    peer_result = peer_runs[-1] if peer_runs else None
    records = [
        record(
            "synthetic store build",
            build_seconds,
            "s",
            rows=rows,
            dim=dim,
            classes=classes,
            why_once=STORE_BUILT_ONCE,
        ),
        record(
            "ridge fit, 8-value rho grid, wall",
            ours_seconds,
            "s",
            [r["seconds"] for r in peer_runs] or None,
            peer="sklearn RidgeClassifier per rho" + peer_note(peer_result),
        ),
        record(
            "ridge fit peak RSS (client + workers)",
            [peak / 2**30 for _, peak, _ in ours_runs],
            "GiB",
            [r["peak_rss"] / 2**30 for r in peer_runs] or None,
            peer="sklearn RidgeClassifier" + peer_note(peer_result),
        ),
        record("ridge fit throughput", [rows / seconds for seconds in ours_seconds], "rows/s"),
        record(
            "validation per-class rate at chosen rho",
            ours_rate,
            "fraction",
            peer_result and peer_result["rate"],
            rho=float(model.rho_),
        ),
    ]
    if peer_result and peer_result.get("full_size_error"):
        records.append(
            record("sklearn at full size", 0.0, "failed", error=peer_result["full_size_error"])
        )
    return records


def _peer_fit(rows: int, dim: int, classes: int, rho_grid: list[float]) -> dict:
    """Child: regenerate the store's rows in memory and fit sklearn once per ρ."""
    X, y, val = mixture_in_memory(rows, dim, classes)
    seconds, best = sklearn_ridge_grid(X[~val], y[~val], X[val], y[val], rho_grid)
    return {"seconds": seconds, "rate": best}


@benchmark(
    "ridge",
    "streamed ridge over the 8-value rho grid from a store vs scikit-learn RidgeClassifier "
    "per rho in memory",
)
def suite(ctx: Context) -> list[dict]:
    rows, dim, classes = ctx.pick(
        tiny=(4_000, 32, 10),
        small=(200_000, 512, 100),
        medium=(1_000_000, 512, 1000),
        large=(1_000_000, 512, 1000),
    )
    return run(
        rows,
        dim,
        classes,
        workdir=ctx.scratch("ridge"),
        scheduler=ctx.scheduler,
        repeats=repetitions(ctx),
    )
