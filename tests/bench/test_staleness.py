"""A figure is stale when the code it measured hashes differently now: real modules in a folder of
their own, imported, edited and hashed again, with no git to ask."""

import importlib
import shutil
import subprocess
import sys

import pytest

from imgscale.bench import results, staleness
from imgscale.bench.common import record
from imgscale.bench.registry import Benchmark

RUN = '''\
"""A benchmark of the kernel."""

from labbench.kernel import double


def suite(ctx):
    return [{"name": "doubled", "value": double(2), "unit": "s"}]
'''
KERNEL = '''\
"""The measured code."""


def double(x):
    """Twice x."""
    return 2 * x  # the whole kernel
'''


@pytest.fixture
def lab(tmp_path, monkeypatch):
    """A package ``labbench`` (a benchmark module and the kernel it imports) and a docs folder."""
    package = tmp_path / "src" / "labbench"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "run.py").write_text(RUN)
    (package / "kernel.py").write_text(KERNEL)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "README.md").write_text("# figures\n")
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    module = importlib.import_module("labbench.run")
    yield tmp_path, Benchmark("lab", "the lab's benchmark", module.suite)
    for name in [n for n in sys.modules if n.startswith("labbench")]:
        del sys.modules[name]


def _rows(code_hash, commit="abc"):
    return results.rows(
        [record("doubled", 4.0, "s")], benchmark="lab", scale="small", time="t", machine="m",
        imgscale_version="", commit=commit, command="cmd", code_hash=code_hash,
    )  # fmt: skip


def test_the_measured_files_are_the_benchmark_and_the_code_it_imports(lab):
    root, bench = lab
    package = root / "src" / "labbench"
    assert staleness.measured_files(bench) == [package / "kernel.py", package / "run.py"]


def test_the_hash_ignores_comments_docstrings_and_layout_but_not_code(lab):
    root, bench = lab
    kernel = root / "src" / "labbench" / "kernel.py"
    files = staleness.measured_files(bench)
    ran = staleness.code_hash(files)
    kernel.write_text(
        '"""The measured code, explained at length."""\n\n# a comment\n'
        "def double(x):\n    return 2 * x\n"
    )
    assert staleness.code_hash(files) == ran
    kernel.write_text(KERNEL.replace("2 * x", "x + x"))
    assert staleness.code_hash(files) != ran


def test_the_hash_is_of_the_code_not_of_where_it_lies(lab, tmp_path):
    _, bench = lab
    files = staleness.measured_files(bench)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    copies = []
    for file in files:
        copies.append(elsewhere / file.name)
        copies[-1].write_text(file.read_text())
    assert staleness.code_hash(copies) == staleness.code_hash(files)


def test_a_figure_is_stale_only_once_the_code_it_ran_changed(lab, monkeypatch):
    monkeypatch.setenv("PATH", "")  # no git: the hash alone decides
    root, bench = lab
    rows = _rows(staleness.code_hash(staleness.measured_files(bench)))
    known = {"lab": bench}
    assert staleness.changes(rows, known) == {}

    (root / "docs" / "README.md").write_text("# figures\n\nSaid better.\n")
    kernel = root / "src" / "labbench" / "kernel.py"
    kernel.write_text(KERNEL.replace('"""Twice x."""', '"""Two times x, said better."""'))
    assert staleness.changes(rows, known) == {}, "a docs-only change marked the figure stale"

    kernel.write_text(KERNEL.replace("2 * x", "x + x"))
    found = staleness.changes(rows, known)
    assert found == {("lab", "abc", rows[0]["code_hash"]): staleness.Change(0, "")}
    assert "no longer has the run's hash" in found["lab", "abc", rows[0]["code_hash"]].describe()


def _git(repo, *args):
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_run_made_with_uncommitted_code_is_dated_by_what_it_ran(lab, monkeypatch):
    """Run on an edit not yet committed, the figure names the commit before the edit; once the
    edit is committed, git lists a commit touching the measured code after the figure's, but the
    code is what ran: the figure is not stale. Without its hash it would be."""
    root, bench = lab
    _git(root, "init", "-q")
    for key, value in (("user.name", "t"), ("user.email", "t@example.org")):
        _git(root, "config", key, value)
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "first")
    first = _git(root, "rev-parse", "--short", "HEAD")
    kernel = root / "src" / "labbench" / "kernel.py"
    kernel.write_text(KERNEL.replace("2 * x", "x + x"))  # the edit that ran, uncommitted
    ran = _rows(staleness.code_hash(staleness.measured_files(bench)), commit=first)
    _git(root, "commit", "-q", "-am", "the edit")
    monkeypatch.setattr(staleness, "_checkout", lambda: root.resolve())
    known = {"lab": bench}
    assert staleness.changes(ran, known) == {}
    without_hash = _rows(None, commit=first)
    assert staleness.changes(without_hash, known) == {
        ("lab", first, ""): staleness.Change(1, _git(root, "rev-parse", "--short=7", "HEAD"))
    }
