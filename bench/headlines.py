"""The figures that answer each benchmark's question, chosen in ``headlines.toml`` beside this
module rather than in the benchmarks: one ``[[figure]]`` entry a figure, read into a
:class:`Figure`, and one ``[[curve]]`` a panel of the summary's accuracy plot, read into a
:class:`Curve`.

Each :class:`Figure` names a recorded figure of one benchmark (a regular expression matched
against the whole figure name), says what a reader calls it and what it is measured against.
Figures with a ``question`` are the headlines of ``docs/README.md``; every figure named here
opens its benchmark's section in the summary at the top of ``docs/benchmarks.md`` or
``docs/results.md``. A benchmark not named here is summarised by its first few figures that have
a peer, so a new benchmark needs no entry until one of its figures should be a headline.

The figure shown is the newest run of that figure at the largest scale it ran at, among the runs
not marked noisy (:mod:`imgscale.bench.calibration`): a figure taken on a busy machine is never a
headline, and one measured only on a busy machine has none; when the expression matches several
figures of that run (``ridge, rho validated, \\d+ rows``), the last one recorded (the benchmarks
record sizes in increasing order). Its peer is, in order: another figure of the same run
(``peer_figure``), a paper's figure (``paper``), or the peer or limit the benchmark recorded
beside it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib.resources import files

from imgscale.bench import toml_tables
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


_TABLES = toml_tables.read(
    files("imgscale.bench") / "headlines.toml", {"figure": Figure, "curve": Curve}
)
FIGURES: tuple[Figure, ...] = _TABLES["figure"]
"""The named figures, in the order bench/headlines.toml gives them."""
CURVES: tuple[Curve, ...] = _TABLES["curve"]
"""The panels of the summary's accuracy plot, in order."""

FALLBACK_FIGURES = 3


def newest(rows: list[dict]) -> list[dict]:
    """Each figure (benchmark, name, unit) once: its newest run at the largest scale it ran at,
    of the runs not marked noisy."""
    best: dict[tuple[str, str], tuple[tuple, dict]] = {}
    for position, r in enumerate(rows):
        if r.get("noisy"):
            continue
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
    ratio, ratio_min, ratio_max = row["ratio"], row.get("ratio_min"), row.get("ratio_max")
    if figure.peer_figure or figure.paper:
        ratio = row["value"] / peer_value if peer_value else None
        # Against a paper's one figure the ratio spreads as ours does; against another figure of
        # the run there are no pairs to take ratios of, so no spread is given.
        ratio_min = ratio_max = None
        if figure.paper and ratio is not None:
            ratio_min, ratio_max = row["value_min"] / peer_value, row["value_max"] / peer_value
    return {
        **row,
        "peer": peer,
        "peer_value": peer_value,
        "ratio": ratio,
        "ratio_min": ratio_min,
        "ratio_max": ratio_max,
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
