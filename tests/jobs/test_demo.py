"""`imgscale demo`, the README's first command, end to end."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

IMGSCALE = str(Path(sys.executable).with_name("imgscale"))


@pytest.mark.slow
def test_demo_reports_both_methods_with_digits_accuracy(tmp_path):
    result = subprocess.run(
        [IMGSCALE, "demo", "--workdir", str(tmp_path)], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr
    rates = dict(re.findall(r"^\| (ridge|ncm) \| ([0-9.]+) \|", result.stdout, re.MULTILINE))
    assert set(rates) == {"ridge", "ncm"}
    assert float(rates["ridge"]) > 0.9  # linear ridge on raw 8×8 digits
    assert float(rates["ncm"]) > 0.8  # nearest class mean, ℓ2
    assert "LocalCluster" in result.stderr
    assert (tmp_path / "digits.zarr").is_dir()
