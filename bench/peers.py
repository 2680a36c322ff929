"""What each figure of the full tables stands against, for the figures a benchmark recorded with
no peer beside them.

Most figures carry their peer (a library, a paper, a machine limit) from the run that measured
them. Of the rest, many are measured against another figure of the same run: each method's
accuracy against linear ridge at the same labels, imgscale's read of a layout against
zarr-python's read of the same layout. :data:`PEER_FIGURES` names those pairs, so the documents
give the ratio. What remains is there for another reason (the baseline the others are compared
with, a setup or fitting cost, one cell of a layout matrix, the machine's limit), and
:data:`PURPOSES` says which, so that no table row leaves the reader guessing. Both are chosen here
rather than in the benchmarks, as the headlines are (:mod:`imgscale.bench.headlines`); a figure
that neither a benchmark nor a rule here explains is listed by :func:`unexplained`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class PeerFigure:
    """Figures of ``benchmark`` matching ``name`` stand against the figure of the same run that
    ``peer`` matches: a regular expression in which ``\\1``, ``\\2``, … stand for ``name``'s
    groups, as literal text."""

    benchmark: str
    name: str
    peer: str
    label: str
    """What the peer is, in the words of the table's peer column."""


@dataclass(frozen=True)
class Purpose:
    """Figures matching ``name`` (of ``benchmark``; ``*``: any) are there for ``text``."""

    benchmark: str
    name: str
    text: str


_LINEAR = "linear ridge, same labels, same run"

PEER_FIGURES = (
    # Accuracy curves: each method against linear ridge at the same labelled images a class.
    PeerFigure(
        "accuracy",
        r"(\S+) (?!linear )(.+) (\S+) labelled/class",
        r"\1 linear \3 labelled/class",
        _LINEAR,
    ),
    PeerFigure(
        "natural-embeddings",
        r"(CIFAR-10 GIST, \w+ labels) (?!linear )(\S+) (\S+) labelled/class",
        r"\1 linear \3 labelled/class",
        _LINEAR,
    ),
    PeerFigure(
        "natural-ale",
        r"(?!linear ridge)(.+), (\S+) labelled/class, (.+)",
        r"linear ridge, \2 labelled/class, \3",
        _LINEAR,
    ),
    PeerFigure(
        "cifar10-gist",
        r"gist-tiny (?!linear )(\S+) (.+)",
        r"gist-tiny linear \2",
        _LINEAR,
    ),
    PeerFigure(
        "cifar10-bow-fisher",
        r"BoW-(\d+) (?!linear)(\w+), (.+)",
        r"BoW-\1 linear, \3",
        "BoW with linear ridge, same labels, same run",
    ),
    PeerFigure(
        "cifar10-bow-fisher",
        r"FV-\d+ .*, every train row(.*)",
        r"GIST RFF-4000, every train row\1",
        "GIST + RFF-4000 + ridge, same train rows, same run",
    ),
    PeerFigure(
        "cifar10-bow-fisher",
        r"GIST RFF-\d+, every train row(.*)",
        r"GIST linear, every train row\1",
        "GIST + linear ridge, same run",
    ),
    PeerFigure(
        "photos-bow-fisher",
        r"BoW-(\d+) (?!linear)(\w+), (.+)",
        r"BoW-\1 linear, \3",
        "BoW with linear ridge, same run",
    ),
    # CNN features against GIST-320 under the same classifier; GIST's own figures against its
    # linear ridge at the same labels.
    PeerFigure(
        "cifar10-cnn",
        r"CNN (.+), (\d+) labelled/class",
        r"GIST-320 \1, \2 labelled/class",
        "the same classifier on GIST-320, same labels, same run",
    ),
    PeerFigure(
        "cifar10-cnn",
        r"GIST-320 (?!linear ridge)(.+), (\d+) labelled/class",
        r"GIST-320 linear ridge, \2 labelled/class",
        _LINEAR,
    ),
    PeerFigure(
        "cifar10-cnn",
        r"(FV-\d+) (.+), (\d+) labelled/class",
        r"GIST-320 \2, \3 labelled/class",
        "the same classifier on GIST-320, same labels, same run",
    ),
    PeerFigure(
        "ale-ceiling",
        r"(\w+?)_ale_choice_(?!paper_defaults)\w+_(\w+?)",
        r"\1_ale_choice_paper_defaults_\2",
        "ALE with the paper's defaults, same labels, same run",
    ),
    # Paper 004: ours against Local B, the paper's baseline; variants of ours against ours.
    PeerFigure(
        "local",
        r"(.*)accuracy ours",
        r"\1accuracy local b",
        "Local B (paper 004's baseline), same run",
    ),
    PeerFigure(
        "local",
        r"(.*)accuracy ours compressed",
        r"\1accuracy ours",
        "ours, uncompressed, same run",
    ),
    PeerFigure(
        "natural-local",
        r"(.*)accuracy ours",
        r"\1accuracy local b",
        "Local B (paper 004's baseline), same run",
    ),
    PeerFigure(
        "natural-local",
        r"(.*)accuracy ours (rff|S=\d+|S=\d+ far)",
        r"\1accuracy ours",
        "ours with the paper's settings, same run",
    ),
    # Paper 004 on rare attributes: ours uncompressed against ours (the default), its settings
    # against it, the fix on Local against Global B, which it is meant to reach.
    PeerFigure(
        "rare-local",
        r"(.*)accuracy ours uncompressed",
        r"\1accuracy ours",
        "ours (compressed indicators, the default), same run",
    ),
    PeerFigure(
        "rare-local",
        r"(.*)accuracy ours other signs",
        r"\1accuracy ours",
        "ours with its own signs, same run",
    ),
    PeerFigure(
        "rare-local",
        r"(.*)accuracy ours uncompressed (rff|k=\d+|alpha=\S+)",
        r"\1accuracy ours uncompressed",
        "ours uncompressed, same run",
    ),
    PeerFigure(
        "rare-local",
        r"(.*)accuracy (local fixed|local weighted|ours fixed without prior)",
        r"\1accuracy global b",
        "Global B, same run",
    ),
    # Speed: our engine or path against the plain one on the same data.
    PeerFigure(
        "io",
        r"(.*) imgscale direct (cold|warm)",
        r"\1 zarr-python \2",
        "zarr-python reading the same layout, same run",
    ),
    PeerFigure(
        "io",
        r"(codes M=\d+: \d+ rows a chunk): read through the store \(CodesChunkReader\), (\d+) "
        r"process",
        r"\1: read only, \2 plain process\(es\), no Dask",
        "the same chunks read by plain processes, same run",
    ),
    PeerFigure(
        "ncm",
        r"(\d+)-class means, raw store, wall",
        r"\1-class means, PQ store \(M=\d+\), wall",
        "the same class means from PQ codes, same run",
    ),
    PeerFigure(
        "ncm",
        r"class means throughput, raw",
        r"class means throughput, PQ",
        "class means from PQ codes, same run",
    ),
    PeerFigure(
        "hope",
        r"(\w+) en-HOPE classify \d+ test rows",
        r"\1 faiss IndexFlatL2 1-NN classify",
        "faiss IndexFlatL2 1-NN, same run",
    ),
    PeerFigure(
        "hope",
        r"(\w+) en-HOPE adam lowest validation error",
        r"\1 en-HOPE lbfgs lowest validation error",
        "L-BFGS (full batch), same run",
    ),
)

_BASELINE = "the baseline the other methods of this table are measured against"
_SETUP = "setup before the timed work: not a claim"
_COST = "the cost of the step, beside the accuracy or speed it buys"
_ENGINE = "another engine reading the same layout: the peer of imgscale's own read"

PURPOSES = (
    Purpose("machine", r".*", "the machine's limit: the peer of the speed figures"),
    Purpose("*", r".*\bGEMM\b.*(core|cores|machine\))", "the machine's limit, measured in the run"),
    Purpose("*", r"(synthetic|raw) store build", _SETUP),
    Purpose("accuracy", r"\S+ linear \S+ labelled/class", _BASELINE),
    Purpose("natural-embeddings", r".* linear \S+ labelled/class", _BASELINE),
    Purpose("natural-ale", r"linear ridge, .*", _BASELINE),
    Purpose("ale-ssl", r".*, linear ridge, .*", _BASELINE),
    Purpose("cifar10-gist", r"gist-tiny linear .*", _BASELINE),
    Purpose("cifar10-bow-fisher", r"(BoW-\d+|GIST) linear, .*", _BASELINE),
    Purpose("cifar10-bow-fisher", r".* (ingest|vocabulary fit).*, wall", _COST),
    Purpose(
        "cifar10-bow-fisher",
        r"reference .*, every train row",
        "the independent reference pipeline, the peer of imgscale's figures beside it",
    ),
    Purpose("cifar10-bow-fisher", r"reference pipeline, wall", _COST),
    Purpose("cifar10-bow-fisher", r"reference FV-\d+, wall", _COST),
    Purpose(
        "cifar10-bow-fisher",
        r".*, every train row: top\d error",
        "the top-1 and top-5 errors, beside their per-class rate",
    ),
    Purpose(
        "cifar10-bow-fisher",
        r"FV-\d+ NCM, every train row",
        "NCM on the float Fisher vectors: the peer of NCM on their PQ codes",
    ),
    Purpose("photos-bow-fisher", r"BoW-\d+ linear, .*", _BASELINE),
    Purpose(
        "photos-bow-fisher",
        r"FV-\d+ ridge, every train row: top\d error",
        "the Fisher vectors' top-1 and top-5 errors, beside their per-class rate",
    ),
    Purpose(
        "photos-bow-fisher",
        r"reference .*, every train row",
        "the independent reference pipeline, the peer of imgscale's figures beside it",
    ),
    Purpose("photos-bow-fisher", r".*(ingest|vocabulary fit|reference pipeline).*, wall", _COST),
    Purpose("cifar10-cnn", r"GIST-320 linear ridge, \d+ labelled/class", _BASELINE),
    Purpose("cifar10-cnn", r".*(ingest \w+ split|: train), wall", _COST),
    Purpose("cifar10-cnn", r"FV vocabulary fit, wall", _COST),
    Purpose(
        "small-ingest",
        r".*, (no cluster|running cluster): stage .*",
        "where one ingest's seconds went, stage by stage: the breakdown of the figure above it",
    ),
    Purpose(
        "small-ingest",
        r"ingest --features gist of .*",
        "a ratio or a difference already: the plain loop or describing, same run, is inside it",
    ),
    Purpose("ale-ceiling", r"\w+_ale_choice_paper_defaults_\w+", _BASELINE),
    Purpose(
        "ale-ceiling",
        r"\w+_ale_most_functions_of_one_direction",
        "a diagnostic: how many of the eigenfunctions kept come from one direction",
    ),
    Purpose(
        "local",
        r".*accuracy (local|global) [bum]+l?",
        "a baseline of paper 004 (Local/Global, balanced/unbalanced, metric learning)",
    ),
    Purpose("natural-local", r".*accuracy (local|global) [bum]+l?", "a baseline of paper 004"),
    Purpose("local", r".* offline fit ours", _COST),
    Purpose(
        "natural-local",
        r".* neighbour purity \(k=\d+\)",
        "how often the nearest rows share the query's label: whether neighbours mislead",
    ),
    Purpose(
        "natural-local",
        r"mean accuracy oracle",
        "the ceiling: ours trained on each query's true neighbourhood",
    ),
    Purpose(
        "natural-local", r"mean ours minus .*", "the paper's claim as a difference: target named"
    ),
    Purpose(
        "rare-local",
        r".*accuracy (local|global) [bum]+l?( k=\d+)?",
        "a baseline of paper 004 (Local/Global, balanced/unbalanced, metric learning)",
    ),
    Purpose(
        "rare-local",
        r".* mean accuracy oracle",
        "the ceiling: ours trained on each query's true neighbourhood",
    ),
    Purpose(
        "rare-local", r".* mean ours.* minus .*", "the paper's claim as a difference: target named"
    ),
    Purpose("io", r".* (zarr-python|zarrs|tensorstore) (cold|warm)", _ENGINE),
    Purpose("io", r"read np\.fromfile (cold|warm)", "the floor: the file read by numpy alone"),
    Purpose(
        "io",
        r".*read only, \d+ plain process\(es\), no Dask",
        "the floor without Dask: the peer of the passes",
    ),
    Purpose("io", r".*write .*", "the cost of writing the layout, for choosing one"),
    Purpose("scale", r"store of \d+ rows, GiB", "the store's size: how far past RAM a pass goes"),
    Purpose("ridge", r"ridge fit throughput", "the fit's rows a second, for comparing scales"),
    Purpose("embed", r"RFF-\d+ fit \(bandwidth pass\)", _COST),
    Purpose(
        "embed",
        r".* / GEMM rate",
        "the share of the machine's GEMM rate the pass reaches (a fraction: 1 is the limit)",
    ),
    Purpose("embed", r"sklearn at full size", "the peer's run at full size: 0 means it failed"),
    Purpose("pq", r".*codec training", _COST),
    Purpose("pq", r".*peak RSS \(client \+ workers\)", "memory of the encode pass, for sizing"),
    Purpose("ale", r"read_pass_seconds", "one read pass of the store: the floor of each pass"),
    Purpose("ale", r".*_per_second", "the rate of the timed step, for comparing scales"),
    Purpose("ale", r"ssl_val_\w+", "the accuracy the timed run reached, as a check"),
    Purpose("ncm", r"SGD .*", "the metric learner's speed, beside the error it reaches"),
    Purpose("ncm", r"\d+-class means, PQ store .*", "the peer of the raw store's class means"),
    Purpose("ncm", r"class means throughput, PQ", "the peer of the raw store's class means"),
    Purpose("ncm-metric", r"\w+: NCM, l2, top-\d error", _BASELINE),
    Purpose(
        "ncm-metric",
        r".*: (held-out classes added by their means|zero-shot prior), .*",
        "a new class without retraining; chance is 1 - 1/classes",
    ),
    Purpose("hope", r"one objective\+gradient pass, .*", "one pass, the unit of training time"),
    Purpose("hope", r".* training time", _COST),
    Purpose("hope", r".* lbfgs lowest validation error", "the peer of Adam's error"),
    Purpose(
        "hope",
        r"\w+ (faiss IndexFlatL2|sklearn brute) 1-NN classify",
        "a peer of en-HOPE's classification time",
    ),
    Purpose("natural-ncm", r".*: train, wall", _COST),
    Purpose(
        "describe-speed",
        r"(dense SIFT, OpenCV loop( on 1 thread)?|EM iteration, scikit-learn GaussianMixture) "
        r"\(1 process\)",
        "the peer of the worker figures below, in its own unit",
    ),
    Purpose("natural-hope", r"full-D \d+-NN error", "the peer of the 2-D en-HOPE error"),
    Purpose("natural-hope", r"en-HOPE training time", _COST),
    Purpose(
        "images",
        r"plain loop: .*",
        "the peer of the ingest figures: a plain Python loop, one process",
    ),
    Purpose(
        "images",
        r"\w+: (listing|read only)",
        "a stage before decoding: where the time goes",
    ),
)


def annotate(run: list[dict]) -> list[dict]:
    """The rows of one run (one benchmark, scale and time), each peerless row given its peer
    figure of the run (``peer``, ``peer_value``, ``ratio``) or its ``purpose``."""
    by_name = {r["name"]: r for r in run}
    out = []
    for row in run:
        if row.get("peer_value") is None:
            row = {**row, **_peer_of(row, by_name)}
        out.append(row)
    return out


def unexplained(run: list[dict]) -> list[str]:
    """Names of the run's figures with neither a peer nor a purpose."""
    return [
        r["name"] for r in annotate(run) if r.get("peer_value") is None and not r.get("purpose")
    ]


def _peer_of(row: dict, by_name: dict[str, dict]) -> dict:
    for rule in PEER_FIGURES:
        match = re.fullmatch(rule.name, row["name"]) if rule.benchmark == row["benchmark"] else None
        if not match:
            continue
        wanted = re.compile(_expand(rule.peer, match))
        peers = [r for name, r in by_name.items() if name != row["name"] and wanted.fullmatch(name)]
        if peers and peers[-1]["value"]:
            value = peers[-1]["value"]
            return {"peer": rule.label, "peer_value": value, "ratio": row["value"] / value}
    for purpose in PURPOSES:
        if purpose.benchmark in ("*", row["benchmark"]) and re.fullmatch(purpose.name, row["name"]):
            return {"purpose": purpose.text}
    return {}


def _expand(template: str, match: re.Match) -> str:
    """``template`` (a regular expression) with ``\\1``, ``\\2``, … replaced by ``match``'s groups
    as literal text."""
    return re.sub(r"\\(\d)", lambda g: re.escape(match.group(int(g.group(1)))), template)
