"""Without the bench extra, `imgscale bench` says what to install before doing any work."""

import subprocess
import sys

import pytest

# Hide one of the extra's modules from the import system, then run the real command line.
HIDE_AND_RUN = """
import sys
sys.modules[{module!r}] = None
from imgscale.jobs.cli import main
sys.argv = ["imgscale", "bench", "--list"]
main()
"""


@pytest.mark.parametrize("module", ["bokeh", "matplotlib"])
def test_bench_without_the_extra_is_a_one_line_install_hint(module):
    done = subprocess.run(
        [sys.executable, "-c", HIDE_AND_RUN.format(module=module)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "pip install 'imgscale[bench]'" in lines[0]
    assert module in lines[0]
