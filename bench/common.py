"""What every benchmark needs: synthetic stores, peak-RSS sampling and result records."""

from __future__ import annotations

import multiprocessing
import os
import queue as queue_module
import resource
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import psutil

from imgscale.storage import FeatureStore, create_store, open_store

if TYPE_CHECKING:
    from imgscale.bench.registry import Context

BLOCK_ROWS = 65_536
VAL_FRACTION = 0.2
CENTRE_SCALE = 0.15
T = TypeVar("T")
# A record's ``why_once`` for the seconds a benchmark's store took to build: it is built once and
# every repetition of the measured passes reuses it.
STORE_BUILT_ONCE = "the store is built once; every repetition reuses it"


def record(
    name: str,
    value: float | Sequence[float],
    unit: str,
    peer_value: float | Sequence[float] | None = None,
    **extra,
) -> dict:
    """One measured figure, from one measurement or from a sequence of repetitions.

    ``value`` is the median of the repetitions, ``value_min`` and ``value_max`` their extremes,
    ``repeats`` their count. With a peer, ``peer_value`` is the median of the peer's repetitions
    and ``ratio`` the median of the per-pair ratios ours_i / peer_i (the i-th repetitions of
    both, measured in turn as :func:`interleaved` does, so a load spike hits both), with
    ``ratio_min`` and ``ratio_max``. A single measurement on either side stands against every
    repetition of the other (a machine limit measured once, a figure measured once). A figure
    measured once carries ``repeats = 1`` and its extremes equal to its value.
    """
    ours = _repetitions(value, "value")
    out = {"name": name, "unit": unit, **_spread(ours, "value"), "repeats": len(ours), **extra}
    if peer_value is not None:
        theirs = _repetitions(peer_value, "peer_value")
        if len(ours) != len(theirs) and 1 not in (len(ours), len(theirs)):
            raise ValueError(
                f"{name}: {len(ours)} repetitions of ours against {len(theirs)} of the peer's; "
                "repetitions pair one to one"
            )
        pairs = max(len(ours), len(theirs))
        ours_paired, theirs_paired = ours * (pairs // len(ours)), theirs * (pairs // len(theirs))
        ratios = [
            o / t if t else float("inf") for o, t in zip(ours_paired, theirs_paired, strict=True)
        ]
        out["peer_value"] = statistics.median(theirs)
        out |= _spread(ratios, "ratio")
    return out


def _repetitions(value: float | Sequence[float], what: str) -> list[float]:
    values = [float(value)] if np.ndim(value) == 0 else [float(v) for v in value]
    if not values:
        raise ValueError(f"no repetitions of {what}")
    return values


def _spread(values: list[float], key: str) -> dict[str, float]:
    """``key``: the median of ``values``; ``key_min``, ``key_max``: their extremes."""
    return {key: statistics.median(values), f"{key}_min": min(values), f"{key}_max": max(values)}


def repetitions(ctx: Context) -> int:
    """How many times a benchmark repeats each speed measurement: the context's ``repeats``,
    which a suite sets from the scale (:data:`imgscale.bench.registry.REPEATS`)."""
    return ctx.repeats


def interleaved(*measures: Callable[[], T], repeats: int) -> list[list[T]]:
    """Run ``measures[0]``, ``measures[1]``, … in turn, ``repeats`` rounds; one list per measure.

    Ours and its peer measured in the same round see the same load, so the ratio of the i-th
    results (:func:`record` with both lists) is fair even when the machine is not quiet.
    """
    results: list[list[T]] = [[] for _ in measures]
    for _ in range(repeats):
        for out, measure in zip(results, measures, strict=True):
            out.append(measure())
    return results


def mixture_blocks(
    rows: int, dim: int, classes: int, *, seed: int = 0, block_rows: int = BLOCK_ROWS
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Gaussian-mixture rows (one unit-variance cluster per class), generated block by block.

    Deterministic in ``seed`` so a peer can regenerate exactly the rows the store holds.
    """
    rng = np.random.default_rng(seed)
    # Centres this close overlap (≈ 3.4 noise units apart at D = 512), so accuracy is not 100%.
    centres = CENTRE_SCALE * rng.standard_normal((classes, dim), dtype=np.float32)
    for start in range(0, rows, block_rows):
        n = min(block_rows, rows - start)
        labels = rng.integers(0, classes, n).astype(np.int32)
        X = rng.standard_normal((n, dim), dtype=np.float32)
        X += centres[labels]
        yield X, labels


def mixture_store(
    path: str | os.PathLike,
    rows: int,
    dim: int,
    classes: int,
    *,
    val_fraction: float = VAL_FRACTION,
) -> FeatureStore:
    """The synthetic store for ``rows × dim`` with ``classes`` classes, reused if already built.

    Built in a child process: what writing 10⁷ rows leaves in a heap (every row's id, freed but
    kept by the allocator) must not be counted in the peak RSS of the fits measured here.
    """
    path = Path(path)
    if not path.exists():
        context = multiprocessing.get_context("spawn")
        with context.Pool(1) as pool:
            pool.apply(_build_mixture_store, (str(path), rows, dim, classes, val_fraction))
    store = open_store(path)
    if store.committed_rows != rows or store.dim != dim:
        raise FileExistsError(f"{path} holds another benchmark store; remove it first")
    return store


def _build_mixture_store(path: str, rows: int, dim: int, classes: int, val_fraction: float) -> None:
    store = create_store(path, dim, class_names=[f"class{c}" for c in range(classes)])
    with store.writer("synthetic") as writer:
        for X, labels in mixture_blocks(rows, dim, classes):
            split = np.where(np.arange(len(labels)) < val_fraction * len(labels), "val", "train")
            writer.write(X, labels, split=split)


def timed_mixture_store(
    workdir: str | os.PathLike | None, rows: int, dim: int, classes: int
) -> tuple[FeatureStore, float]:
    """The benchmark store in ``workdir`` (default: a new temp dir) and seconds to build it."""
    workdir = Path(workdir or tempfile.mkdtemp(prefix="imgscale-bench-"))
    started = time.perf_counter()
    store = mixture_store(workdir / f"mixture-{rows}x{dim}-{classes}.zarr", rows, dim, classes)
    return store, time.perf_counter() - started


_RELIST_SECONDS = 1.0


class PeakRSS:
    """Sample the summed RSS of this process and all its descendants (e.g. Dask workers).

    `peak` is the largest sum seen; `at_peak` is how it split at that moment (bytes by process:
    "client" for this process, which also runs a LocalCluster's scheduler, then each descendant
    by pid), so a benchmark can say where the memory went; `each_peak` is each process's own
    largest RSS, whenever it came.
    """

    def __init__(self, interval: float = 0.05):
        self.interval = interval
        self.peak = 0
        self.at_peak: dict[str, int] = {}
        self.each_peak: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def split_gib(self) -> dict[str, float]:
        """`at_peak` in GiB, rounded to 3 decimals (for a benchmark record)."""
        return {name: round(rss / 2**30, 3) for name, rss in self.at_peak.items()}

    def _run(self) -> None:
        # Listing the descendants walks /proc (~2–4 ms, holding the GIL of the process that also
        # runs the scheduler), so the list is refreshed once a second, not at every sample.
        me = psutil.Process()
        processes, listed = [], -float("inf")
        while not self._stop.is_set():
            if time.monotonic() - listed > _RELIST_SECONDS:
                processes, listed = [me, *me.children(recursive=True)], time.monotonic()
            split = {}
            for process in processes:
                try:
                    rss = process.memory_info().rss
                except psutil.Error:
                    continue
                split["client" if process.pid == me.pid else f"pid {process.pid}"] = rss
            total = sum(split.values())
            for name, rss in split.items():
                self.each_peak[name] = max(rss, self.each_peak.get(name, 0))
            if total > self.peak:
                self.peak, self.at_peak = total, split
            time.sleep(self.interval)


def run_peer(fit: Callable[..., dict], rows: int, *args, memory_cap: int) -> dict:
    """``fit(rows, *args)`` in a spawned child, so its peak RSS is its own, under an address-space
    cap, so that running out of memory is a reported result rather than a dead machine.

    If the peer fails at full size it runs on a tenth of the rows and its time is scaled by ten
    (the peers' cost is linear in rows); ``scale`` and ``full_size_error`` say so.
    """
    result = _in_child(fit, rows, args, memory_cap)
    if "error" not in result:
        return {**result, "scale": 1}
    small = _in_child(fit, rows // 10, args, memory_cap)
    if "error" in small:
        raise RuntimeError(f"the peer failed even on {rows // 10} rows: {small['error']}")
    return {
        **small,
        "seconds": small["seconds"] * 10,
        "scale": 10,
        "full_size_error": result["error"],
    }


def peer_note(peer_result: dict | None) -> str:
    """What a record's ``peer`` text adds when the peer ran on fewer rows."""
    if peer_result and peer_result["scale"] != 1:
        return f" (failed at full size; ran on 1/{peer_result['scale']} of rows, time ×scaled)"
    return ""


def _in_child(fit: Callable[..., dict], rows: int, args: tuple, memory_cap: int) -> dict:
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_capped, args=(queue, fit, memory_cap, rows, *args))
    child.start()
    child.join()
    try:
        return queue.get(timeout=10)
    except queue_module.Empty:
        return {"error": f"child exited with code {child.exitcode}"}


def _capped(queue, fit: Callable[..., dict], memory_cap: int, rows: int, *args) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (memory_cap, memory_cap))
    try:
        result = fit(rows, *args)
        result["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        queue.put(result)
    except MemoryError as exc:
        queue.put({"error": f"MemoryError under a {memory_cap / 2**30:.0f} GiB cap: {exc}"})


def mixture_in_memory(
    rows: int, dim: int, classes: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows of :func:`mixture_store` in memory: features, labels and the validation mask."""
    blocks = list(mixture_blocks(rows, dim, classes))
    X = np.concatenate([b[0] for b in blocks])
    y = np.concatenate([b[1] for b in blocks])
    val = np.concatenate([np.arange(len(b[1])) < VAL_FRACTION * len(b[1]) for b in blocks])
    return X, y, val


def sklearn_ridge_grid(X_train, y_train, X_val, y_val, rho_grid) -> tuple[float, float]:
    """The peer's ρ sweep: scikit-learn's RidgeClassifier fitted once per ρ; returns the seconds
    spent fitting and predicting and the best validation per-class rate."""
    from sklearn.linear_model import RidgeClassifier as SklearnRidge

    from imgscale.pipeline.metrics import per_class_rate

    seconds, best = 0.0, 0.0
    for rho in rho_grid:
        started = time.perf_counter()
        predicted = SklearnRidge(alpha=rho).fit(X_train, y_train).predict(X_val)
        seconds += time.perf_counter() - started
        best = max(best, per_class_rate(y_val, predicted))
    return seconds, best
