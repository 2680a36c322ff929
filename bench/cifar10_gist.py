"""``imgscale bench cifar10-gist``: paper 000 on CIFAR-10 JPEGs through the command line — GIST
computed by `imgscale ingest`, then linear, RFF-4000 and Nyström ridge by labelled images a class
(`imgscale train --per-class`), per-class rate on the 10,000 test images beside the data
README's reference figures (a plain numpy 320-D GIST and scikit-learn on the same files), with
the wall time of every command.

Protocol (paper 000 §4.1, on ``cifar10/train.parquet`` and ``test.parquet`` of the data folder):

- **splits**: the train parquet's rows are in a fixed shuffled order; its first 45,000 rows are
  ingested as split ``train`` and its last 5,000 (about 500 a class) as split ``val``, which
  chooses ρ on paper 000's grid (`RidgeClassifier`). The 10,000 test images are split ``test``.
  Each split is written to its own parquet file and ingested by its own command.
- **labelled images**: ``--per-class N --seed S`` keeps N labelled rows a class of ``train``
  (nested across N for one seed); the other train rows stay in as unlabelled rows, which the
  embedding is fitted on and the rows are centred on (§3.3, §4.1). Each size is trained on
  three samples (seeds 0, 1, 2; one at tiny scale): the figure is their mean, the record keeps
  their spread and the ρ each chose. The largest size is every train row,
  4,456–4,527 a class, beside the reference's 5,000 a class (all 50,000 train images): the
  5,000 validation images are not trained on.
- **embeddings**: RFF with 4,000 dimensions (as the reference) and Nyström with 500
  eigenvectors of 1,000 landmarks (paper 000 §4.1 for 100+ labels a class), both with the
  Gaussian bandwidth set to the mean distance to the 50th neighbour (the default).
- **descriptors**: ``gist-tiny`` (320-D, LMgist on the 32×32 grey images: the reference's
  setting) at every scale; at medium and large also ``gist-tiny,color`` (320-D GIST + a
  128-bin HSV histogram), and at large ``gist`` (512-D, LMgist's defaults at a 128×128 working
  size, upsampled: sixteen times the pixels of gist-tiny, so its ingest is the long step).
- **commands**: every step is an ``imgscale`` command run as its own process, on the suite's
  Dask cluster (``--scheduler``); the wall time of each process is a figure. A store is built
  afresh on every run, so its ingest times are those of a first ingest.

Tiny scale runs the same commands on 1,500 train, 500 validation and 1,000 test images (every
tenth test image) with RFF-500 and Nyström-50, at 10 and 30 labelled images a class.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from imgscale.bench.common import record
from imgscale.bench.registry import Context, benchmark
from imgscale.jobs import models

TRAIN_FILE = "cifar10/train.parquet"
TEST_FILE = "cifar10/test.parquet"
VAL_ROWS = 5_000
REFERENCE = "data README reference (numpy GIST-320 + scikit-learn)"
# The data README's reference figures: per-class rate by method and labelled images a class
# (its largest size, 5,000 a class, is all 50,000 train images; ours is every train row).
REFERENCE_RATES = {
    ("linear", 100): 0.379,
    ("linear", 1000): 0.534,
    ("linear", "all"): 0.549,
    ("RFF-4000", 100): 0.506,
    ("RFF-4000", 1000): 0.604,
    ("RFF-4000", "all"): 0.636,
}


def _methods(rff_dim: int, nystrom_dim: int) -> dict[str, list[str]]:
    """Method label → the `imgscale train` options that make it."""
    return {
        "linear": [],
        f"RFF-{rff_dim}": ["--embedding", "rff", "--n-components", str(rff_dim)],
        f"Nystrom-{nystrom_dim}": ["--embedding", "nystrom", "--n-components", str(nystrom_dim)],
    }


@benchmark(
    "cifar10-gist",
    "paper 000 on CIFAR-10 JPEGs through the CLI: GIST by imgscale ingest, linear, RFF-4000 and "
    "Nystrom ridge at 100, 1,000 and all labelled images a class vs the data README's reference",
    needs=(TRAIN_FILE, TEST_FILE),
    kind="accuracy",
)
def suite(ctx: Context) -> list[dict]:
    train_file, test_file = ctx.data(TRAIN_FILE), ctx.data(TEST_FILE)
    descriptors, per_class, (rff_dim, nystrom_dim), sizes = ctx.pick(
        tiny=(("gist-tiny",), (10, 30), (500, 50), (1_500, 500, 1_000)),
        small=(("gist-tiny",), (100, 1000), (4000, 500), None),
        medium=(("gist-tiny", "gist-tiny,color"), (100, 1000), (4000, 500), None),
        large=(("gist-tiny", "gist-tiny,color", "gist"), (100, 1000), (4000, 500), None),
    )
    trials = ctx.pick(tiny=1, small=3, medium=3, large=3)
    scratch = ctx.scratch("cifar10-gist")
    splits = write_splits(train_file, test_file, scratch, sizes)
    run = _Runner(ctx)
    out = []
    for features in descriptors:
        store = scratch / f"cifar10-{features.replace(',', '+')}.zarr"
        shutil.rmtree(store, ignore_errors=True)
        for split in ("train", "val", "test"):
            summary, seconds = run.json(
                "ingest", splits[split], store, "--features", features, "--split", split
            )
            ctx.log(f"{features} ingest {split}: {summary['rows']} images, {seconds:.1f} s")
            out.append(
                record(
                    f"{features} ingest {split} ({summary['rows']} images), wall", seconds, "s",
                    images_per_second=summary["rows"] / seconds, features=features,
                    dim=summary["dim"],
                )
            )  # fmt: skip
        for method, options in _methods(rff_dim, nystrom_dim).items():
            for n in (*per_class, "all"):
                # The reference was measured on the whole set with gist-tiny's setting.
                comparable = features == "gist-tiny" and sizes is None
                reference = REFERENCE_RATES.get((method, n)) if comparable else None
                seeds = range(trials) if n != "all" else range(1)
                out += _train_and_score(run, store, method, options, n, seeds, reference)
    return out


def _train_and_score(
    run: _Runner,
    store: Path,
    method: str,
    options: list[str],
    n: int | str,
    seeds: range,
    reference: float | None,
) -> list[dict]:
    """Train ``method`` on ``n`` labelled rows a class (``"all"``: every train row), once per
    seed of the labelled sample; the mean test per-class rate and the mean train wall time."""
    features = store.stem.removeprefix("cifar10-")
    rates, seconds, rhos = [], [], []
    for seed in seeds:
        model = store.parent / f"{store.stem}-{method}-{n}-{seed}.model"
        shutil.rmtree(model, ignore_errors=True)
        sample = [] if n == "all" else ["--per-class", str(n), "--seed", str(seed)]
        seconds.append(run.plain("train", store, model, "--method", "ridge", *options, *sample))
        rhos.append(_rho(model))
        scores, _ = run.json("evaluate", model, store, "--split", "test")
        rates.append(scores["per_class_rate"])
        shutil.rmtree(model, ignore_errors=True)
    label = f"{n} labelled/class" if n != "all" else "all train rows labelled"
    rate = float(np.mean(rates))
    run.ctx.log(
        f"{features} {method} {label}: per-class rate {rate:.4f} over {len(rates)} samples "
        f"{[round(r, 4) for r in rates]} (rho {rhos}, train {np.mean(seconds):.1f} s)"
        + (f", reference {reference}" if reference else "")
    )
    common = {"features": features, "method": method, "labelled_per_class": str(n)}
    spread = {"trials": len(rates), "std": float(np.std(rates)), "min": min(rates),
              "max": max(rates), "rho": ", ".join(f"{r:g}" for r in rhos)}  # fmt: skip
    extra = {"peer": REFERENCE} if reference else {}
    return [
        record(
            f"{features} {method} {label}",
            rate,
            "per-class rate",
            reference,
            **common,
            **spread,
            **extra,
        ),
        record(
            f"{features} {method} {label}: train, wall",
            float(np.mean(seconds)),
            "s",
            **common,
            min_s=min(seconds),
            max_s=max(seconds),
        ),
    ]


def write_splits(
    train_file: Path, test_file: Path, folder: Path, sizes: tuple[int, int, int] | None
) -> dict[str, Path]:
    """The train, val and test parquet files of the protocol, written into ``folder``.

    ``train`` is the train parquet's first rows and ``val`` its last `VAL_ROWS` (its order is a
    fixed shuffle); with ``sizes`` (train, val, test rows; tiny scale), fewer train and val rows
    and every k-th test row, as the test parquet is sorted by class.
    """
    import pyarrow.parquet as pq

    train = pq.read_table(train_file)
    test = pq.read_table(test_file)
    n_val = VAL_ROWS if sizes is None else sizes[1]
    n_train = train.num_rows - n_val if sizes is None else sizes[0]
    tables = {
        "train": train.slice(0, n_train),
        "val": train.slice(train.num_rows - n_val, n_val),
        "test": test
        if sizes is None
        else test.take(list(range(0, test.num_rows, test.num_rows // sizes[2]))),
    }
    paths = {}
    for split, table in tables.items():
        paths[split] = folder / f"{split}.parquet"
        pq.write_table(table, paths[split], row_group_size=2048)
    return paths


def _rho(model: Path) -> float:
    fitted, _ = models.load(model)
    classifier = fitted.steps[-1][1] if hasattr(fitted, "steps") else fitted
    return float(classifier.rho_)


class _Runner:
    """Runs ``imgscale`` commands as processes on the benchmark's cluster; times each one."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1"}

    def _run(self, *args) -> tuple[str, float]:
        command = ["imgscale", *map(str, args)]
        self.ctx.log("$ " + " ".join(command))
        if self.ctx.scheduler:
            command += ["--scheduler", self.ctx.scheduler]
        started = time.perf_counter()
        result = subprocess.run(
            [sys.executable, "-m", "imgscale", *command[1:]],
            capture_output=True,
            text=True,
            env=self.env,
        )
        seconds = time.perf_counter() - started
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(command)}: {result.stderr.strip()[-500:]}")
        return result.stdout, seconds

    def plain(self, *args) -> float:
        """Wall seconds of ``imgscale ARGS``."""
        return self._run(*args)[1]

    def json(self, *args) -> tuple[dict, float]:
        """The JSON object ``imgscale ARGS --json`` prints, and its wall seconds."""
        stdout, seconds = self._run(*args, "--json")
        return json.loads(stdout), seconds
