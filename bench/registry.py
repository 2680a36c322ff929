"""The benchmarks `imgscale bench` knows, and what each one is handed when it runs.

A benchmark is a function ``suite(ctx: Context) -> list[dict]`` in a module of this package or
of another installed distribution, decorated with :func:`benchmark`; it returns records made by
:func:`imgscale.bench.common.record` (ours beside a peer measured in the same run, or beside a
machine limit in ``ctx.limits``) and may draw PNG plots into ``ctx.plot(name)``. To register a
new one, e.g. ``bench/ridge.py``::

    @benchmark("ridge", "streamed ridge vs scikit-learn ...")
    def suite(ctx: Context) -> list[dict]:
        rows = ctx.pick(tiny=2_000, small=20_000, medium=1_000_000, large=1_000_000)
        ...

and add the module's name to :data:`MODULES` (one line); another distribution (the papers'
reproductions in ``reproductions/``) names its modules under the :data:`ENTRY_POINTS` group
instead, and ``imgscale.bench`` (its ``__init__``) gives it the names to import.
``kind="accuracy"`` puts its figures in docs/results.md, the default ``"speed"`` in
docs/benchmarks.md; the first paragraph of the module's docstring is printed there as what the
benchmark measures. ``imgscale bench --list`` shows it, and ``imgscale bench ridge --scale tiny``
runs it. Sizes come from ``ctx.pick``, one per scale: tiny is a toy that CI runs end to end in
seconds, small finishes the whole suite in minutes, medium is the size of the published figures,
large goes past the machine's memory where that means something.

A benchmark's figures are summarised at the top of its document by the few that answer its
question, and the headline figures of docs/README.md are chosen among them: both are named in
``bench/headlines.toml`` (:mod:`imgscale.bench.headlines`), one ``[[figure]]`` entry each (its
record's name, what a reader calls it, its peer), never here. A benchmark not named there is
summarised by its first figures with a peer. What it measures, for marking a figure stale once
that code changes, is read from its module's imports (:mod:`imgscale.bench.staleness`): no
declaration either.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path

SCALES = ("tiny", "small", "medium", "large")
KINDS = ("speed", "accuracy")
# How many times a benchmark measures each speed figure, by scale: the figure is the median,
# recorded with its extremes (imgscale.bench.common.record), so one load spike moves neither.
# Tiny, CI's toy run of every benchmark, takes two: three took it past its guard on a loaded
# machine, and its figures are never published.
REPEATS = {"tiny": 2, "small": 3, "medium": 3, "large": 3}

# This package's modules that define benchmarks, in the order the suite runs them.
MODULES = (
    "io",
    "scale",
    "ridge",
    "embed",
    "pq",
    "ale",
    "ncm",
    "overhead",
    "ledger",
    "images",
    "small_ingest",
    "describe_speed",
    "update",
)
# Other distributions' benchmarks (the papers' reproductions): each entry point of this group is a
# tuple of module names of the entry point's package, in the order the suite runs them, e.g.
# ``reproductions = "imgscale_reproductions:MODULES"``. They run after this package's own.
ENTRY_POINTS = "imgscale.benchmarks"


class Skipped(Exception):
    """A benchmark cannot run here (missing data, no permission); the message says why."""


@dataclass
class Context:
    """What a benchmark is handed: the scale, where things go, and the machine's limits."""

    scale: str
    out: Path
    workdir: Path
    data_dir: Path | None = None
    scheduler: str | None = None
    external_cluster: bool = False
    """True when the user gave the cluster (--scheduler): a benchmark must not start its own."""
    limits: dict[str, float] = field(default_factory=dict)
    log: Callable[[str], None] = print
    benchmark: str = ""
    repeats: int = 3
    """How many times to measure each speed figure (:data:`REPEATS` of the scale, in a suite)."""

    def pick(self, **by_scale):
        """The value given for this run's scale (every scale must be given)."""
        missing = set(SCALES) - set(by_scale)
        if missing:
            raise TypeError(f"pick() needs a value for every scale; missing {sorted(missing)}")
        return by_scale[self.scale]

    def data(self, filename: str) -> Path:
        """``DATA_DIR/filename``; :class:`Skipped` saying what is missing if it is not there."""
        if self.data_dir is None:
            raise Skipped(f"needs {filename}: pass --data-dir or set IMGSCALE_DATA")
        path = self.data_dir / filename
        if not path.exists():
            raise Skipped(f"needs {path}, which does not exist")
        return path

    def plot(self, name: str) -> Path:
        """Where the benchmark's plot ``name`` goes: ``OUT/<benchmark>-<name>.png``."""
        return self.out / f"{self.benchmark}-{name}.png"

    def scratch(self, name: str) -> Path:
        """A folder for this benchmark's stores, shared by runs with the same work dir."""
        path = self.workdir / name
        path.mkdir(parents=True, exist_ok=True)
        return path


@dataclass(frozen=True)
class Benchmark:
    name: str
    summary: str
    run: Callable[[Context], list[dict]]
    needs: tuple[str, ...] = ()
    """Data files (under the data dir) and anything else the benchmark needs, for --list."""
    kind: str = "speed"
    """"speed" (docs/benchmarks.md) or "accuracy" (docs/results.md)."""


_REGISTERED: dict[str, Benchmark] = {}


def benchmark(
    name: str, summary: str, *, needs: tuple[str, ...] = (), kind: str = "speed"
) -> Callable:
    """Register ``suite(ctx) -> records`` under ``name`` (see the module docstring); ``kind``
    says which document shows it: "speed" (benchmarks.md) or "accuracy" (results.md)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")

    def register(function: Callable[[Context], list[dict]]) -> Callable[[Context], list[dict]]:
        if name in _REGISTERED and _REGISTERED[name].run is not function:
            raise ValueError(f"benchmark {name!r} is registered twice")
        _REGISTERED[name] = Benchmark(name, summary, function, needs, kind)
        return function

    return register


def benchmarks() -> dict[str, Benchmark]:
    """Every registered benchmark by name, in :func:`benchmark_modules` order."""
    modules = benchmark_modules()
    for module in modules:
        importlib.import_module(module)
    order = {module: i for i, module in enumerate(modules)}
    ranked = sorted(_REGISTERED.values(), key=lambda b: order.get(b.run.__module__, len(order)))
    return {b.name: b for b in ranked}


def benchmark_modules() -> list[str]:
    """The full names of the modules that define benchmarks: this package's :data:`MODULES`, then
    those each installed distribution names under the :data:`ENTRY_POINTS` group (by entry point
    name); an entry point that does not load is refused naming it."""
    names = [f"imgscale.bench.{module}" for module in MODULES]
    for point in sorted(entry_points(group=ENTRY_POINTS), key=lambda point: point.name):
        try:
            modules = point.load()
        except Exception as error:
            raise RuntimeError(
                f"the benchmarks of entry point {point.name} = {point.value!r} ({ENTRY_POINTS}) "
                f"did not load: {error}"
            ) from error
        names += [f"{point.module}.{module}" for module in modules]
    return names


def data_dir(option: str | os.PathLike | None) -> Path | None:
    """The data folder: ``--data-dir``, else ``$IMGSCALE_DATA``, else none."""
    value = option or os.environ.get("IMGSCALE_DATA")
    return Path(value) if value else None
