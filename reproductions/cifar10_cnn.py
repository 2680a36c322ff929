"""``imgscale bench cifar10-cnn``: a real CNN's features on CIFAR-10 JPEGs through the command
line, beside GIST and Fisher vectors on the same splits — the classifiers of papers 000 and 002
by labelled images a class, paper 002's added and zero-shot classes on the CNN's rows, per-class
rate on the test images, and the wall time of every command.

The CNN is EfficientNet-Lite0 (``models/efficientnet-lite0.onnx`` of the data folder, its
README gives its provenance and checks), ingested by ``imgscale ingest --features
onnx:MODEL``: its 1280-D pooled penultimate layer of each image resized to 224×224.

Protocol (on ``cifar10/train.parquet`` and ``test.parquet``; the train file's rows are in a
fixed shuffled order, 5,000 a class):

- **splits**: ``val`` is the last `VAL_PER_CLASS` rows of each class in that order, held out of
  every size (it chooses ρ, or W and k); ``train`` the first 1,000 rows of each class at small
  scale, and at medium every other row (`EVERY_PER_CLASS` a class); ``test`` the test file's
  rows (every tenth at small scale: the file is sorted by class, so 100 a class). Each split is
  ingested by its own command into one store per descriptor: ``onnx:MODEL``, ``gist-tiny``
  (paper 000's 320-D grey GIST) and ``fisher:VOCAB`` (paper 002 §5.1's Fisher vectors of
  RootSIFT and colour statistics, 16 Gaussians on 64-D projections: 4,096-D, on the grid of
  ``imgscale bench cifar10-bow-fisher``, the vocabulary fitted on the train split by
  ``imgscale fit-features``).
- **labelled images**: ``imgscale train --per-class N --seed S`` keeps N labelled rows a class
  of ``train`` (the rest are unlabelled rows: paper 000 §4.1), for N in 10, 100 and 1,000, and
  at medium scale every train row (4,950 a class); at 10 a class on three samples at medium
  scale (seeds 0, 1 and 2), else on one.
- **classifiers**: linear ridge and RFF ridge (paper 000 §3: data-independent embedding, 4,000
  dimensions, the 50th-neighbour bandwidth) and Nyström ridge (data-dependent, 500
  eigenvectors); nearest class mean, Euclidean and with a learned metric (paper 002 §3,
  ``ncm-metric``, 64 rows of W), and metric k-NN (``knn``). Paper 000's finding, data-dependent
  against data-independent embeddings with few and many labels, is a record of its own at each
  size: Nyström ridge's rate over RFF ridge's.
- **paper 002 on the CNN's rows**: ``imgscale bench natural-ncm``'s protocol
  (`natural_ncm.findings`: NCM with ℓ2 and a learned metric, metric kNN, ridge; cat and truck
  held back and added by ``imgscale add-class``; zero-shot means from a vehicles/animals
  hierarchy) on the train, val and test rows of the CNN's store; its records start with
  ``CNN``.
- **commands**: each step is an ``imgscale`` command run as its own process on the suite's
  cluster; every figure keeps the 1-minute load average as its command started.

The stores and the Fisher vectors' vocabulary stay in the work dir's ``cifar10-cnn`` folder: a
later run with the same work dir ingests the splits again into them, which finds every image
committed and describes nothing, so the CNN's features are computed once. Tiny scale runs on
sklearn's digits as 32×32 JPEGs with a toy ONNX network built here (a 3×3 convolution, ReLU
and global pooling), at 10 a class, linear ridge and NCM only, no Fisher vectors, and paper
002's protocol at its tiny size.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import shutil
import time
from multiprocessing.pool import Pool
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from imgscale.bench import Context, benchmark, record
from imgscale.storage import open_store
from imgscale_reproductions import natural_ncm
from imgscale_reproductions.bow_fisher import PATCHES
from imgscale_reproductions.cifar10_gist import (
    CommandRunner,
    digits_table,
)

TRAIN_FILE = "cifar10/train.parquet"
TEST_FILE = "cifar10/test.parquet"
MODEL_FILE = "models/efficientnet-lite0.onnx"
# Validation images a class: the last of each class in the train file, held out of every size.
VAL_PER_CLASS = 50
# Every train image of a class but those: CIFAR-10 has 5,000 a class.
EVERY_PER_CLASS = 5000 - VAL_PER_CLASS
# The labelled images a class trained on three samples at medium scale: the noisiest size.
SEEDED_SIZE = 10
# The CI run's classifiers: one ridge, one class mean, each command run in-process.
TINY_METHODS = ("linear ridge", "NCM")


def methods(rff_dim: int, nystrom_dim: int) -> dict[str, list[str]]:
    """Method label → the `imgscale train` options that make it."""
    return {
        "linear ridge": ["--method", "ridge"],
        f"RFF-{rff_dim} ridge": ["--method", "ridge", "--embedding", "rff",
                                 "--n-components", str(rff_dim)],
        f"Nystrom-{nystrom_dim} ridge": ["--method", "ridge", "--embedding", "nystrom",
                                         "--n-components", str(nystrom_dim)],
        "NCM": ["--method", "ncm"],
        "NCM, learned metric": ["--method", "ncm-metric"],
        "metric k-NN": ["--method", "knn"],
    }  # fmt: skip


def splits_of(train: pa.Table, test: pa.Table, train_per_class: int, val_per_class: int,
              test_step: int) -> dict[str, pa.Table]:  # fmt: skip
    """``val``: the last ``val_per_class`` rows of each class in the file's order, held out of
    every size; ``train``: the first ``train_per_class`` of the others (all of them when there
    are fewer); ``test``: every ``test_step``-th test row."""
    labels = train.column("label").to_numpy(zero_copy_only=False)
    rank = np.empty(len(labels), np.int64)
    held_from = np.empty(len(labels), np.int64)
    for label in np.unique(labels):
        where = np.flatnonzero(labels == label)
        rank[where] = np.arange(len(where))
        held_from[where] = len(where) - val_per_class
    in_val = rank >= held_from
    in_train = ~in_val & (rank < train_per_class)
    return {
        "train": train.filter(pa.array(in_train)),
        "val": train.filter(pa.array(in_val)),
        "test": test.take(list(range(0, test.num_rows, test_step))),
    }


def write_splits(tables: dict[str, pa.Table], folder: Path) -> dict[str, Path]:
    """Each split's table as a parquet file in ``folder`` (rewritten only when it changed)."""
    paths = {}
    for split, table in tables.items():
        path = paths[split] = folder / f"{split}.parquet"
        if not path.exists() or not pq.read_table(path).equals(table):
            pq.write_table(table, path, row_group_size=256)
    return paths


@benchmark(
    "cifar10-cnn",
    "a real CNN (EfficientNet-Lite0 by imgscale ingest --features onnx:) on CIFAR-10 beside "
    "GIST-320 and Fisher vectors: ridge, RFF/Nystrom ridge, NCM, learned-metric NCM, metric "
    "k-NN at 10 to 4,950 labelled images a class; paper 002's add-class and zero-shot on the "
    "CNN's rows",
    needs=(
        f"{TRAIN_FILE}, {TEST_FILE}, {MODEL_FILE} (small and up; tiny uses sklearn's digits "
        "and a tiny network built with the onnx package)",
    ),
    kind="accuracy",
)
def suite(ctx: Context) -> list[dict]:
    per_class, (rff_dim, nystrom_dim), test_step = ctx.pick(
        tiny=((10,), (200, 50), 1), small=((10, 100, 1000), (4000, 500), 10),
        medium=((10, 100, 1000, EVERY_PER_CLASS), (4000, 500), 1),
        large=((10, 100, 1000, EVERY_PER_CLASS), (4000, 500), 1),
    )  # fmt: skip
    # The Fisher vectors' mixture: paper 002 §5.1's 16 Gaussians on 64-D projections, fitted on
    # a sample of train images (none at tiny scale: ``cifar10-bow-fisher``'s tiny run checks the
    # same commands).
    fisher_vocabulary = ctx.pick(tiny=None, small=(16, 64, 2000), medium=(16, 64, 5000),
                                 large=(16, 64, 5000))  # fmt: skip
    scratch = ctx.scratch("cifar10-cnn")
    if ctx.scale == "tiny":
        table = digits_table()
        tables = splits_of(table.slice(0, 1_300), table.slice(1_300), 60, 20, 2)
        model = tiny_network(scratch / "tiny.onnx")
        chosen = {k: v for k, v in methods(rff_dim, nystrom_dim).items() if k in TINY_METHODS}
    else:
        tables = splits_of(
            pq.read_table(ctx.data(TRAIN_FILE)), pq.read_table(ctx.data(TEST_FILE)),
            max(per_class), VAL_PER_CLASS, test_step,
        )  # fmt: skip
        model = ctx.data(MODEL_FILE)
        chosen = methods(rff_dim, nystrom_dim)
    paths = write_splits(tables, scratch)
    run = CommandRunner(ctx)
    out = []
    descriptors = {"CNN": ("cnn", f"onnx:{model}"), "GIST-320": ("gist-tiny", "gist-tiny")}
    if fisher_vocabulary is not None:
        fisher = scratch / "fisher.model"
        out += fit_fisher(run, paths["train"], fisher, *fisher_vocabulary)
        descriptors[f"FV-{fisher_vocabulary[0]}"] = ("fisher", f"fisher:{fisher}")
    stores = {}
    for label, (stem, features) in descriptors.items():
        stores[label] = scratch / f"{stem}.zarr"
        for split, path in paths.items():
            summary, seconds = run.json("ingest", path, stores[label], "--features", features,
                                        "--split", split)  # fmt: skip
            out.append(
                record(
                    f"{label} ingest {split} split, wall", seconds, "s",
                    features=label, dim=summary["dim"], new_rows=summary["rows"],
                    store_rows=summary["store_rows"], load_1min=run.last_load,
                    why_once="the one ingest every accuracy here is measured on",
                )
            )  # fmt: skip
    out += paper_002(ctx, stores["CNN"], scratch / "paper-002")
    # Size by size, so that each size's figures of every descriptor come together.
    seeded = ctx.pick(tiny=1, small=1, medium=3, large=3)
    for n in per_class:
        rates = {}
        for method, options in chosen.items():
            for label, store in stores.items():
                seeds = range(seeded if n == SEEDED_SIZE else 1)
                records = train_and_score(run, store, label, method, options, n, seeds)
                rates[label, method] = records[0]["value"]
                out += records
        out += embedding_records(rates, n, rff_dim, nystrom_dim)
    return out


def fit_fisher(run: CommandRunner, train: Path, model: Path, gaussians: int, components: int,
               sample: int) -> list[dict]:  # fmt: skip
    """The Fisher vectors' vocabulary (paper 002 §5.1: RootSIFT and colour statistics PCA'd to
    ``components``, a ``gaussians``-Gaussian mixture) fitted on ``sample`` train images by
    `imgscale fit-features`, on the grid of ``imgscale bench cifar10-bow-fisher`` (the images
    at 64×64, 16-pixel patches every 8); fitted once per work dir, as its store is filled once:
    a store never holds signatures of two vocabularies."""
    if model.exists():
        return []
    seconds = run.plain("fit-features", train, model, "--features", "fisher", *PATCHES,
                        "--gaussians", gaussians, "--components", components,
                        "--sample", sample)  # fmt: skip
    return [
        record(
            "FV vocabulary fit, wall",
            seconds,
            "s",
            load_1min=run.last_load,
            why_once="the vocabulary is fitted once per work dir, as its store is filled",
        )
    ]


def embedding_records(rates: dict[tuple[str, str], float], n: int, rff_dim: int,
                      nystrom_dim: int) -> list[dict]:  # fmt: skip
    """Paper 000's finding at ``n`` labelled images a class, for each descriptor: ridge on the
    data-dependent embedding (Nyström, its landmarks drawn from the rows) against ridge on the
    data-independent one (random Fourier features), from the per-class rates ``rates`` of
    (descriptor, method)."""
    nystrom, rff = f"Nystrom-{nystrom_dim} ridge", f"RFF-{rff_dim} ridge"
    return [
        record(
            f"{label} data-dependent {nystrom} over data-independent {rff}, {n} labelled/class",
            rates[label, nystrom], "per-class rate", rates[label, rff],
            peer=f"{label} {rff}, same labels, same run", features=label, labelled_per_class=n,
            paper="paper 000 §4: data-dependent embeddings need many labels",
        )
        for label, method in rates
        if method == nystrom and (label, rff) in rates
    ]  # fmt: skip


def paper_002(ctx: Context, store: Path, folder: Path) -> list[dict]:
    """``imgscale bench natural-ncm``'s protocol (learned metric against Euclidean NCM, NCM
    against ridge, classes added by `imgscale add-class`, zero-shot means from the class
    hierarchy) on the rows of the CNN's store: its train, val and test splits; each record's
    name starts with ``CNN``."""
    cnn = open_store(store)
    parts = {}
    for split in ("train", "val", "test"):
        parts[f"X_{split}"] = np.asarray(cnn.features(split).compute())
        parts[f"y_{split}"] = cnn.labels(split).astype(np.int64)
    folder.mkdir(exist_ok=True)
    records = natural_ncm.findings(ctx, parts, cnn.class_names, "CNN", folder)
    return [{**r, "name": f"CNN {r['name']}"} for r in records]


def train_and_score(
    run: CommandRunner, store: Path, features: str, method: str, options: list[str], n: int,
    seeds: range,
) -> list[dict]:  # fmt: skip
    """``method`` trained on ``n`` labelled rows a class, once per seed of the sample: the mean
    test per-class rate (its spread over the seeds) and the wall time of ``train`` (its median
    over the seeds)."""
    from imgscale_reproductions.cifar10_gist import samples_once

    rates, seconds, loads = [], [], []
    for seed in seeds:
        slug = re.sub(r"[^A-Za-z0-9]+", "-", method)
        model = store.parent / f"{store.stem}-{slug}-{n}-{seed}.model"
        shutil.rmtree(model, ignore_errors=True)
        seconds.append(run.plain("train", store, model, *options, "--per-class", str(n),
                                 "--seed", str(seed)))  # fmt: skip
        loads.append(run.last_load)
        scores, _ = run.json("evaluate", model, store, "--split", "test")
        rates.append(scores["per_class_rate"])
        shutil.rmtree(model)
    rate = float(np.mean(rates))
    run.ctx.log(f"{features} {method} {n}/class: per-class rate {rate:.4f} {rates}")
    common = {"features": features, "method": method, "labelled_per_class": n}
    return [
        record(
            f"{features} {method}, {n} labelled/class", rate, "per-class rate", **common,
            trials=len(rates), std=float(np.std(rates)), min=min(rates), max=max(rates),
        ),
        record(
            f"{features} {method}, {n} labelled/class: train, wall", seconds, "s", **common,
            load_1min=max(loads), **samples_once(seconds),
        ),
    ]  # fmt: skip


def tiny_network(path: Path) -> Path:
    """A toy CNN for tiny runs: a 3×3 convolution RGB → 96 channels, ReLU, global average
    pooling, on 32×32 images, saved at ``path`` (needs the onnx package)."""
    from onnx import TensorProto, helper, numpy_helper

    weight = np.random.default_rng(0).standard_normal((96, 3, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["image", "W"], ["map"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["map"], ["positive"]),
            helper.make_node("GlobalAveragePool", ["positive"], ["pooled"]),
        ],
        "tiny",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["n", 3, 32, 32])],
        [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["n", 96, 1, 1])],
        initializer=[numpy_helper.from_array(weight, "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path.write_bytes(model.SerializeToString())
    return path


# -- throughput: ingest beside ONNX Runtime alone -------------------------------------------


@benchmark(
    "cnn-speed",
    "images/s of imgscale ingest --features onnx: (EfficientNet-Lite0) on 1 and 2 workers vs "
    "ONNX Runtime's own session.run on the same decoded batches in 1 and 2 plain processes",
    needs=(f"{TRAIN_FILE}, {MODEL_FILE} (small and up; tiny uses a tiny network)",),
)
def speed_suite(ctx: Context) -> list[dict]:
    from imgscale.bench import cifar_table, ingest_runs, interleaved, repetitions

    n = ctx.pick(tiny=256, small=768, medium=4096, large=4096)
    scratch = ctx.scratch("cnn-speed")
    model = tiny_network(scratch / "tiny.onnx") if ctx.scale == "tiny" else ctx.data(MODEL_FILE)
    source = scratch / "images.parquet"
    pq.write_table(cifar_table(ctx, n), source, row_group_size=SPEED_GROUP)
    features = f"onnx:{model}"
    batches = decoded_batches(source, features)
    out = []
    spawn = multiprocessing.get_context("spawn")
    for workers in (1, 2):
        # The second ingest, into another store on the same cluster, finds the workers warm;
        # both (on a new cluster each round) and ONNX Runtime alone (in the same plain
        # processes each round) in turn, round after round.
        with spawn.Pool(workers) as pool:
            rounds, peers = interleaved(
                lambda workers=workers: ingest_runs(
                    workers, [(f"cnn-{t}", str(source), features) for t in ("cold", "warm")],
                    str(scratch),
                ),
                lambda pool=pool, workers=workers: ort_rate(model, batches, pool, workers),
                repeats=repetitions(ctx),
            )  # fmt: skip
        peer_rates = [peer["rate"] for peer in peers]
        for i, when in enumerate(("a new cluster", "the same cluster again")):
            runs = [each[i] for each in rounds]
            rates = [ingest["images"] / ingest["seconds"] for ingest in runs]
            ingest = runs[-1]
            out.append(
                record(
                    f"ingest --features onnx:{Path(model).name}, {workers} worker(s), "
                    f"{when}", rates, "images/s", peer_rates,
                    peer=f"session.run alone on the same decoded batches, {workers} plain "
                    "process(es) (target ratio ≥ 0.9)",
                    workers=workers, images=ingest["images"],
                    load_1min=max(run["load"] for run in runs),
                    peer_load_1min=max(peer["load"] for peer in peers),
                    worker_rss=max(run["worker_rss"] for run in runs),
                    first_partition_s=ingest["first_partition_s"],
                    median_partition_s=ingest["median_partition_s"],
                )
            )  # fmt: skip
            done = out[-1]
            ctx.log(
                f"cnn ingest {workers} worker(s), {when}: {done['value']:.1f} images/s (median "
                f"of {len(rates)}), first partition {ingest['first_partition_s']:.2f} s, others "
                f"(median) {ingest['median_partition_s']:.2f} s; session.run "
                f"{done['peer_value']:.1f} images/s (load {done['load_1min']:.1f})"
            )
    return out


# Images a parquet row group (one ingest task) in the throughput run: a few seconds of inference.
SPEED_GROUP = 128


def decoded_batches(source: Path, features: str) -> list[np.ndarray]:
    """The source's images as ingest's worker decodes them for ``features`` (RGB at the model's
    size, uint8), in batches of `onnx_features._SLICE`: what a peer feeds ONNX Runtime."""
    from imgscale.jobs.features import parse_features
    from imgscale.pipeline.describe.onnx_features import _SLICE
    from imgscale.storage import decode_image, open_image_source, read_partition

    parsed = parse_features(features)
    images = [
        decode_image(image.data, parsed.requests)[0]
        for partition in open_image_source(str(source)).partitions()
        for image in read_partition(partition)
    ]
    return [np.stack(images[i : i + _SLICE]) for i in range(0, len(images), _SLICE)]


def ort_rate(
    model: Path, batches: list[np.ndarray], pool: Pool, processes: int
) -> dict[str, float]:
    """Images/s of ONNX Runtime's ``session.run`` (one thread a process, as a worker runs it)
    on ``batches``, shared out over the ``processes`` spawned processes of ``pool``: the images
    over the longest process's seconds inside ``session.run``, and the 1-minute load as it
    started."""
    shares = [batches[p::processes] for p in range(processes)]
    load = os.getloadavg()[0]
    seconds = pool.starmap(_run_session, [(str(model), share) for share in shares])
    images = sum(len(b) for b in batches)
    return {"rate": images / max(seconds), "load": load}


def _run_session(model: str, batches: list[np.ndarray]) -> float:
    """Seconds inside ``session.run`` over ``batches``, fed as `OnnxFeatures` feeds them (float32
    NCHW standardised with ImageNet's statistics), after one warm-up run."""
    import onnxruntime as ort

    from imgscale.pipeline.describe.onnx_features import standardised_batch

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    output = session.get_outputs()[0].name
    seconds = 0.0
    for i, batch in enumerate(batches):
        x = standardised_batch(batch, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
        if i == 0:
            session.run([output], {name: x[:1]})  # the warm-up: not counted
        started = time.perf_counter()
        session.run([output], {name: x})
        seconds += time.perf_counter() - started
    return seconds
