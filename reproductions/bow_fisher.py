"""``imgscale bench cifar10-bow-fisher``: paper 000's bags of words and paper 002's Fisher
vectors on CIFAR-10 JPEGs through the command line — vocabularies by `imgscale fit-features`,
signatures by `imgscale ingest`, classifiers by `imgscale train`, scored by `imgscale
evaluate` on the 10,000 test images, beside GIST (gist-tiny) on the same splits in the same run.

Protocol (the splits of ``imgscale bench cifar10-gist``: the train parquet's first 45,000 rows as
``train``, its last 5,000 as ``val`` choosing ρ, the test parquet as ``test``):

- **images**: CIFAR-10's 32×32 images hold a 3×3 grid of 16-pixel patches, too few for a bag of
  words, so the local descriptors are computed on the images upsampled to 64×64 (resize-crop,
  ``--image-size 64``): 7×7 = 49 patches of 16 pixels every 8 (paper 000 §4.1's grid). Paper
  000 computes bags of words on ImageNet only (its CIFAR figures are GIST); this is the same
  grid on CIFAR's smaller images.
- **bags of words** (paper 000 §4.1): dense SIFT quantised to a 400-word k-means dictionary
  learned from a sample of train images; the histograms with linear ridge, SQRT, HIKE (8 levels
  a bin), AddKPCA (two eigenvectors a dimension) and Nyström with the intersection kernel, at
  100 and 1,000 labelled images a class (three seeds) and at every train row. The paper's
  finding to check: AddKPCA, HIKE and SQRT above linear by at least 5 points with few labels,
  and AddKPCA, HIKE and Nyström ahead with many (§4.2, §4.3). Small scale runs linear, HIKE and
  AddKPCA on every train row, the arms the reference has a peer for; medium and large add SQRT,
  Nyström and the labelled samples.
- **Fisher vectors** (paper 002 §5.1): dense RootSIFT and local colour statistics, each PCA'd to
  64-D, against a 16-Gaussian diagonal mixture fitted by EM from k-means: 2 × 2 × 16 × 64 =
  4,096-D improved Fisher vectors; then ridge, NCM-ℓ2, NCM with a learned 64-row metric (6,000
  SGD steps, the best on the validation split kept) and kNN with the same metric, trained on
  every train row; flat top-1 and top-5 error beside the per-class rate. The issue's finding to
  check: Fisher vectors with ridge or learned-metric NCM above GIST with RFF-4000 (paper 002
  Table 2's direction: richer signatures beat GIST). Small scale runs ridge (beside the
  reference's) and NCM; the learned metric's SGD (an hour and more on two cores) and kNN run at
  medium and large.
- **the spatial pyramid** (Lazebnik et al. 2006 §3, the extension paper 000 §3.1 names): the
  same grid and dictionary size with the histograms of 1×1 + 2×2 + 4×4 cells (21 × 400 =
  8,400-D), weighted as their eq. 3; the bag-of-words embeddings on every train row, each beside
  the reference's pyramid of its own words (linear ridge beside ridge, the maps beside the exact
  intersection-kernel SVC). Fisher vectors take no pyramid: paper 002 §5.1 "We do not make use
  of spatial pyramids".
- **64 Gaussians** (paper 002 §5.1 uses 16 and 256; Perronnin et al. 2010 64 and more): the
  float arm's Fisher vectors with 64 Gaussians (2 × 2 × 64 × 64 = 16,384-D) and ridge, beside
  the reference's FV-64 with ridge on the same grid.
- **a denser grid for Fisher vectors** (medium and large): the same 4K-D Fisher vectors from
  13×13 = 169 patches of 16 pixels every 4 (paper 002 does not give its grid; its Fisher
  vectors follow Perronnin et al. 2010, who sample densely), with every Fisher-vector
  classifier, ridge and learned-metric NCM beside GIST with RFF-4000. The bags of words keep
  paper 000's grid of every 8 pixels.
- **64K-D Fisher vectors as PQ codes** (paper 002 §4.1, §5): 256 Gaussians on the same 64-D
  projections (of the denser grid at medium and large, of paper 000's grid at small),
  2 × 2 × 256 × 64 = 65,536-D. As in the paper, the training set is compressed and test
  signatures are not ("we compress the dataset … in each iteration of SGD learning, we
  decompress the features of a limited number of images"): the train and validation images
  are ingested straight to product quantization codes of 8-D sub-vectors (``imgscale ingest
  --pq 8192``: 8 KiB a row; their float signatures are never written), the
  codebook trained on the signatures of ``--pq-sample``'s default 10,000 train images (at
  small, its 2,500: faiss warns below 39 a centroid), and the test images as float signatures
  of the same vocabulary. Ridge (in its dual form: a Gram of the labelled rows, where the primal
  65,536² Gram is 32 GiB), NCM and, at medium and large, learned-metric NCM and kNN are trained
  on the codes and scored on the test signatures, each beside the same classifier on the 4K-D
  float signatures of the same grid (paper 002 Table 2: 64K-D PQ at least as good as 4K-D
  float).
- **GIST** (medium and large): gist-tiny (320-D at 32×32) with linear ridge and RFF-4000 on
  every train row, the figure the Fisher vectors stand beside (`imgscale bench cifar10-gist`
  runs it by size).
- **the reference** (`imgscale_reproductions.bow_fisher_reference`): the same splits, images,
  grid and sizes through the straightforward pipeline a reader would write (OpenCV dense SIFT,
  faiss k-means, scikit-learn's SVC on the exact intersection kernel, PCA + GaussianMixture +
  improved Fisher vectors of RootSIFT and colour, ridge and LinearSVC), sharing no code with
  imgscale.
  On every train row, imgscale's bag-of-words kernel maps (flat and pyramid) stand beside the
  exact kernel's SVC, linear ridge beside the reference's, and Fisher vectors (16 and 64
  Gaussians) with ridge beside the reference's.

Each step is an ``imgscale`` command run as its own process on the suite's Dask cluster
(``--scheduler``); ingest and fit wall times are recorded with the load average as they started.
Small scale uses 2,500 train, 500 validation and 1,000 test images (every tenth of the test
parquet) with vocabularies learned from 1,000 train images, the protocol of the findings'
in-process comparisons with the reference, and runs the arms the reference has a peer for
(and the PQ codes) on every train row; medium and large use every CIFAR-10 image, at 100 and
1,000 labelled images a class too, with the SIFT window's ablation in the reference. Tiny
is a toy that checks the commands: 1,000 train and 500 test images (sklearn's digits as JPEGs
without the data folder), no validation split, a 50-word dictionary and 4 Gaussians on 16-D
projections, linear and SQRT bags of words and NCM on Fisher vectors, the same 256-D Fisher
vectors PQ-coded (32 sub-vectors) for the PQ arm, the pyramid of the 50 words, no GIST, no 64
Gaussians and no denser grid.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from pathlib import Path

import numpy as np

from imgscale.bench import Context, benchmark, record
from imgscale.storage import IMAGE_EXTENSIONS
from imgscale_reproductions import bow_fisher_reference as reference
from imgscale_reproductions.cifar10_gist import (
    CommandRunner,
    digits_table,
    source_tables,
    write_splits,
)

# The bag-of-words embeddings (paper 000 §3.2) and the `imgscale train` options that make them;
# Nyström on histograms uses the intersection kernel (§4.1).
BOW_METHODS = {
    "linear": [],
    "SQRT": ["--embedding", "sqrt"],
    "HIKE": ["--embedding", "hike"],
    "AddKPCA": ["--embedding", "addkpca"],
    "Nystrom": ["--embedding", "nystrom-intersection"],
}
# SGD iterations of the learned metric for NCM. Paper 002 §5 runs 750K–4M, validating every 10K
# and keeping the best W; at `train`'s default 2,000 the validation error on CIFAR-10's Fisher
# vectors (4K-D and 64K-D) was still falling.
METRIC_ITERATIONS = 6000
# Paper 002 §5's classifiers on Fisher vectors.
FISHER_METHODS = {
    "ridge": ["--method", "ridge"],
    "NCM": ["--method", "ncm"],
    "NCM, learned metric": ["--method", "ncm-metric", "--max-iter", str(METRIC_ITERATIONS)],
    "kNN, learned metric": ["--method", "knn"],
}
# Paper 002 §5 scores its PQ-coded 64K-D signatures with NCM and kNN; ridge solves in its dual
# form there (10,000 labelled rows, not the 65,536² primal Gram of 32 GiB).
PQ_METHODS = ("ridge", "NCM", "NCM, learned metric", "kNN, learned metric")
# Why a vocabulary's fit is one measurement (a record's ``why_once``).
VOCABULARY_ONCE = "the one vocabulary every descriptor here is computed with"
# Small scale's embeddings and classifiers: those the reference has a peer for (issue 48). SQRT,
# Nyström, the learned metric's SGD and kNN on Fisher vectors run at medium and large.
REFERENCE_BOW_METHODS = {k: BOW_METHODS[k] for k in ("linear", "HIKE", "AddKPCA")}
REFERENCE_FISHER_METHODS = {k: FISHER_METHODS[k] for k in ("ridge", "NCM")}
# Dimensions a PQ sub-vector (paper 002 §4.1: 8-D sub-vectors, 256 centroids, one byte each).
PQ_SUBVECTOR = 8
# SIFT windows of 2.25 patch sides (OpenCV keypoint size 6 for 16 px), fit-features' default.
SIFT_WINDOW = 2.25
PATCHES = ["--image-size", "64", "--patch-size", "16", "--step", "8", "--sift-window", "2.25"]
# The denser grid of the Fisher vectors' second arm and of the 64K-D arm.
DENSE_PATCHES = ["--image-size", "64", "--patch-size", "16", "--step", "4", "--sift-window", "2.25"]
# The spatial pyramid's levels: 1×1 + 2×2 + 4×4 cells (Lazebnik et al. 2006 §3, paper 000 §3.1).
PYRAMID_LEVELS = 3
# Paper 002 §5.1's larger mixture, beside the 16 Gaussians of the float arm.
MORE_GAUSSIANS = 64


@benchmark(
    "cifar10-bow-fisher",
    "paper 000's bags of words (flat and pyramid: linear, HIKE, AddKPCA) and paper 002's Fisher "
    "vectors (16 and 64 Gaussians, 64K-D PQ codes) on CIFAR-10 JPEGs through the CLI, each beside "
    "an independent reference pipeline",
    needs=("cifar10/train.parquet, cifar10/test.parquet (small and up)",),
    kind="accuracy",
)
def suite(ctx: Context) -> list[dict]:
    pq_gaussians = ctx.pick(tiny=4, small=256, medium=256, large=256)
    sizes, sample, words, gaussians, components = ctx.pick(
        tiny=((1_000, 300, 500), 200, 50, 4, 16),
        small=((2_500, 500, 1_000), 1_000, 400, 16, 64),
        medium=(None, 5_000, 400, 16, 64),
        large=(None, 10_000, 400, 16, 64),
    )
    per_class = ctx.pick(tiny=(), small=(), medium=(100, 1000), large=(100, 1000))
    trials = ctx.pick(tiny=1, small=3, medium=3, large=3)
    # Tiny is CI's run of every benchmark: one kernel map and one classifier keep it short.
    # Small is what stands beside the reference: its embeddings and classifiers, every train row.
    every = (BOW_METHODS, FISHER_METHODS)
    bow_methods, fisher_methods = ctx.pick(
        tiny=({k: BOW_METHODS[k] for k in ("linear", "SQRT")}, {"NCM": FISHER_METHODS["NCM"]}),
        small=(REFERENCE_BOW_METHODS, REFERENCE_FISHER_METHODS), medium=every, large=every,
    )  # fmt: skip
    # Medium and large add GIST, the SIFT window's ablation and the denser grid (findings of
    # their own, not comparisons with the reference).
    extended = ctx.scale in ("medium", "large")
    scratch = ctx.scratch("cifar10-bow-fisher")
    splits = write_splits(*source_tables(ctx), scratch, sizes)
    if ctx.scale == "tiny":  # fewer commands in CI's run: ridge chooses ρ by GCV instead
        del splits["val"]
    run = CommandRunner(ctx)
    out = []

    gist_rff = None
    if extended:
        gist = scratch / "gist-tiny.zarr"
        out += _ingest(run, "gist-tiny", gist, splits)
        for method, options in {
            "linear": [],
            "RFF-4000": ["--embedding", "rff", "--n-components", "4000"],
        }.items():
            rates, records = _train(run, gist, f"GIST {method}", options, "all", range(1), None)
            out += records
        gist_rff = rates["per_class_rate"]  # RFF-4000's: the figure Fisher vectors stand beside

    grid = reference.Grid(16, 8, 16 * SIFT_WINDOW / 6)
    settings = reference.Settings(64, grid, words, gaussians, components, sample,
                                  pyramid_levels=PYRAMID_LEVELS)  # fmt: skip
    ref, records = reference_arm(ctx, splits, settings)
    out += records
    if extended:  # the SIFT window's effect, in the reference alone
        out += window_arm(splits, settings, ref["bow svc"])

    bow_model = scratch / "bow.model"
    out += _fit(run, splits["train"], bow_model, "bow", "--words", words, "--sample", sample)
    bow = scratch / "bow.zarr"
    out += _ingest(run, f"bow:{bow_model}", bow, splits)
    for n in (*per_class, "all"):
        seeds = range(1) if n == "all" else range(trials)
        linear = None
        for method, options in bow_methods.items():
            peer = {}
            if n == "all":  # beside the reference: linear ridge, else the exact kernel's SVC
                key = "bow linear" if method == "linear" else "bow svc"
                peer = {"peer_rate": ref[key], "peer": REFERENCE_NAMES[key]}
            rates, records = _train(run, bow, f"BoW-{words} {method}", options, n, seeds,
                                    **{"peer_rate": linear, **peer})  # fmt: skip
            linear = rates["per_class_rate"] if method == "linear" else linear
            out += records
    out += pyramid_arm(run, splits, scratch / "bow-pyramid", words, sample, bow_methods, ref)

    name = f"FV-{gaussians}"
    fit_options = ("--gaussians", gaussians, "--components", components, "--sample", sample)
    fisher_model, records, float_rates = fisher_float_arm(
        run, splits, scratch / "fisher", name, fit_options, fisher_methods, gist_rff,
        reference_ridge=ref["fv ridge"],
    )  # fmt: skip
    out += records
    pq_patches, pq_peer = PATCHES, f"{name}, float"
    if ctx.scale != "tiny":
        more = dataclasses.replace(settings, gaussians=MORE_GAUSSIANS)
        # No LinearSVC at 16,384-D: liblinear's copy of 10,000 rows alone is 2.6 GB.
        more_ref, records = reference_arm(ctx, splits, more, bow=False, linear_svc=False)
        out += records
        more_options = ("--gaussians", MORE_GAUSSIANS, "--components", components,
                        "--sample", sample)  # fmt: skip
        _, records, _ = fisher_float_arm(
            run, splits, scratch / f"fisher-{MORE_GAUSSIANS}", f"FV-{MORE_GAUSSIANS}", more_options,
            {"ridge": FISHER_METHODS["ridge"]}, gist_rff, label=f"fisher {MORE_GAUSSIANS}",
            reference_ridge=more_ref["fv ridge"],
        )  # fmt: skip
        out += records
    if extended:
        _, records, float_rates = fisher_float_arm(
            run, splits, scratch / "fisher-dense", f"{name} every 4 px", fit_options,
            fisher_methods, gist_rff, patches=DENSE_PATCHES, label="fisher every 4 px",
        )  # fmt: skip
        out += records
        pq_patches, pq_peer = DENSE_PATCHES, f"{name} every 4 px, float"

    if pq_gaussians != gaussians:
        fisher_model = scratch / "fisher-pq.model"
        out += _fit(run, splits["train"], fisher_model, "fisher", "--gaussians", pq_gaussians,
                    "--components", components, "--sample", sample, patches=pq_patches,
                    label=f"fisher {pq_gaussians} Gaussians")  # fmt: skip
    pq_methods = {m: FISHER_METHODS[m] for m in PQ_METHODS if m in fisher_methods}
    out += fisher_pq_arm(run, splits, fisher_model, 2 * 2 * pq_gaussians * components,
                         pq_methods, float_rates, pq_peer)  # fmt: skip
    return out


# What each of the reference's figures is, as a peer's name.
REFERENCE_NAMES = {
    "bow svc": "reference: exact intersection-kernel SVC on the same grid",
    "bow linear": "reference: linear ridge on its histograms",
    "fv ridge": "reference: ridge on its Fisher vectors (RootSIFT and colour)",
    "fv linear svc": "reference: LinearSVC on its Fisher vectors (RootSIFT and colour)",
    "bow pyramid svc": "reference: exact intersection-kernel SVC on the same pyramid",
    "bow pyramid linear": "reference: linear ridge on its pyramid histograms",
}


def reference_arm(
    ctx: Context,
    splits: dict[str, Path],
    settings: reference.Settings,
    bow: bool = True,
    linear_svc: bool = True,
) -> tuple[dict[str, float], list[dict]]:
    """The reference pipeline on the same splits and settings (its bags of words with ``bow``,
    LinearSVC on its Fisher vectors with ``linear_svc``): its per-class rates by key of
    `REFERENCE_NAMES`, and a record each (with its wall time)."""
    began = time.perf_counter()
    load = os.getloadavg()[0]
    rates = reference.scores(splits, settings, bow=bow, linear_svc_on_fisher=linear_svc)
    seconds = time.perf_counter() - began
    ctx.log(f"reference: {rates} in {seconds:.0f} s")
    words, gaussians = settings.words, settings.gaussians
    pyramid = f"BoW-{words} pyramid {pyramid_cells(settings.pyramid_levels)}"
    names = {
        "bow svc": f"reference BoW-{words} intersection SVC",
        "bow linear": f"reference BoW-{words} linear ridge",
        "bow pyramid svc": f"reference {pyramid} intersection SVC",
        "bow pyramid linear": f"reference {pyramid} linear ridge",
        "fv ridge": f"reference FV-{gaussians} ridge",
        "fv linear svc": f"reference FV-{gaussians} LinearSVC",
    }
    records = [
        record(f"{names[key]}, every train row", rate, "per-class rate")
        for key, rate in rates.items()
    ]
    what = "reference pipeline" if bow else f"reference FV-{gaussians}"
    records.append(
        record(
            f"{what}, wall",
            seconds,
            "s",
            load_1min=load,
            why_once="the one run whose per-class rates are the reference",
        )
    )
    return rates, records


def pyramid_cells(levels: int) -> str:
    """The cells of a pyramid's levels, as "1x1+2x2+4x4"."""
    return "+".join(f"{2**level}x{2**level}" for level in range(levels))


def pyramid_arm(
    run: CommandRunner,
    splits: dict[str, Path],
    stem: Path,
    words: int,
    sample: int,
    methods: dict[str, list[str]],
    ref: dict[str, float],
) -> list[dict]:
    """A bag-of-words dictionary with a `PYRAMID_LEVELS`-level spatial pyramid fitted on the
    train split (``stem``.model), every split ingested (``stem``.zarr), and ``methods`` trained
    on every train row, each beside the reference's pyramid on the same grid (linear ridge
    beside its ridge, the kernel maps beside its exact intersection-kernel SVC)."""
    model = stem.with_suffix(".model")
    out = _fit(run, splits["train"], model, "bow", "--words", words, "--sample", sample,
               "--pyramid-levels", PYRAMID_LEVELS, label="bow pyramid")  # fmt: skip
    store = stem.with_suffix(".zarr")
    out += _ingest(run, f"bow:{model}", store, splits, label="bow pyramid")
    cells = pyramid_cells(PYRAMID_LEVELS)
    for method, options in methods.items():
        key = "bow pyramid linear" if method == "linear" else "bow pyramid svc"
        _, records = _train(run, store, f"BoW-{words} pyramid {cells} {method}", options, "all",
                            range(1), ref[key], peer=REFERENCE_NAMES[key])  # fmt: skip
        out += records
    return out


def window_arm(
    splits: dict[str, Path], settings: reference.Settings, chosen_rate: float
) -> list[dict]:
    """The reference's bags of words with SIFT windows of the patch alone (OpenCV keypoint size
    patch / 6) and of 1.5 patch sides, beside ``chosen_rate`` at ``settings``' window: what the
    window is worth."""
    chosen = settings.grid.keypoint_size * 6 / settings.grid.patch
    out = []
    for window in (1.0, 1.5):
        grid = dataclasses.replace(settings.grid, keypoint_size=settings.grid.patch * window / 6)
        at = dataclasses.replace(settings, grid=grid, pyramid_levels=1)
        rates = reference.scores(splits, at, fisher=False)
        peer = f"reference: the same at a SIFT window of {chosen:g} patch sides"
        out.append(record(
            f"reference BoW-{settings.words} intersection SVC, SIFT window {window:g}",
            rates["bow svc"], "per-class rate", chosen_rate, peer=peer,
        ))  # fmt: skip
    return out


def fisher_float_arm(
    run: CommandRunner,
    splits: dict[str, Path],
    stem: Path,
    name: str,
    fit_options: tuple,
    methods: dict[str, list[str]],
    gist_rff: float | None,
    *,
    patches: list[str] = PATCHES,
    label: str | None = None,
    reference_ridge: float | None = None,
) -> tuple[Path, list[dict], dict[str, float]]:
    """A Fisher vector vocabulary fitted on the train split (``stem``.model), every split
    ingested as float signatures (``stem``.zarr, wall times named by ``label``), and ``methods``
    trained on every train row beside GIST + RFF-4000 (ridge beside ``reference_ridge``, the
    reference's ridge on the same grid, when given): the model, the records, and each method's
    per-class rate."""
    model = stem.with_suffix(".model")
    out = _fit(run, splits["train"], model, "fisher", *fit_options, patches=patches)
    store = stem.with_suffix(".zarr")
    out += _ingest(run, f"fisher:{model}", store, splits, label=label)
    rates = {}
    for method, options in methods.items():
        peer_rate, peer = gist_rff, "GIST RFF-4000, same splits"
        if method == "ridge" and reference_ridge is not None:
            peer_rate, peer = reference_ridge, REFERENCE_NAMES["fv ridge"]
        mean, records = _train(
            run, store, f"{name} {method}", options, "all", range(1), peer_rate, peer=peer
        )
        rates[method] = mean["per_class_rate"]
        out += records
    return model, out, rates


def fisher_pq_arm(
    run: CommandRunner,
    splits: dict[str, Path],
    model: Path,
    dim: int,
    methods: dict[str, list[str]],
    peer_rates: dict[str, float],
    peer: str,
) -> list[dict]:
    """The training splits ingested as PQ codes of ``model``'s ``dim``-D Fisher vectors (8-D
    sub-vectors) and the test split as float signatures (paper 002 §5.1 compresses the training
    set only), and ``methods`` trained on the codes of every train row and scored on the test
    signatures, each beside ``peer_rates`` of the same method (``peer``: the float signatures
    they stand beside)."""
    training = {split: path for split, path in splits.items() if split != "test"}
    store, test_store = model.with_suffix(".pq.zarr"), model.with_suffix(".test.zarr")
    m = dim // PQ_SUBVECTOR
    features = f"fisher:{model}"
    out = _ingest(run, features, store, training, "--pq", m)
    out += _ingest(run, features, test_store, {"test": splits["test"]}, label="fisher float")
    label = f"FV-{dim // 1024}K PQ-{m}" if dim >= 1024 else f"FV-{dim} PQ-{m}"
    for method, options in methods.items():
        _, records = _train(
            run, store, f"{label} {method}", options, "all", range(1),
            peer_rates.get(method), peer=f"{peer} {method}, same splits", test_store=test_store,
        )  # fmt: skip
        out += records
    return out


def _fit(
    run: CommandRunner,
    source: Path,
    model: Path,
    kind: str,
    *options,
    patches=PATCHES,
    label: str | None = None,
) -> list[dict]:
    """`imgscale fit-features SOURCE MODEL --features KIND` on the benchmark's cluster; its wall
    time named by ``label`` (default: the kind) and the grid."""
    shutil.rmtree(model, ignore_errors=True)
    seconds = run.plain("fit-features", source, model, "--features", kind, *patches, *options)
    step = patches[patches.index("--step") + 1]
    name = label or kind
    name = name if patches is PATCHES else f"{name} every {step} px"
    return [
        record(
            f"{name} vocabulary fit, wall",
            seconds,
            "s",
            load_1min=run.last_load,
            why_once=VOCABULARY_ONCE,
        )
    ]


def _ingest(
    run: CommandRunner,
    features: str,
    store: Path,
    splits: dict[str, Path],
    *options,
    label: str | None = None,
) -> list[dict]:
    """Each split ingested into a new ``store`` (with ``options``): a wall-time record each,
    named by ``label`` (default: the features' kind)."""
    shutil.rmtree(store, ignore_errors=True)
    name = label or features.split(":")[0] + (" PQ" if "--pq" in options else "")
    out = []
    for split, path in splits.items():
        summary, seconds = run.json(
            "ingest", path, store, "--features", features, "--split", split, *options
        )
        out.append(
            record(
                f"{name} ingest {split} ({summary['rows']} images), wall", seconds, "s",
                images_per_second=summary["rows"] / seconds, dim=summary["dim"],
                load_1min=run.last_load,
                why_once="the one ingest every accuracy here is measured on",
            )
        )  # fmt: skip
    return out


def _train(
    run: CommandRunner,
    store: Path,
    label: str,
    options: list[str],
    n: int | str,
    seeds: range,
    peer_rate: float | None,
    peer: str = "linear ridge on the same histograms, same samples",
    test_store: Path | None = None,
) -> tuple[dict, list[dict]]:
    """Train ``options`` on ``n`` labelled rows a class (``"all"``: every train row) once per
    seed; the mean scores on the test split of ``test_store`` (default: ``store``), and their
    records (per-class rate beside ``peer_rate``)."""
    scores = []
    for seed in seeds:
        model = store.parent / f"{store.stem}-{len(scores)}.model"
        shutil.rmtree(model, ignore_errors=True)
        sample = [] if n == "all" else ["--per-class", str(n), "--seed", str(seed)]
        run.plain("train", store, model, *options, *sample)
        scores.append(run.json("evaluate", model, test_store or store, "--split", "test")[0])
        shutil.rmtree(model, ignore_errors=True)
    mean = {key: float(np.mean([s[key] for s in scores])) for key in ("per_class_rate",
            "top1_error", "top5_error") if scores[0].get(key) is not None}  # fmt: skip
    labelled = "every train row" if n == "all" else f"{n} labelled/class"
    rates = [s["per_class_rate"] for s in scores]
    run.ctx.log(f"{label}, {labelled}: {mean} over {len(scores)} samples {rates}")
    spread = {"trials": len(rates), "std": float(np.std(rates)), "min": min(rates),
              "max": max(rates), "labelled_per_class": str(n)}  # fmt: skip
    extra = {"peer": peer} if peer_rate is not None else {}
    rate = mean["per_class_rate"]
    records = [record(f"{label}, {labelled}", rate, "per-class rate", peer_rate, **spread, **extra)]
    for key in ("top1_error", "top5_error"):
        if key in mean and n == "all":
            records.append(record(f"{label}, {labelled}: {key.replace('_', ' ')}", mean[key], ""))
    return mean, records


# Each class's share of a photo folder's images in the train split; the rest are the test split.
PHOTO_TRAIN_SHARE = 0.5
PHOTO_BOW_METHODS = {k: BOW_METHODS[k] for k in ("linear", "HIKE", "AddKPCA")}


@benchmark(
    "photos-bow-fisher",
    "cifar10-bow-fisher's bags of words (linear, HIKE, AddKPCA) and Fisher vectors (ridge) on "
    "any folder tree of labelled photos, at the working size fit-features chooses, each beside "
    "the independent reference pipeline on the same photos",
    needs=("photos/<class>/<image>: any folder tree of labelled photos",),
    kind="accuracy",
)
def photos_suite(ctx: Context) -> list[dict]:
    """DATA/photos/<class>/<image>, each class's photos split in two (seeded): the vocabularies
    learned by `imgscale fit-features` at ``--image-size auto`` from the train half, every photo
    ingested, classifiers trained on the train half and scored on the test half; the reference
    at the working size fit-features chose. Tiny without DATA/photos: 300 of sklearn's digits as
    32×32 JPEGs in a folder a digit."""
    scratch = ctx.scratch("photos-bow-fisher")
    if ctx.scale == "tiny" and (ctx.data_dir is None or not (ctx.data_dir / "photos").is_dir()):
        root = digit_photos(scratch / "digits", 300)
    else:
        root = ctx.data("photos")
    words, gaussians, components, sample = ctx.pick(
        tiny=(20, 2, 16, 200), small=(400, 16, 64, 1_000), medium=(400, 16, 64, 2_000),
        large=(400, 16, 64, 5_000),
    )  # fmt: skip
    splits = photo_splits(root, scratch)
    run = CommandRunner(ctx)
    options = ["--patch-size", "16", "--step", "8", "--sample", sample]
    bow_model, fisher_model = scratch / "bow.model", scratch / "fisher.model"
    for path in (bow_model, fisher_model):
        shutil.rmtree(path, ignore_errors=True)
    fitted, seconds = run.json("fit-features", splits["train"], bow_model, "--features", "bow",
                               "--words", words, *options)  # fmt: skip
    size = fitted["image_size"]
    out = [record("bow vocabulary fit, wall", seconds, "s", load_1min=run.last_load,
                  image_size=size, why_once=VOCABULARY_ONCE)]  # fmt: skip
    settings = reference.Settings(size, reference.Grid(16, 8, 16 * SIFT_WINDOW / 6), words,
                                  gaussians, components, sample)  # fmt: skip
    ref, records = reference_arm(ctx, splits, settings)
    out += records
    bow = scratch / "bow.zarr"
    out += _ingest(run, f"bow:{bow_model}", bow, splits)
    for method, train_options in PHOTO_BOW_METHODS.items():
        key = "bow linear" if method == "linear" else "bow svc"
        _, records = _train(run, bow, f"BoW-{words} {method}", train_options, "all", range(1),
                            ref[key], peer=REFERENCE_NAMES[key])  # fmt: skip
        out += records
    seconds = run.plain("fit-features", splits["train"], fisher_model, "--features", "fisher",
                        "--gaussians", gaussians, "--components", components,
                        "--image-size", size, *options)  # fmt: skip
    out.append(
        record(
            "fisher vocabulary fit, wall",
            seconds,
            "s",
            load_1min=run.last_load,
            why_once=VOCABULARY_ONCE,
        )
    )
    fisher = scratch / "fisher.zarr"
    out += _ingest(run, f"fisher:{fisher_model}", fisher, splits)
    _, records = _train(run, fisher, f"FV-{gaussians} ridge", FISHER_METHODS["ridge"], "all",
                        range(1), ref["fv ridge"], peer=REFERENCE_NAMES["fv ridge"])  # fmt: skip
    return out + records


def digit_photos(folder: Path, count: int) -> Path:
    """The first ``count`` of sklearn's digits as 32×32 JPEGs in ``folder``/<digit>/: a small
    folder tree of labelled images."""
    table = digits_table().slice(0, count).to_pydict()
    for key, label, image in zip(table["id"], table["label"], table["image"], strict=True):
        (folder / str(label)).mkdir(parents=True, exist_ok=True)
        (folder / str(label) / f"{Path(key).name}.jpg").write_bytes(image)
    return folder


def photo_splits(root: Path, folder: Path, seed: int = 0) -> dict[str, Path]:
    """The photos of ROOT/<class>/… (any depth; hidden files and folders left out) as
    train.parquet and test.parquet (id, label, image bytes) in ``folder``: each class's photos
    shuffled (seeded) and `PHOTO_TRAIN_SHARE` of them, at least one, in the train split."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    rows = {"train": [], "test": []}
    classes = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    for label in classes:
        files = sorted(
            p for p in label.rglob("*")
            if p.suffix.lower() in IMAGE_EXTENSIONS and p.is_file()
            and not any(part.startswith(".") for part in p.relative_to(root).parts)
        )  # fmt: skip
        if len(files) < 2:
            raise ValueError(f"{label}: {len(files)} photos; expected at least 2 a class")
        order = rng.permutation(len(files))
        n_train = min(len(files) - 1, max(1, round(PHOTO_TRAIN_SHARE * len(files))))
        for rank, index in enumerate(order):
            path = files[index]
            split = "train" if rank < n_train else "test"
            key = path.relative_to(root).as_posix()
            rows[split].append((key, label.name, path.read_bytes()))
    if len(classes) < 2:
        raise ValueError(f"{root}: {len(classes)} class folders; expected at least 2")
    paths = {}
    for split, items in rows.items():
        ids, labels, images = zip(*items, strict=True)
        table = pa.table({"id": list(ids), "label": list(labels),
                          "image": pa.array(images, pa.binary())})  # fmt: skip
        paths[split] = folder / f"{split}.parquet"
        pq.write_table(table, paths[split], row_group_size=2048)
    return paths
