"""The figures that answer each benchmark's question, chosen here rather than in the benchmarks.

Each :class:`Figure` names a recorded figure of one benchmark (a regular expression matched
against the whole figure name), says what a reader calls it and what it is measured against.
Figures with a ``question`` are the headlines of ``docs/README.md``; every figure named here
opens its benchmark's section in the summary at the top of ``docs/benchmarks.md`` or
``docs/results.md``. A benchmark not named here is summarised by its first few figures that have
a peer, so a new benchmark needs no line here until one of its figures should be a headline.

The figure shown is the newest run of that figure at the largest scale it ran at; when the
expression matches several figures of that run (``ridge, rho validated, \\d+ rows``), the last
one recorded (the benchmarks record sizes in increasing order). Its peer is, in order: another
figure of the same run (``peer_figure``), a paper's figure (``paper``), or the peer or limit the
benchmark recorded beside it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from imgscale.bench.registry import SCALES


@dataclass(frozen=True)
class Figure:
    benchmark: str
    name: str
    """A regular expression matched against the whole recorded figure name."""
    label: str
    """What a reader calls the figure."""
    question: str = ""
    """The question the figure answers on the summary page; empty: the benchmark's summary only."""
    peer_label: str = ""
    """What the peer or limit is; empty: the text the benchmark recorded."""
    peer_figure: str = ""
    """The peer is this figure of the same run (a regular expression, like ``name``)."""
    paper: tuple[float, str] | None = None
    """The peer is a published figure: (value, where it is published)."""
    words: tuple[str, str] = ("better", "worse")
    """How the advantage reads when ours is better or worse than the peer."""
    lower_is_better: bool = False
    """Times, errors, memory: a ratio under 1 is the advantage."""
    share_of: str = ""
    """Read the ratio as a share of a limit or budget: "77% of <share_of>"."""
    unit: str = ""
    """The figure's unit, where one name is recorded in two units."""


_FASTER = ("faster", "slower")
_SMALLER = ("less memory", "more memory")
_LOWER_ERROR = ("lower error", "higher error")
_TIME = {"words": _FASTER, "lower_is_better": True}

FIGURES = (
    # Speed and memory against peers.
    Figure(
        "ridge",
        r"ridge fit, 8-value rho grid, wall",
        "ridge, 1M × 512, 1,000 classes, ρ grid of 8",
        "How much faster than scikit-learn is ridge regression at a million rows?",
        **_TIME,
    ),
    Figure(
        "ridge",
        r"ridge fit peak RSS \(client \+ workers\)",
        "ridge at 1M rows: peak RSS",
        "How much memory does it take?",
        words=_SMALLER,
        lower_is_better=True,
    ),
    Figure(
        "ridge",
        r"validation per-class rate at chosen rho",
        "ridge: validation per-class rate",
        peer_label="scikit-learn RidgeClassifier, same ρ grid",
    ),
    Figure(
        "embed",
        r"RFF-2000 -> ridge, 8-value rho grid, wall",
        "RFF-2000 → ridge, 1M × 512",
        "And with a nonlinear embedding (random Fourier features)?",
        **_TIME,
    ),
    Figure(
        "embed",
        r"RFF-2000 -> ridge peak RSS \(client \+ workers\)",
        "RFF-2000 → ridge: peak RSS",
        words=_SMALLER,
        lower_is_better=True,
    ),
    Figure("embed", r"AddKPCA-800 fit\+transform, .*", "AddKPCA-800 on 331,390 × 400", **_TIME),
    Figure(
        "scale",
        r"ridge, rho validated, \d+ rows, peak RSS",
        "ridge on a store larger than RAM: peak RSS",
        "Does memory stay flat when the store outgrows RAM?",
        peer_label="budget: 2 GiB, client + workers",
        share_of="the budget",
    ),
    Figure(
        "scale",
        r"read-only pass, cold, \d+ rows",
        "read pass of a store larger than RAM",
        "Does a pass over the store keep up with the disk?",
        peer_label="the disk's sequential read (dd, same run)",
        words=_FASTER,
        unit="GB/s",
    ),
    Figure(
        "scale",
        r"ridge, rho validated, \d+ rows",
        "ridge time per 1M rows, largest store",
        peer_label="the same at 1M rows (linear: 1)",
        words=("sub-linear", "super-linear"),
        lower_is_better=True,
    ),
    Figure(
        "scale",
        r"ridge Gram XᵀX at \d+ rows vs .*",
        "ridge Gram vs numpy float64, relative difference",
        share_of="the tolerance",
    ),
    Figure(
        "io",
        r"pass Gram XᵀX \+ class sums XᵀY .*2 worker\(s\), vs float64 GEMM ceiling.*",
        "Gram + class-sums pass, 2 workers",
        "How close is a training pass to the machine's limit?",
        peer_label="float64 GEMM rate of the machine (same run)",
        share_of="the GEMM limit",
    ),
    Figure(
        "io",
        r"pass class sums, 1000 classes .*, 2 worker\(s\)",
        "class-sums pass, 1,000 classes, 2 workers",
        peer_label="a read-only pass of the same store, same run",
        share_of="the read rate",
    ),
    Figure(
        "io",
        r"read-only speed-up 1 → 2 workers .*",
        "read speed-up, 1 → 2 workers",
        peer_label="1 → 2 plain processes, same run",
        share_of="theirs",
    ),
    Figure(
        "pq",
        r"encode throughput \(read\+encode\+write, cluster\)",
        "PQ encode, 1M × 512, M = 64",
        "Product quantization against faiss?",
        words=_FASTER,
    ),
    Figure(
        "pq", r"ADC scan rate, 1 thread", "PQ asymmetric-distance scan, 1 thread", words=_FASTER
    ),
    Figure(
        "pq",
        r"bytes on disk",
        "PQ codes on disk",
        "How much smaller is a PQ store?",
        words=("smaller", "larger"),
        lower_is_better=True,
    ),
    Figure(
        "pq",
        r"reconstruction MSE",
        "PQ reconstruction error",
        lower_is_better=True,
        words=_LOWER_ERROR,
    ),
    Figure("ncm", r"eq\. 9 top-5 scoring, .*", "NCM top-5 scoring, 10,000 classes", words=_FASTER),
    Figure(
        "ncm",
        r"class means throughput, raw",
        "class means, raw store",
        peer_figure=r"class means throughput, PQ",
        peer_label="class means from PQ codes, same run",
        words=_FASTER,
    ),
    Figure(
        "images",
        r"folder: imgscale ingest --features gist, 2 worker\(s\)",
        "ingest: read + decode + GIST-512, 2 workers",
        "What does it cost to describe an image?",
        peer_label="plain loop: Pillow + numpy GIST, 1 process",
        words=_FASTER,
    ),
    Figure(
        "images",
        r"folder: imgscale ingest --features gist-tiny, 2 worker\(s\)",
        "ingest: GIST-320 of 32 × 32 images, 2 workers",
        peer_label="plain loop: Pillow + numpy GIST, 1 process",
        words=_FASTER,
    ),
    Figure(
        "images",
        r"folder: ingest gist-tiny, 2 workers, peak RSS of the largest worker at .*",
        "ingest: largest worker's RSS at 50,000 images",
        peer_label="the same at 2,000 images",
        words=("flatter", "growing"),
        lower_is_better=True,
    ),
    Figure(
        "overhead",
        r"imgscale train --method ncm, whole process, \d+ rows.*",
        "imgscale train (NCM), whole process, 6 GiB store",
        "What does the Dask machinery cost?",
        peer_label="plain numpy process, same class sums",
        **_TIME,
    ),
    Figure(
        "overhead",
        r"imgscale --help, wall",
        "imgscale --help",
        peer_label="bare python -c pass",
        **_TIME,
    ),
    Figure(
        "local",
        r"mnist even latency median ours",
        "local learning, MNIST: median query latency",
        peer_label="Local B (paper 004's baseline), same run",
        **_TIME,
    ),
    Figure(
        "ale",
        r"fit_plus_embed_seconds",
        "ALE fit + embed + SSL solve",
        peer_label="target: 60 s",
        share_of="the target",
    ),
    Figure(
        "ale", r"peak_rss_gib", "ALE peak RSS", peer_label="budget: 2 GiB", share_of="the budget"
    ),
    Figure(
        "ale-ceiling",
        r"mnist_ale__ssl_all",
        "MNIST, ALE + SSL, all labels",
        peer_label="linear ridge, same labels",
    ),
    Figure(
        "ale-ceiling",
        r"mnist_ale__ssl_3",
        "MNIST, ALE + SSL, 3 a class",
        peer_label="linear ridge, same labels",
    ),
    Figure(
        "ale-ceiling",
        r"mnist_exact_eigenmaps__ssl_3",
        "MNIST, exact eigenmaps + SSL, 3 a class",
        peer_label="linear ridge, same labels",
    ),
    Figure(
        "ale-ceiling",
        r"20news_ale__ssl_all",
        "20 Newsgroups, ALE + SSL, all labels",
        peer_label="linear ridge, same labels",
    ),
    # Accuracy against papers, references and peers.
    Figure(
        "cifar10-gist",
        r"gist-tiny RFF-4000 5000 labelled/class.*",
        "CIFAR-10, GIST + RFF-4000 + ridge, 5,000 a class",
        "Does ridge on GIST reach paper 000's protocol's reference on CIFAR-10?",
        peer_label="reference: numpy GIST-320 + scikit-learn (data README)",
    ),
    Figure(
        "cifar10-gist",
        r"gist-tiny linear 100 labelled/class",
        "CIFAR-10, GIST + linear ridge, 100 a class",
        peer_label="reference: numpy GIST-320 + scikit-learn (data README)",
    ),
    Figure(
        "cifar10-gist",
        r"gist-tiny RFF-4000 100 labelled/class",
        "CIFAR-10, GIST + RFF-4000, 100 a class",
        peer_label="reference: numpy GIST-320 + scikit-learn (data README)",
    ),
    Figure(
        "cifar10-cnn",
        r"CNN linear ridge, 100 labelled/class",
        "CIFAR-10, EfficientNet-Lite0 features + ridge, 100 a class",
        "Do a real CNN's features beat GIST on CIFAR-10?",
        peer_figure=r"GIST-320 linear ridge, 1000 labelled/class",
        peer_label="GIST-320 + ridge with 10× the labels (1,000 a class), same splits",
    ),
    Figure(
        "cifar10-cnn",
        r"CNN linear ridge, \d+ labelled/class",
        "CIFAR-10, EfficientNet-Lite0 features + ridge, every train row",
        "And against Fisher vectors?",
        peer_figure=r"FV-16 linear ridge, \d+ labelled/class",
        peer_label="Fisher vectors (4,096-D, paper 002 §5.1) + ridge, same labels",
    ),
    Figure(
        "cifar10-cnn",
        r"CNN data-dependent Nystrom-500 ridge over data-independent RFF-4000 ridge, 10 "
        r"labelled/class",
        "CIFAR-10 CNN features, 10 a class: Nyström-500 ridge (data-dependent)",
        peer_label="RFF-4000 ridge (data-independent), same labels",
    ),
    Figure(
        "cifar10-cnn",
        r"CNN NCM, learned metric d=64: per-class rate",
        "CIFAR-10 CNN features, NCM with a learned metric (d = 64)",
        peer_figure=r"CNN NCM, l2: per-class rate",
        peer_label="NCM, Euclidean, same rows",
    ),
    Figure(
        "cifar10-cnn",
        r"CNN NCM, learned metric d=64, cat and truck added by add-class: add-class of 2 "
        r"classes, .*",
        "CIFAR-10 CNN features: two classes added to a learned-metric NCM",
        peer_label="learning the metric again without them",
        **_TIME,
    ),
    Figure(
        "cifar10-cnn",
        r"CNN zero-shot ancestors \(paper rule\) means, learned metric: the held classes' rate "
        r"over chance",
        "CIFAR-10 CNN features: cat and truck from the class hierarchy alone (zero-shot)",
        peer_label="chance (1 in 10)",
    ),
    Figure(
        "cifar10-bow-fisher",
        r"BoW-400 HIKE, every train row",
        "CIFAR-10, bag of words + HIKE, every train row",
        "Do additive kernels lift bags of dense SIFT words above linear (paper 000 §4.2)?",
        peer_figure=r"BoW-400 linear, every train row",
        peer_label="linear ridge on the same histograms, same run",
    ),
    Figure(
        "cifar10-bow-fisher",
        r"BoW-400 AddKPCA, every train row",
        "CIFAR-10, bag of words + AddKPCA, every train row",
    ),
    Figure(
        "cifar10-bow-fisher",
        r"BoW-400 pyramid 1x1\+2x2\+4x4 HIKE, every train row",
        "CIFAR-10, spatial-pyramid bag of words + HIKE ridge",
        "Does a pyramid bag of words with HIKE and ridge reach an exact intersection-kernel SVM?",
        peer_label="a reference pipeline (OpenCV, faiss, scikit-learn's SVC), same images",
    ),
    Figure(
        "cifar10-bow-fisher",
        r"FV-64 ridge, every train row",
        "CIFAR-10, Fisher vectors (64 Gaussians) + ridge",
        peer_label="a reference pipeline (scikit-learn's GMM, improved FV), same images",
    ),
    Figure(
        "cifar10-bow-fisher",
        r"FV-16 every 4 px ridge, every train row",
        "CIFAR-10, 4K-D Fisher vectors + ridge",
        "Do Fisher vectors beat GIST + RFF on CIFAR-10 (paper 002's direction)?",
    ),
    Figure(
        "cifar10-bow-fisher",
        r"FV-16 every 4 px NCM, learned metric, every train row",
        "CIFAR-10, 4K-D Fisher vectors + learned-metric NCM",
    ),
    Figure(
        "cifar10-bow-fisher",
        r"FV-64K PQ-8192 NCM, every train row",
        "CIFAR-10, 64K-D Fisher vectors trained as PQ codes + NCM",
        "Do 64K-D Fisher vectors trained as PQ codes match 4K-D floats (paper 002 Table 2)?",
    ),
    Figure(
        "cifar10-bow-fisher",
        r"FV-64K PQ-8192 NCM, learned metric, every train row",
        "CIFAR-10, 64K-D Fisher vectors trained as PQ codes + learned-metric NCM",
    ),
    Figure(
        "accuracy",
        r"mnist RFF-2000 all labelled/class",
        "MNIST, RFF-2000 + ridge, all labels",
        "Do our embeddings match scikit-learn's?",
        peer_figure=r"mnist sklearn RBFSampler-2000 all labelled/class",
        peer_label="scikit-learn RBFSampler-2000 + ridge, same run",
    ),
    Figure(
        "accuracy",
        r"mnist RFF-2000 10 labelled/class",
        "MNIST, RFF-2000 + ridge, 10 a class",
        peer_figure=r"mnist linear 10 labelled/class",
        peer_label="linear ridge, same run",
    ),
    Figure(
        "accuracy",
        r"20news SQRT all labelled/class",
        "20 Newsgroups, SQRT + ridge, all labels",
        peer_figure=r"20news linear all labelled/class",
        peer_label="linear ridge, same run",
    ),
    Figure(
        "ale-ssl",
        r"mnist, ALE \+ SSL \(eq\. 3\), 300 labelled/class, MiAP",
        "MNIST, ALE + SSL, 300 a class: MiAP",
        "Does semi-supervised ALE (paper 001) beat linear ridge?",
        peer_label="linear ridge, same labels",
    ),
    Figure(
        "ale-ssl",
        r"mnist, ALE \+ SSL \(eq\. 3\), 3 labelled/class, MiAP",
        "MNIST, ALE + SSL, 3 a class: MiAP",
        peer_label="linear ridge, same labels",
    ),
    Figure(
        "ncm-metric",
        r"mnist: NCM, learned metric d=64, top-1 error",
        "MNIST, NCM with a learned metric (d = 64)",
        "Does a learned metric help nearest class mean (paper 002)?",
        peer_label="NCM, Euclidean",
        words=_LOWER_ERROR,
        lower_is_better=True,
    ),
    Figure(
        "natural-ncm",
        r"NCM, learned metric d=64: top-5 error",
        "CIFAR-10 GIST, NCM with a learned metric (d = 64), top-5 error",
        "And on natural images?",
        peer_figure=r"NCM, l2: top-5 error",
        peer_label="NCM, Euclidean, same run",
        words=_LOWER_ERROR,
        lower_is_better=True,
    ),
    Figure(
        "natural-ncm",
        r"NCM, learned metric d=64, cat and truck added by add-class: add-class of 2 classes, .*",
        "CIFAR-10 GIST: two classes added to a learned-metric NCM",
        "What does a new class cost?",
        peer_label="learning the metric again without them",
        **_TIME,
    ),
    Figure(
        "ncm-metric",
        r"mnist: kNN, learned metric d=64 \(k validated\), top-1 error",
        "MNIST, kNN with a learned metric",
        peer_figure=r"mnist: kNN, l2 \(k validated\), top-1 error",
        peer_label="kNN, Euclidean, same run",
        words=_LOWER_ERROR,
        lower_is_better=True,
    ),
    Figure(
        "ncm-metric",
        r"mnist: zero-shot prior, 1 images per new class, error",
        "MNIST, new class from 1 image, with the prior",
        peer_label="the same without the prior",
        words=_LOWER_ERROR,
        lower_is_better=True,
    ),
    Figure(
        "hope",
        r"mnist en-HOPE 20 learned exemplars 2-D kNN error",
        "MNIST, 2-D en-HOPE (20 learned exemplars), kNN error",
        "Does 2-D en-HOPE really beat kNN in the full space (paper 003)?",
        peer_figure=r"mnist full-D 1-NN error",
        peer_label="1-NN on the 784-D pixels, same run",
        words=_LOWER_ERROR,
        lower_is_better=True,
    ),
    Figure(
        "hope",
        r"mnist en-HOPE 20 learned exemplars 2-D kNN error",
        "MNIST, 2-D en-HOPE (20 learned exemplars), kNN error",
        "And against the paper's own figure?",
        words=_LOWER_ERROR,
        lower_is_better=True,
    ),
    Figure(
        "natural-hope",
        r"en-HOPE 2-D, 20 k-means exemplars, kNN error",
        "CIFAR-10 GIST, 2-D en-HOPE (20 k-means exemplars), kNN error",
        "And on natural images?",
        peer_label="10-NN on the full GIST, same run",
        words=_LOWER_ERROR,
        lower_is_better=True,
    ),
    Figure(
        "hope",
        r"mnist en-HOPE classify 10000 test rows",
        "MNIST, en-HOPE: classify 10,000 test images",
        "How much faster is classifying against exemplars?",
        peer_figure=r"mnist faiss IndexFlatL2 1-NN classify",
        peer_label="faiss IndexFlatL2 1-NN, same run",
        **_TIME,
    ),
    Figure(
        "local",
        r"mnist even accuracy ours",
        "local learning (paper 004), MNIST: accuracy",
        "Does predicting neighbourhoods (paper 004) hold its accuracy?",
        peer_label="Local B (paper 004's baseline), same run",
    ),
    Figure(
        "natural-local",
        r"mean accuracy ours",
        "CIFAR-10 GIST attributes (six: 3 single classes, 3 groups), balanced accuracy",
        "And where nearest neighbours mislead (natural images)?",
        peer_figure=r"mean accuracy local b",
        peer_label="Local B (paper 004's baseline), same run",
    ),
    Figure(
        "rare-local",
        r"gist mean accuracy ours",
        "CIFAR-10 GIST, one class vs nine at 6% positives: balanced accuracy of train --method "
        "local",
        "Where paper 004's claim lives (rare attributes): is it level with a global classifier?",
        peer_figure=r"gist mean accuracy global b",
        peer_label="Global B (balanced linear classifier on all rows), same run",
    ),
    Figure(
        "rare-local",
        r"cnn mean accuracy ours",
        "CIFAR-10 CNN features, one class vs nine at 6% positives: balanced accuracy",
        peer_figure=r"cnn mean accuracy global b",
        peer_label="Global B, same run",
    ),
    Figure(
        "rare-local",
        r"gist attributes mean accuracy ours",
        "CIFAR-10 GIST, has wheels and flies at 6% positives: balanced accuracy",
        peer_figure=r"gist attributes mean accuracy global b",
        peer_label="Global B, same run",
    ),
)

FALLBACK_FIGURES = 3


def newest(rows: list[dict]) -> list[dict]:
    """Each figure (benchmark, name, unit) once: its newest run at the largest scale it ran at."""
    best: dict[tuple[str, str], tuple[tuple, dict]] = {}
    for position, r in enumerate(rows):
        key = (_scale_rank(r["scale"]), r["time"] or "", position)
        figure = (r["benchmark"], r["name"], r["unit"])
        if figure not in best or key > best[figure][0]:
            best[figure] = (key, r)
    return [r for _, r in sorted(best.values(), key=lambda kr: kr[0][2])]


def resolve(figure: Figure, rows: list[dict]) -> dict | None:
    """The figure's row (see the module docstring) with its peer: ``peer``, ``peer_value`` and
    ``ratio`` filled from the spec, plus ``label``, ``question`` and ``reading``; None when the
    results hold no such figure."""
    pattern = re.compile(figure.name)
    mine = [r for r in newest(rows) if r["benchmark"] == figure.benchmark]
    matches = [
        r for r in mine
        if pattern.fullmatch(r["name"]) and (not figure.unit or r["unit"] == figure.unit)
    ]  # fmt: skip
    if not matches:
        return None
    row = max(matches, key=lambda r: (_scale_rank(r["scale"]), r["time"] or ""))
    row = [r for r in matches if _same_run(r, row)][-1]
    peer, peer_value = figure.peer_label or row["peer"] or "", row["peer_value"]
    if figure.peer_figure:
        peer_pattern = re.compile(figure.peer_figure)
        runs = [r for r in rows if r["benchmark"] == figure.benchmark and _same_run(r, row)]
        peers = [r for r in runs if peer_pattern.fullmatch(r["name"])]
        peer_value = peers[-1]["value"] if peers else None
    elif figure.paper:
        peer_value, peer = figure.paper[0], figure.peer_label or figure.paper[1]
    ratio = row["ratio"]
    if figure.peer_figure or figure.paper:
        ratio = row["value"] / peer_value if peer_value else None
    return {
        **row,
        "peer": peer,
        "peer_value": peer_value,
        "ratio": ratio,
        "label": figure.label,
        "question": figure.question,
        "reading": reading(ratio, figure),
        "lower_is_better": figure.lower_is_better,
    }


def reading(ratio: float | None, figure: Figure) -> str:
    """The ratio as a reader says it: "13.5× faster", "1.04× lower error", "on par"."""
    if ratio is None or ratio != ratio or ratio < 0 or ratio == float("inf"):
        return ""
    if figure.share_of:
        share = "< 1%" if 0 < ratio < 0.01 else f"{ratio:.0%}"
        return f"{share} of {figure.share_of}"
    if ratio == 0:
        return ""
    advantage = 1 / ratio if figure.lower_is_better else ratio
    if 0.97 <= advantage <= 1.03:
        return "on par"
    better, worse = figure.words
    if advantage > 1:
        return f"{_times(advantage)} {better}"
    return f"{_times(1 / advantage)} {worse}"


def headlines(rows: list[dict]) -> list[dict]:
    """The summary page's rows: every figure with a question that the results hold."""
    found = [resolve(f, rows) for f in FIGURES if f.question]
    return [h for h in found if h is not None]


def summary(benchmark: str, rows: list[dict]) -> list[dict]:
    """The figures that open a benchmark's section: those named here, else its first
    :data:`FALLBACK_FIGURES` figures with a peer (newest run at the largest scale)."""
    named = [f for f in FIGURES if f.benchmark == benchmark]
    if named:
        found, seen = [], set()
        for f in named:
            h = resolve(f, rows)
            if h is not None and (h["name"], h["peer"]) not in seen:
                seen.add((h["name"], h["peer"]))
                found.append(h)
        if found:
            return found
    mine = [r for r in newest(rows) if r["benchmark"] == benchmark]
    largest = max((_scale_rank(r["scale"]) for r in mine), default=0)
    rated = [r for r in mine if r["ratio"] is not None and _scale_rank(r["scale"]) == largest]
    return [{**r, "label": r["name"], "question": "", "reading": ""} for r in rated][
        :FALLBACK_FIGURES
    ]


def _same_run(a: dict, b: dict) -> bool:
    return (a["scale"], a["time"], a["commit"]) == (b["scale"], b["time"], b["commit"])


def _scale_rank(scale: str) -> int:
    return SCALES.index(scale) if scale in SCALES else -1


def _times(x: float) -> str:
    return f"{x:.0f}×" if x >= 10 else f"{x:.1f}×" if x >= 2 else f"{x:.2f}×"


@dataclass(frozen=True)
class Curve:
    """One panel of the summary's accuracy plot: a benchmark's per-class rate against labelled
    images a class, one line per method, with the paper's or reference figures recorded as the
    peers of those figures drawn beside them."""

    title: str
    benchmark: str
    pattern: str
    """A regular expression with the groups ``method`` and ``n`` (labelled images a class)."""
    methods: tuple[tuple[str, str], ...]
    """(method as recorded, the name in the legend), in legend order."""
    reference: str = ""
    """The legend name of the peer figures recorded beside these (empty: none drawn)."""
    peers: tuple[str, ...] = ()
    """Methods that are another library's (drawn dotted, with crosses)."""


CURVES = (
    Curve(
        "CIFAR-10, GIST of 32 × 32 images",
        "cifar10-gist",
        r"gist-tiny (?P<method>\S+) (?P<n>\d+) labelled/class.*",
        (
            ("linear", "linear ridge"),
            ("RFF-4000", "RFF-4000 + ridge"),
            ("Nystrom-500", "Nyström-500 + ridge"),
        ),
        reference="reference (numpy GIST + scikit-learn)",
    ),
    Curve(
        "MNIST, paper 000's protocol",
        "accuracy",
        r"mnist (?P<method>.+) (?P<n>\d+) labelled/class",
        (
            ("linear", "linear ridge"),
            ("RFF-2000", "RFF-2000 + ridge"),
            ("Nystrom", "Nyström + ridge"),
            ("SQRT", "SQRT + ridge"),
            ("sklearn RBFSampler-2000", "scikit-learn RBFSampler + ridge"),
        ),
        peers=("sklearn RBFSampler-2000",),
    ),
    Curve(
        "CIFAR-10 GIST, paper 000's embeddings",
        "natural-embeddings",
        r"CIFAR-10 GIST, (?:few|many) labels (?P<method>\S+) (?P<n>\d+) labelled/class",
        (
            ("linear", "linear ridge"),
            ("RFF-2000", "RFF-2000 + ridge"),
            ("RFF-4000", "RFF-4000 + ridge"),
            ("Nystrom-50", "Nyström-50 + ridge"),
            ("Nystrom-500", "Nyström-500 + ridge"),
            ("AddKPCA-640", "AddKPCA + ridge"),
            ("PCALap", "PCALap + ridge"),
            ("RPLap", "RPLap + ridge"),
        ),
    ),
    Curve(
        "CIFAR-10 GIST, semi-supervised (paper 001)",
        "natural-ale",
        r"(?P<method>.+), (?P<n>\d+) labelled/class, per-class rate",
        (
            ("linear ridge", "linear ridge"),
            ("RFF-2000 ridge", "RFF-2000 + ridge"),
            ("ALE + SSL (eq. 3)", "ALE + SSL"),
            ("ALE + eigenvalue ridge", "ALE + eigenvalue ridge"),
        ),
    ),
    Curve(
        "MNIST, semi-supervised (paper 001)",
        "ale-ssl",
        r"mnist, (?P<method>.+), (?P<n>\d+) labelled/class, per-class rate",
        (
            ("linear ridge", "linear ridge"),
            ("ALE + SSL (eq. 3)", "ALE + SSL"),
            ("ALE + eigenvalue ridge", "ALE + eigenvalue ridge"),
        ),
    ),
)
