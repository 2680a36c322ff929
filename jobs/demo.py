"""``imgscale demo``: sklearn's bundled digits through the whole system, timed step by step."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits

from imgscale.jobs import models
from imgscale.jobs.cluster import connect
from imgscale.jobs.evaluate import evaluate
from imgscale.jobs.ingest import ingest_file
from imgscale.jobs.train import train
from imgscale.storage import open_store

# Paper 000 §4.1: a random 60% / 20% / 20% train / validation / test split.
SPLIT_FRACTIONS = {"train": 0.6, "val": 0.2, "test": 0.2}
SEED = 0


def run_demo(workdir: str | None = None, scheduler: str | None = None) -> str:
    """Ingest digits as three .npz files, train ridge and NCM, evaluate; return a report."""
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="imgscale-demo-"))
        root = Path(workdir)
        root.mkdir(parents=True, exist_ok=True)
        timings: list[tuple[str, float]] = []

        @contextlib.contextmanager
        def step(name: str):
            started = time.perf_counter()
            yield
            timings.append((name, time.perf_counter() - started))

        store_path = root / "digits.zarr"
        with step("write digits as .npz (train/val/test)"):
            sources = _write_digit_splits(root)
        with step("ingest into a zarr feature store"):
            for split, source in sources.items():
                ingest_file(source, store_path, y_key="y", split=split, batch_id=split)
        store = open_store(store_path)
        results = {}
        with step("start the Dask cluster"):
            client = stack.enter_context(connect(scheduler))
        for method in ("ridge", "ncm"):
            with step(f"train {method}"):
                model = train(store, method)
            with step(f"save and reload {method} (zarr + JSON)"):
                model_path = root / f"{method}.model"
                shutil.rmtree(model_path, ignore_errors=True)
                models.save(model, model_path, store=str(store_path))
                model, _ = models.load(model_path)
            with step(f"evaluate {method} on the test split"):
                results[method] = evaluate(model, store, "test")
        workers = len(client.scheduler_info(n_workers=-1)["workers"])
        return _report(store.info(), results, timings, workers)


def _write_digit_splits(root: Path) -> dict[str, Path]:
    digits = load_digits()
    order = np.random.default_rng(SEED).permutation(len(digits.target))
    bounds = np.cumsum([int(f * len(order)) for f in SPLIT_FRACTIONS.values()])[:-1]
    sources = {}
    for split, rows in zip(SPLIT_FRACTIONS, np.split(order, bounds), strict=True):
        sources[split] = root / f"digits-{split}.npz"
        X = digits.data[rows].astype(np.float32)
        np.savez_compressed(sources[split], X=X, y=digits.target[rows].astype(np.int32))
    return sources


def _report(info: dict, results: dict, timings: list, workers: int) -> str:
    lines = [
        f"store: {info['rows']} rows × {info['dim']} ({info['encoding']}), "
        f"{len(info['classes'])} classes, {info['bytes_on_disk'] / 1024:.0f} KiB on disk",
        f"cluster: {workers} Dask workers",
        "",
        "| method | per-class rate | top-1 error | top-5 error | MiAP | test rows |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for method, r in results.items():
        lines.append(
            f"| {method} | {r['per_class_rate']:.4f} | {r['top1_error']:.4f} | "
            f"{r['top5_error']:.4f} | {r['miap']:.4f} | {r['rows']} |"
        )
    lines += ["", "| step | seconds |", "|---|---:|"]
    lines += [f"| {name} | {seconds:.2f} |" for name, seconds in timings]
    return "\n".join(lines)
