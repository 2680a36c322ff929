"""``imgscale bench ridge``: streamed ridge over the ρ grid vs scikit-learn in memory, same run.

Ours: one pass over the store's train rows for the statistics, one eigendecomposition for the
whole grid, one pass over the validation rows to choose ρ. The peer: scikit-learn's
``RidgeClassifier`` fitted in memory once per ρ and scored on the same validation rows, in a
child process (so its peak RSS is its own) under an address-space cap so that running out of
memory is a reported result rather than a dead machine. If the peer fails at full size it is
run on a tenth of the rows and its time scaled by ten (ridge's cost is linear in rows), and the
record says so.
"""

from __future__ import annotations

import multiprocessing
import queue as queue_module
import resource
import tempfile
import time
from pathlib import Path

import numpy as np

from jobs.bench.common import PeakRSS, mixture_blocks, mixture_store, record
from jobs.cluster import connect
from pipeline.classify import RidgeClassifier
from pipeline.metrics import per_class_rate

PEER_MEMORY_CAP = 20 * 2**30


def run(
    rows: int,
    dim: int,
    classes: int,
    *,
    workdir: str | None = None,
    scheduler: str | None = None,
    peer: bool = True,
) -> list[dict]:
    """Measure ours and (unless ``peer`` is false) scikit-learn's; return benchmark records."""
    workdir = Path(workdir or tempfile.mkdtemp(prefix="imgscale-bench-"))
    started = time.perf_counter()
    store = mixture_store(workdir / f"mixture-{rows}x{dim}-{classes}.zarr", rows, dim, classes)
    build_seconds = time.perf_counter() - started

    with connect(scheduler), PeakRSS() as rss:
        started = time.perf_counter()
        model = RidgeClassifier().fit(
            store.features("train"),
            store.labels("train"),
            X_val=store.features("val"),
            y_val=store.labels("val"),
        )
        ours_seconds = time.perf_counter() - started
    ours_rate = float(model.rho_scores_.max())

    peer_result = _run_peer(rows, dim, classes, model.rho_grid) if peer else None
    records = [
        record("synthetic store build", build_seconds, "s", rows=rows, dim=dim, classes=classes),
        record(
            "ridge fit, 8-value rho grid, wall",
            ours_seconds,
            "s",
            peer_result and peer_result["seconds"],
            peer="sklearn RidgeClassifier per rho" + _scaled_note(peer_result),
        ),
        record(
            "ridge fit peak RSS (client + workers)",
            rss.peak / 2**30,
            "GiB",
            peer_result and peer_result["peak_rss"] / 2**30,
            peer="sklearn RidgeClassifier" + _scaled_note(peer_result),
        ),
        record("ridge fit throughput", rows / ours_seconds, "rows/s"),
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


def _scaled_note(peer_result: dict | None) -> str:
    if peer_result and peer_result["scale"] != 1:
        return f" (failed at full size; ran on 1/{peer_result['scale']} of rows, time ×scaled)"
    return ""


def _run_peer(rows: int, dim: int, classes: int, rho_grid) -> dict:
    result = _in_child(rows, dim, classes, rho_grid)
    if "error" not in result:
        return {**result, "scale": 1}
    small = _in_child(rows // 10, dim, classes, rho_grid)
    if "error" in small:
        raise RuntimeError(f"scikit-learn failed even on {rows // 10} rows: {small['error']}")
    return {
        **small,
        "seconds": small["seconds"] * 10,
        "scale": 10,
        "full_size_error": result["error"],
    }


def _in_child(rows: int, dim: int, classes: int, rho_grid) -> dict:
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_peer_fit, args=(queue, rows, dim, classes, list(rho_grid)))
    child.start()
    child.join()
    try:
        return queue.get(timeout=10)
    except queue_module.Empty:
        return {"error": f"child exited with code {child.exitcode}"}


def _peer_fit(queue, rows: int, dim: int, classes: int, rho_grid: list[float]) -> None:
    """Child process: regenerate the store's rows in memory and fit sklearn once per ρ."""
    from sklearn.linear_model import RidgeClassifier as SklearnRidge

    resource.setrlimit(resource.RLIMIT_AS, (PEER_MEMORY_CAP, PEER_MEMORY_CAP))
    try:
        blocks = list(mixture_blocks(rows, dim, classes))
        X = np.concatenate([b[0] for b in blocks])
        y = np.concatenate([b[1] for b in blocks])
        val = np.concatenate([np.arange(len(b[1])) < 0.2 * len(b[1]) for b in blocks])
        del blocks
        seconds, best = 0.0, 0.0
        for rho in rho_grid:
            started = time.perf_counter()
            model = SklearnRidge(alpha=rho).fit(X[~val], y[~val])
            predicted = model.predict(X[val])
            seconds += time.perf_counter() - started
            best = max(best, per_class_rate(y[val], predicted))
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        queue.put({"seconds": seconds, "peak_rss": peak, "rate": best})
    except MemoryError as exc:
        queue.put({"error": f"MemoryError under a {PEER_MEMORY_CAP / 2**30:.0f} GiB cap: {exc}"})
