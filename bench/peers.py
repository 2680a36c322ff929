"""What each figure of the full tables stands against, for the figures a benchmark recorded with
no peer beside them.

Most figures carry their peer (a library, a paper, a machine limit) from the run that measured
them. Of the rest, many are measured against another figure of the same run: each method's
accuracy against linear ridge at the same labels, imgscale's read of a layout against
zarr-python's read of the same layout. :data:`PEER_FIGURES` names those pairs, so the documents
give the ratio. What remains is there for another reason (the baseline the others are compared
with, a setup or fitting cost, one cell of a layout matrix, the machine's limit), and
:data:`PURPOSES` says which, so that no table row leaves the reader guessing. Both are chosen in
``peers.toml`` beside this module rather than in the benchmarks, as the headlines are
(:mod:`imgscale.bench.headlines`); a figure that neither a benchmark nor a rule there explains is
listed by :func:`unexplained`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib.resources import files

from imgscale.bench import toml_tables


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


_TABLES = toml_tables.read(
    files("imgscale.bench") / "peers.toml", {"peer_figure": PeerFigure, "purpose": Purpose}
)
PEER_FIGURES: tuple[PeerFigure, ...] = _TABLES["peer_figure"]
"""The figures measured against another figure of their run, first match first."""
PURPOSES: tuple[Purpose, ...] = _TABLES["purpose"]
"""Why each remaining figure is there, first match first."""


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
