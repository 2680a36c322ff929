"""Which figures are stale: measured at a commit before the code they measure last changed.

The code a benchmark measures is its own module and the modules defining what it imports from
imgscale directly (``from imgscale.pipeline import RidgeClassifier`` names
``pipeline/classify/ridge.py``) or from its own package (another distribution's benchmark), found
from the imported objects, so a new benchmark needs no declaration. A figure measured at commit C
is stale when ``git rev-list C..HEAD`` lists a commit touching one of those files. Without git,
outside a checkout (an installed sdist) or for a commit git does not know, nothing is marked:
staleness is unknown, not an error.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from imgscale.bench.registry import Benchmark

# The harness every benchmark runs in (registration, synthetic stores and RSS sampling, the
# cluster connection) is not what any one of them measures; a change to it (an error message, a
# new helper) must not mark every figure stale.
_HARNESS = {"imgscale.bench.registry", "imgscale.bench.common", "imgscale.jobs.cluster.connection"}


@dataclass(frozen=True)
class Change:
    """The code behind a figure changed after it was measured: ``commits`` commits since, the
    newest ``newest`` (a short hash)."""

    commits: int
    newest: str


def measured_files(bench: Benchmark) -> list[Path]:
    """The benchmark's module and the files of the imgscale modules it imports names from."""
    module = inspect.getmodule(bench.run)
    names = {module.__name__} if module else set()
    # imgscale's modules, and the benchmark's own package's (another distribution's helpers).
    packages = ("imgscale.", f"{module.__name__.split('.')[0]}.") if module else ()
    for value in vars(module).values() if module else ():
        source = value.__name__ if inspect.ismodule(value) else getattr(value, "__module__", None)
        if isinstance(source, str) and source.startswith(packages):
            names.add(source)
    files = []
    for name in sorted(names - _HARNESS):
        path = getattr(sys.modules.get(name), "__file__", None)
        if path:
            files.append(Path(path).resolve())
    return files


def changes(rows: list[dict], known: dict[str, Benchmark]) -> dict[tuple[str, str], Change]:
    """(benchmark, commit) → :class:`Change` for every measured commit whose code changed since;
    empty when git or the checkout is not there."""
    root = _checkout()
    if root is None:
        return {}
    out = {}
    for benchmark, commit in sorted({(r["benchmark"], r["commit"]) for r in rows}):
        bench = known.get(benchmark)
        if not commit or bench is None:
            continue
        files = [str(f.relative_to(root)) for f in measured_files(bench) if f.is_relative_to(root)]
        later = _git(root, "rev-list", f"{commit}..HEAD", "--", *files) if files else None
        if later:
            hashes = later.split()
            out[benchmark, commit] = Change(len(hashes), hashes[0][:7])
    return out


def _checkout() -> Path | None:
    """The root of the git checkout imgscale runs from; None without git or a checkout."""
    import imgscale

    source = Path(imgscale.__file__).resolve().parent
    top = _git(source, "rev-parse", "--show-toplevel")
    return Path(top).resolve() if top else None


def _git(where: Path, *args: str) -> str | None:
    """git's output, or None when git is missing or refuses (e.g. a commit it does not know)."""
    try:
        done = subprocess.run(
            ["git", "-C", str(where), *args], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None
