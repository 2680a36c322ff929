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
  their spread and the ρ each chose. The largest size of this store is every train row,
  4,456–4,527 a class.
- **5,000 a class**: the reference's largest size is all 50,000 train images. At gist-tiny (the
  reference's setting) a second store holds them all as ``train`` beside the test images, with
  no validation split, so ridge chooses ρ by generalized cross-validation on its grid; that
  figure stands beside the reference's.
- **embeddings**: RFF with 4,000 dimensions (as the reference) and Nyström with 500
  eigenvectors of 1,000 landmarks (paper 000 §4.1 for 100+ labels a class), both with the
  Gaussian bandwidth set to the mean distance to the 50th neighbour (the default).
- **descriptors**: ``gist-tiny`` (320-D, LMgist on the 32×32 grey images: the reference's
  setting) at every scale; at medium and large also ``gist-tiny,color`` (320-D GIST + a
  128-bin HSV histogram), and at large ``gist`` (512-D, LMgist's defaults at a 128×128 working
  size, upsampled: sixteen times the pixels of gist-tiny, so its ingest is the long step).
- **commands**: every step is an ``imgscale`` command run as its own process, on the suite's
  Dask cluster (``--scheduler``); the wall time of each process is a figure, with the 1-minute
  load average as it started (``load_1min``; above the core count, others' work is in it). A
  store is built afresh on every run, so its ingest times are those of a first ingest.

Tiny scale runs the same commands (in the benchmark's process, not as processes of their own)
on 1,000 train and 300 validation images and every twentieth test image, with RFF-500 and
Nyström-50, at 10 labelled images a class only; without the data folder, on sklearn's digits
written as 32×32 JPEGs (1,000 / 300 / 497).
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from imgscale.bench import Context, benchmark, record
from imgscale.jobs import models

TRAIN_FILE = "cifar10/train.parquet"
TEST_FILE = "cifar10/test.parquet"
VAL_ROWS = 5_000
REFERENCE = "data README reference (numpy GIST-320 + scikit-learn)"
# The data README's reference figures: per-class rate by method and labelled images a class
# (its largest size, 5,000 a class, is all 50,000 train images).
REFERENCE_RATES = {
    ("linear", 100): 0.379,
    ("linear", 1000): 0.534,
    ("linear", 5000): 0.549,
    ("RFF-4000", 100): 0.506,
    ("RFF-4000", 1000): 0.604,
    ("RFF-4000", 5000): 0.636,
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
    needs=(f"{TRAIN_FILE}, {TEST_FILE} (small and up; tiny uses sklearn's digits without them)",),
    kind="accuracy",
)
def suite(ctx: Context) -> list[dict]:
    descriptors, per_class, (rff_dim, nystrom_dim), sizes = ctx.pick(
        tiny=(("gist-tiny",), (10,), (500, 50), (1_000, 300, 500)),
        small=(("gist-tiny",), (100, 1000), (4000, 500), None),
        medium=(("gist-tiny", "gist-tiny,color"), (100, 1000), (4000, 500), None),
        large=(("gist-tiny", "gist-tiny,color", "gist"), (100, 1000), (4000, 500), None),
    )
    trials = ctx.pick(tiny=1, small=3, medium=3, large=3)
    # Tiny is the CI run: one size, the --per-class path, keeps its commands few.
    sizes_trained = ctx.pick(tiny=per_class, small=(*per_class, "all"),
                             medium=(*per_class, "all"), large=(*per_class, "all"))  # fmt: skip
    scratch = ctx.scratch("cifar10-gist")
    splits = write_splits(*source_tables(ctx), scratch, sizes)
    run = CommandRunner(ctx)
    out = []
    for features in descriptors:
        # The reference was measured on the whole set with gist-tiny's setting.
        comparable = features == "gist-tiny" and sizes is None
        store = scratch / f"cifar10-{features.replace(',', '+')}.zarr"
        records, rows = _ingest(run, features, store, splits)
        out += records
        for method, options in _methods(rff_dim, nystrom_dim).items():
            for n in sizes_trained:
                reference = REFERENCE_RATES.get((method, n)) if comparable else None
                seeds = range(trials) if n != "all" else range(1)
                every = f"all {rows['train']:,} train rows labelled"
                out += _train_and_score(run, store, features, method, options, n, seeds,
                                        reference, every)  # fmt: skip
        if not comparable:
            continue
        # The reference's largest size is every train image, 5,000 a class: a store of all
        # 50,000 with no validation split, where ridge chooses ρ by generalized cross-validation.
        store = scratch / f"cifar10-{features}-50k.zarr"
        whole = {"train": ctx.data(TRAIN_FILE), "test": splits["test"]}
        records, rows = _ingest(run, features, store, whole, label=" (all 50,000)")
        out += records
        every = f"5000 labelled/class (all {rows['train']:,}, rho by GCV)"
        for method, options in _methods(rff_dim, nystrom_dim).items():
            reference = REFERENCE_RATES.get((method, 5000))
            out += _train_and_score(run, store, features, method, options, 5000, range(1),
                                    reference, every)  # fmt: skip
    return out


def _ingest(
    run: CommandRunner, features: str, store: Path, splits: dict[str, Path], label: str = ""
) -> tuple[list[dict], dict[str, int]]:
    """Ingest each split's parquet file into a new ``store``: a wall-time record for each, and
    the rows each split gained."""
    shutil.rmtree(store, ignore_errors=True)
    out, rows = [], {}
    for split, path in splits.items():
        summary, seconds = run.json("ingest", path, store, "--features", features, "--split", split)
        rows[split] = summary["rows"]
        run.ctx.log(f"{features} ingest {split}{label}: {summary['rows']} images, {seconds:.1f} s")
        out.append(
            record(
                f"{features} ingest {split}{label} ({summary['rows']} images), wall", seconds, "s",
                images_per_second=summary["rows"] / seconds, features=features,
                dim=summary["dim"], load_1min=run.last_load,
                why_once="the one ingest every accuracy here is measured on",
            )
        )  # fmt: skip
    return out, rows


def samples_once(seconds: list[float]) -> dict[str, str]:
    """A train time's ``why_once`` when one labelled sample was trained: the training of each
    sample is the one whose accuracy is reported, so it repeats over the samples only."""
    return {"why_once": "one labelled sample, trained once"} if len(seconds) == 1 else {}


def _train_and_score(
    run: CommandRunner,
    store: Path,
    features: str,
    method: str,
    options: list[str],
    n: int | str,
    seeds: range,
    reference: float | None,
    every: str,
) -> list[dict]:
    """Train ``method`` on ``n`` labelled rows a class, once per seed of the labelled sample
    (``"all"``, or 5,000 in the store of all 50,000 train images: every train row, named
    ``every`` in the figures); the mean test per-class rate and the train wall time (its median
    over the samples)."""
    whole = n == "all" or n == 5000
    rates, seconds, rhos, loads = [], [], [], []
    for seed in seeds:
        model = store.parent / f"{store.stem}-{method}-{n}-{seed}.model"
        shutil.rmtree(model, ignore_errors=True)
        sample = [] if whole else ["--per-class", str(n), "--seed", str(seed)]
        seconds.append(run.plain("train", store, model, "--method", "ridge", *options, *sample))
        loads.append(run.last_load)
        rhos.append(_rho(model))
        scores, _ = run.json("evaluate", model, store, "--split", "test")
        rates.append(scores["per_class_rate"])
        shutil.rmtree(model, ignore_errors=True)
    label = every if whole else f"{n} labelled/class"
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
            seconds,
            "s",
            **common,
            load_1min=max(loads),
            **samples_once(seconds),
        ),
    ]


def source_tables(ctx: Context) -> tuple[pa.Table, pa.Table]:
    """The (id, label, image) tables to split: CIFAR-10's train and test parquet files; at tiny
    scale without the data folder, sklearn's digits as 32×32 JPEGs (1,300 train, 497 test)."""
    if ctx.scale == "tiny" and (ctx.data_dir is None or not (ctx.data_dir / TRAIN_FILE).exists()):
        table = digits_table()
        return table.slice(0, 1_300), table.slice(1_300)
    return pq.read_table(ctx.data(TRAIN_FILE)), pq.read_table(ctx.data(TEST_FILE))


def digits_table() -> pa.Table:
    """sklearn's 8×8 digits scaled up to 32×32 grey JPEGs (quality 75), as (id, label, image)."""
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    ids, labels, images = [], [], []
    for i, (pixels, target) in enumerate(zip(digits.images, digits.target, strict=True)):
        image = Image.fromarray((pixels * 255 / 16).astype(np.uint8)).resize((32, 32))
        buffer = io.BytesIO()
        image.save(buffer, format="JPEG", quality=75)
        ids.append(f"digits/{i:04d}")
        labels.append(f"digit{target}")
        images.append(buffer.getvalue())
    return pa.table({"id": ids, "label": labels, "image": pa.array(images, pa.binary())})


def write_splits(
    train: pa.Table, test: pa.Table, folder: Path, sizes: tuple[int, int, int] | None
) -> dict[str, Path]:
    """The train, val and test parquet files of the protocol, written into ``folder``.

    ``train`` is the train table's first rows and ``val`` its last `VAL_ROWS` (its order is a
    fixed shuffle); with ``sizes`` (train, val, test rows; tiny scale), fewer train and val rows
    and every k-th test row, as CIFAR-10's test parquet is sorted by class.
    """
    n_val = VAL_ROWS if sizes is None else sizes[1]
    n_train = train.num_rows - n_val if sizes is None else sizes[0]
    step = 1 if sizes is None else max(1, test.num_rows // sizes[2])
    tables = {
        "train": train.slice(0, n_train),
        "val": train.slice(train.num_rows - n_val, n_val),
        "test": test.take(list(range(0, test.num_rows, step))),
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


class CommandRunner:
    """Runs ``imgscale`` commands on the benchmark's cluster and times each one: as processes
    (their wall time is a figure), except at tiny scale, where they run in this process through
    click's runner (the same command code, without a Python start and imports per command;
    tiny figures are never published)."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.in_process = ctx.scale == "tiny"
        self.last_load = 0.0
        """The machine's 1-minute load average as the last command started: on a shared
        machine, wall times measured above the number of cores include others' work."""

    def _run(self, *args) -> tuple[str, float]:
        command = ["imgscale", *map(str, args)]
        self.ctx.log("$ " + " ".join(command))
        if self.ctx.scheduler:
            command += ["--scheduler", self.ctx.scheduler]
        self.last_load = os.getloadavg()[0]
        started = time.perf_counter()
        if self.in_process:
            from click.testing import CliRunner

            from imgscale.jobs.cli import cli

            result = CliRunner().invoke(cli, command[1:], prog_name="imgscale")
            seconds = time.perf_counter() - started
            if result.exit_code != 0:
                error = (
                    result.stderr.strip()
                    or f"{type(result.exception).__name__}: {result.exception}"
                )
                raise RuntimeError(f"{' '.join(command)}: {error[-500:]}")
            return result.stdout, seconds
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


def gist_arrays(ctx: Context, features: str = "gist-tiny") -> dict[str, np.ndarray]:
    """CIFAR-10's 50,000 train and 10,000 test images as ``features`` rows, for the benchmarks
    that test the papers on natural images: ``X_train``, ``y_train``, ``X_test``, ``y_test`` and
    ``class_names`` (labels index it).

    Built once per work dir by the same commands as this benchmark (`imgscale ingest` of each
    split into a store, then `imgscale export` of the store to an npz) and reused after: the
    store and its export stay in the ``cifar10-gist`` scratch folder. When this benchmark has
    already ingested the same images in the work dir (its train and val splits are these train
    rows, in order), its store is exported rather than ingested again. At tiny scale without
    the data folder, sklearn's digits as 32×32 JPEGs; tiny scale keeps 1,300 train rows and
    about 500 test rows of either.
    """
    train, test = source_tables(ctx)
    source = "digits" if train.num_rows < 50_000 else "cifar10"
    if ctx.scale == "tiny":
        # A toy: 1,300 train rows and about 500 test rows (CIFAR-10's test rows are sorted).
        train, test = (
            train.slice(0, 1_300),
            test.take(list(range(0, test.num_rows, test.num_rows // 497))),
        )
        source += "-tiny"
    scratch = ctx.scratch("cifar10-gist")
    exported = scratch / f"{source}-{features.replace(',', '+')}-arrays.npz"
    store = scratch / f"cifar10-{features.replace(',', '+')}.zarr"
    tables = None
    if not exported.exists() and not _holds(store, train, test):
        store, tables = exported.with_suffix(".zarr"), {"train": train, "test": test}
    data = exported_rows(ctx, features, store, exported, tables)
    splits = np.where(data["splits"] == "val", "train", data["splits"])  # val rows train here
    out = {"class_names": data["class_names"]}
    for split in ("train", "test"):
        rows = splits == split
        out[f"X_{split}"], out[f"y_{split}"] = data["X"][rows], data["y"][rows]
    return out


def exported_rows(
    ctx: Context,
    features: str,
    store: Path,
    exported: Path,
    tables: dict[str, pa.Table] | None = None,
) -> dict[str, np.ndarray]:
    """``X``, ``y`` (int64), ``splits`` and ``class_names`` of ``store`` as `imgscale export`
    writes them to ``exported``, an npz made once per work dir and read from then on.

    Unless ``exported`` exists, each table of ``tables`` (split → images) is first written
    beside it as parquet and ingested as that split into a new ``store`` by `imgscale ingest`
    with ``features`` (without ``tables``, ``store`` holds the images already). The export is
    written under a partial name and renamed, so a killed run leaves no npz to trust.
    """
    if not exported.exists():
        if tables is not None:
            paths = {}
            for split, table in tables.items():
                paths[split] = exported.with_name(f"{exported.stem}-{split}.parquet")
                pq.write_table(table, paths[split], row_group_size=512)
            _ingest(CommandRunner(ctx), features, store, paths)
        partial = exported.with_name(f"partial-{exported.name}")
        # export reads the store in-process: it takes no --scheduler.
        CommandRunner(dataclasses.replace(ctx, scheduler=None)).json("export", store, partial)
        partial.replace(exported)
    with np.load(exported, allow_pickle=False) as data:
        return {
            "X": data["X"], "y": data["y"].astype(np.int64), "splits": data["splits"],
            "class_names": data["class_names"],
        }  # fmt: skip


def _holds(store: Path, train: pa.Table, test: pa.Table) -> bool:
    """Whether ``store`` is this benchmark's store of the same images: its rows are ``train``'s
    then ``test``'s, by id and in order (its train and val splits are the train rows)."""
    from imgscale.storage import open_store

    if not store.exists():
        return False
    ids = [str(i) for i in open_store(store).ids()]
    return ids == train.column("id").to_pylist() + test.column("id").to_pylist()
