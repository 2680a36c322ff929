"""Which figures are stale: measured before the code they measure last changed.

The code a benchmark measures is its own module and the modules defining what it imports from
imgscale directly (``from imgscale.pipeline import RidgeClassifier`` names
``pipeline/classify/ridge.py``) or from its own package (another distribution's benchmark), found
from the imported objects, so a new benchmark needs no declaration.

A suite run records the hash of that code as it ran (:func:`code_hash`, the ``code_hash`` column):
the figure is stale when the same files hash differently now. The hash is of each file's syntax
without its comments and docstrings, so a run made with uncommitted code is dated by what it
ran, not by the commit it found, and a change to comments, docstrings or documents never marks a
figure stale (the tree is printed by the Python that reads it, so one of another minor version
reads every hash as changed code). A figure recorded before runs had a hash, measured at commit
C, is stale when ``git rev-list C..HEAD`` lists a commit touching one of those files; without
git, outside a checkout (an installed sdist) or for a commit git does not know, such a figure is
not marked: staleness is unknown, not an error.
"""

from __future__ import annotations

import ast
import hashlib
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
    newest ``newest`` (a short hash); 0 and "" when only the code's hash says so (the change is
    not committed, or git is not there to count)."""

    commits: int
    newest: str

    def describe(self) -> str:
        """What changed, for a document."""
        if self.commits:
            return (
                f"{self.commits} later commit(s) changed the code it measures "
                f"(newest {self.newest})"
            )
        return "the code it measures has changed since (its source no longer has the run's hash)"


def key(row: dict) -> tuple[str, str, str]:
    """A row's run as :func:`changes` keys it: benchmark, commit and code hash."""
    return row["benchmark"], row["commit"] or "", row.get("code_hash") or ""


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


def code_hash(files: list[Path]) -> str:
    """A hash of the code in ``files``: their syntax without comments, docstrings or layout,
    whatever their paths (a checkout elsewhere measures the same code)."""
    digests = sorted(hashlib.sha256(_code(file).encode()).hexdigest() for file in files)
    return hashlib.sha256("\n".join(digests).encode()).hexdigest()[:16]


def _code(file: Path) -> str:
    """The file's syntax tree without docstrings, printed; its text where it does not parse."""
    source = file.read_text(encoding="utf-8")
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


def changes(rows: list[dict], known: dict[str, Benchmark]) -> dict[tuple[str, str, str], Change]:
    """:func:`key` → :class:`Change` for every run whose measured code changed since: by the
    code's hash where the run recorded one, else by the commits git lists (nothing without git)."""
    root = _checkout()
    out = {}
    files: dict[str, list[Path]] = {}
    current: dict[str, str] = {}
    for run in sorted({key(r) for r in rows}):
        benchmark, commit, recorded = run
        bench = known.get(benchmark)
        if bench is None or not (recorded or (commit and root)):
            continue
        if benchmark not in files:
            files[benchmark] = measured_files(bench)
        if recorded:
            if benchmark not in current:
                current[benchmark] = code_hash(files[benchmark])
            if current[benchmark] != recorded:
                out[run] = _commits_since(root, commit, files[benchmark]) or Change(0, "")
        elif change := _commits_since(root, commit, files[benchmark]):
            out[run] = change
    return out


def _commits_since(root: Path | None, commit: str, files: list[Path]) -> Change | None:
    """The commits after ``commit`` that touch ``files``; None without any, or without git."""
    inside = [str(f.relative_to(root)) for f in files if root and f.is_relative_to(root)]
    if not commit or not inside:
        return None
    later = _git(root, "rev-list", f"{commit}..HEAD", "--", *inside)
    if not later:
        return None
    hashes = later.split()
    return Change(len(hashes), hashes[0][:7])


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
