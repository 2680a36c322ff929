"""Fixed cost of an `imgscale` command, and a whole NCM pass beside a plain numpy process.

Every figure is a whole process timed from spawn to exit, beside a peer measured in the same
run, runs of the two alternated after an untimed one of each (the median of the scale's
repetitions, at least 5 above small; the record gives the spread and the median of the ratios
of the runs paired):

- ``imgscale --help`` and ``imgscale info STORE`` (a 5,000-row store) beside a bare interpreter
  (``python -c pass``): what a command pays before it does anything;
- ``imgscale train STORE MODEL --method ncm`` on the 5,000 rows beside its compute (the same
  class means fitted on the rows in memory in a warm process): the difference is the command's
  overhead (target ≤ 1.5 s);
- the two kinds of LocalCluster `jobs.cluster.connect` chooses between, started, used for the
  same 5,000-row pass and stopped in this process: threads in this process (stores up to
  ``THREADED_MAX_BYTES``) beside one worker process per core;
- ``imgscale train --method ncm`` over a store of ``rows`` × 512 (4 MiB tiny, 1 GiB small,
  6 GiB medium and large) beside a plain numpy process summing the same classes over the same
  chunk files by a one-hot matrix product (``bench/class_sums_peer.py``; target ≤ 3×), the two
  processes' class sums checked equal. The page cache is warm for both (an untimed run of each
  first).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from imgscale.bench.common import mixture_store, record, repetitions
from imgscale.bench.registry import Context, benchmark
from imgscale.jobs import models
from imgscale.jobs.cluster import THREADED_MAX_BYTES, connect
from imgscale.pipeline.classify import NearestClassMean
from imgscale.storage.layout import FEATURES

SMALL_ROWS = 5_000
DIM = 512
OVERHEAD_TARGET_S = 1.5
RATIO_TARGET = 3.0
# Class sums of the same float32 rows in different orders and precisions (float32 within a
# chunk in the peer) agree to well within this.
SUMS_RTOL = 1e-5


def _alternate(runs: dict[str, Callable[[], None]], repeats: int) -> dict[str, list[float]]:
    """Each callable's wall seconds, ``repeats`` times, alternated after one untimed warm-up."""
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    for run_once in runs.values():
        run_once()
    for _ in range(repeats):
        for name, run_once in runs.items():
            started = time.perf_counter()
            run_once()
            seconds[name].append(time.perf_counter() - started)
    return seconds


def _process(*args: str | os.PathLike, env: dict[str, str]) -> Callable[[], str]:
    """A callable running ``python ARGS`` to completion; returns its stdout, raises on failure."""

    def run_once() -> str:
        result = subprocess.run(
            [sys.executable, *map(str, args)], capture_output=True, text=True, env=env
        )
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(map(str, args))}: {result.stderr.strip()[-500:]}")
        return result.stdout

    return run_once


def _train_ncm(store, model: Path, env: dict[str, str]) -> Callable[[], None]:
    """A callable running ``imgscale train STORE MODEL --method ncm`` (MODEL removed first)."""
    train = _process("-m", "imgscale", "train", store.path, model, "--method", "ncm", env=env)

    def run_once() -> None:
        shutil.rmtree(model, ignore_errors=True)
        train()

    return run_once


def _versus(name: str, ours: list[float], peer: list[float], peer_name: str, **extra) -> dict:
    """Seconds of ours beside the peer's, the i-th runs of the two paired."""
    return record(name, ours, "s", peer, peer=peer_name, **extra)


def _fixed_costs(store, scratch: Path, env: dict[str, str], repeats: int, log) -> list[dict]:
    seconds = _alternate(
        {
            "bare": _process("-c", "pass", env=env),
            "help": _process("-m", "imgscale", "--help", env=env),
            "info": _process("-m", "imgscale", "info", store.path, env=env),
            "train": _train_ncm(store, scratch / "ncm-small.model", env),
        },
        repeats,
    )
    X, y = store.features().compute(), store.labels()
    compute = _alternate({"fit": lambda: NearestClassMean().fit(X, y)}, repeats)["fit"]
    overhead = statistics.median(seconds["train"]) - statistics.median(compute)
    log(
        f"--help {statistics.median(seconds['help']):.2f} s, info "
        f"{statistics.median(seconds['info']):.2f} s, train ncm "
        f"{statistics.median(seconds['train']):.2f} s (overhead {overhead:.2f} s)"
    )
    interpreter = "bare interpreter, python -c pass (same run)"
    return [
        _versus("imgscale --help, wall", seconds["help"], seconds["bare"], interpreter),
        _versus(
            f"imgscale info, {SMALL_ROWS}-row store, wall", seconds["info"], seconds["bare"],
            interpreter,
        ),
        _versus(
            f"imgscale train --method ncm, {SMALL_ROWS} rows, wall", seconds["train"], compute,
            "the same NCM fit on the rows in memory, warm process (same run)",
            overhead_s=overhead, target_overhead_s=OVERHEAD_TARGET_S,
        ),
    ]  # fmt: skip


def _cluster_kinds(store, repeats: int, log) -> list[dict]:
    X, y = store.features(), store.labels()

    def threaded() -> None:
        with connect(quiet=True, data_bytes=0):
            NearestClassMean().fit(X, y)

    def processes() -> None:
        with connect(quiet=True):
            NearestClassMean().fit(X, y)

    seconds = _alternate({"threads": threaded, "processes": processes}, repeats)
    log(
        f"LocalCluster start + pass + stop: threads {statistics.median(seconds['threads']):.2f} s,"
        f" processes {statistics.median(seconds['processes']):.2f} s"
    )
    return [
        _versus(
            f"threaded LocalCluster, start + NCM pass of {SMALL_ROWS} rows + stop",
            seconds["threads"], seconds["processes"],
            "one worker process per core, the same (same run)",
        )
    ]  # fmt: skip


def _ncm_pass(store, scratch: Path, env: dict[str, str], repeats: int, log) -> list[dict]:
    labels = scratch / f"{store.path.stem}-labels.npy"
    # `train` fits on split "train": the peer's rows of other splits are unlabelled (-1).
    in_train = store.rows().column("split").to_numpy(zero_copy_only=False) == "train"
    np.save(labels, np.where(in_train, store.labels(), -1))
    classes = len(store.class_names)
    model = scratch / f"{store.path.stem}-ncm.model"
    peer = _process(
        "-m", "imgscale.bench.class_sums_peer", store.path / FEATURES, labels,
        store.rows_per_chunk, store.dim, classes, env=env,
    )  # fmt: skip
    peer_total = []
    seconds = _alternate(
        {"ours": _train_ncm(store, model, env), "numpy": lambda: peer_total.append(peer())},
        repeats,
    )
    fitted, _ = models.load(model)
    ours_total = float(fitted.class_sums_.sum())
    numpy_total = float(peer_total[-1])
    difference = abs(ours_total - numpy_total) / max(abs(numpy_total), 1.0)
    if difference > SUMS_RTOL:
        raise AssertionError(
            f"class sums differ: imgscale {ours_total!r}, numpy {numpy_total!r} "
            f"(relative {difference:.3g}; expected <= {SUMS_RTOL:g})"
        )
    gib = store.committed_rows * store.dim * 4 / 2**30
    ratio = statistics.median(seconds["ours"]) / statistics.median(seconds["numpy"])
    log(f"NCM pass over {gib:.3g} GiB: {ratio:.2f}x the numpy process")
    return [
        _versus(
            f"imgscale train --method ncm, whole process, {store.committed_rows} rows "
            f"({gib:.3g} GiB)",
            seconds["ours"], seconds["numpy"],
            "plain numpy process, the same class sums by one-hot GEMM over the same chunk files "
            "(same run)",
            gib=gib, target_ratio=RATIO_TARGET, sums_relative_difference=difference,
            cluster="threads" if gib * 2**30 <= THREADED_MAX_BYTES else "processes",
        )
    ]  # fmt: skip


@benchmark(
    "overhead",
    "fixed cost of a command (--help, info, train ncm on 5,000 rows) beside a bare interpreter "
    "and its compute; a whole NCM pass beside a plain numpy process",
)
def suite(ctx: Context) -> list[dict]:
    rows = ctx.pick(tiny=2_048, small=524_288, medium=3_145_728, large=3_145_728)
    # Whole processes vary most from run to run: 5 runs above small, however few the scale's.
    repeats = max(repetitions(ctx), ctx.pick(tiny=0, small=0, medium=5, large=5))
    scratch = ctx.scratch("overhead")
    # The commands record themselves in a ledger of their own, not the user's.
    env = {**os.environ, "IMGSCALE_LEDGER": str(scratch / "ledger.sqlite")}
    env.pop("DASK_SCHEDULER_ADDRESS", None)
    small = mixture_store(scratch / f"mixture-{SMALL_ROWS}x{DIM}.zarr", SMALL_ROWS, DIM, 10)
    records = _fixed_costs(small, scratch, env, repeats, ctx.log)
    if not ctx.external_cluster:  # a benchmark given a cluster starts none of its own
        records += _cluster_kinds(small, repeats, ctx.log)
    big = mixture_store(scratch / f"mixture-{rows}x{DIM}.zarr", rows, DIM, 100)
    records += _ncm_pass(big, scratch, env, repeats, ctx.log)
    return records
