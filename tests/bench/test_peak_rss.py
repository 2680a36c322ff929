"""PeakRSS counts this process and the children started while it samples."""

import subprocess
import sys

from imgscale.bench.common import PeakRSS

CHILD = "import numpy, time; a = numpy.ones(300 * 2**20 // 8); time.sleep(2.5)"


def test_peak_includes_a_child_started_after_sampling_began():
    with PeakRSS() as peak:
        child = subprocess.Popen([sys.executable, "-c", CHILD])
        child.wait(timeout=60)
    assert f"pid {child.pid}" in peak.at_peak
    assert peak.at_peak[f"pid {child.pid}"] >= 300 * 2**20
    assert peak.peak == sum(peak.at_peak.values())
