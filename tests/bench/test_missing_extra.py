"""Without the bench extra, `imgscale bench --list` still lists the benchmarks (the README's tour
runs it after a plain install), and running benchmarks says what to install before any work."""

import subprocess
import sys

import pytest

# Hide one of the extra's modules from the import system, then run the real command line.
HIDE_AND_RUN = """
import sys
sys.modules[{module!r}] = None
from imgscale.jobs.cli import main
sys.argv = ["imgscale", "bench", *{args!r}]
main()
"""


def _bench_without(module: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", HIDE_AND_RUN.format(module=module, args=list(args))],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("module", ["bokeh", "matplotlib"])
def test_bench_list_works_without_the_extra(module):
    done = _bench_without(module, "--list")
    assert done.returncode == 0, done.stderr
    assert any(line.startswith("ridge ") for line in done.stdout.splitlines()), done.stdout
    assert "needs:" in done.stdout


@pytest.mark.parametrize("module", ["bokeh", "matplotlib"])
def test_running_benchmarks_without_the_extra_is_a_one_line_install_hint(module, tmp_path):
    done = _bench_without(module, "ridge", "--scale", "tiny", "--out", str(tmp_path / "out"))
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "pip install 'imgscale[bench]'" in lines[0]
    assert module in lines[0]
    assert not (tmp_path / "out").exists()
