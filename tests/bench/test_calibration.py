"""The short calibration around each benchmark and the rule that calls a benchmark noisy."""

import math

import pytest

from imgscale.bench.calibration import (
    DRIFT_LIMIT,
    Calibration,
    Calibrator,
    Conditions,
    drift,
)

BEFORE = Calibration(gemm=40.0, memory=20.0, disk=1.0)


def test_the_drift_is_the_largest_relative_change_of_a_probe():
    assert drift(BEFORE, Calibration(42.0, 19.0, 1.03)) == pytest.approx(0.05)
    assert drift(BEFORE, Calibration(40.0, 20.0, 0.85)) == pytest.approx(0.15)
    assert drift(BEFORE, BEFORE) == 0


def test_a_benchmark_is_noisy_when_its_calibration_moved_past_the_limit_or_the_load_the_cores():
    assert DRIFT_LIMIT == 0.10
    moved = Calibration(40.0, 20.0, 0.85)
    steady = Calibration(43.6, 18.4, 1.0)  # 9% and 8%
    assert not Conditions(BEFORE, steady, load_max=2.0, cores=2).noisy
    assert Conditions(BEFORE, moved, load_max=0.5, cores=2).noisy
    assert Conditions(BEFORE, steady, load_max=2.01, cores=2).noisy
    columns = Conditions(BEFORE, moved, load_max=1.234, cores=2).columns("images/s")
    assert columns == {"noisy": True, "load_max": 1.23, "calibration_drift": 0.15}
    said = Conditions(BEFORE, moved, load_max=1.234, cores=2).describe()
    assert said.startswith("**Noisy**: load up to 1.23 on 2 cores; calibration moved 15%")
    assert Conditions(BEFORE, steady, load_max=1.0, cores=2).describe().startswith("Quiet: ")


def test_a_busy_machine_leaves_times_and_rates_noisy_not_accuracies_or_sizes():
    busy = Conditions(BEFORE, Calibration(40.0, 20.0, 0.5), load_max=9.0, cores=2)
    for unit in ("s", "ms", "rows/s", "GB/s", "x"):
        assert busy.columns(unit)["noisy"] is True, unit
    for unit in ("per-class rate", "error", "GiB", "bytes", "fraction", ""):
        assert busy.columns(unit)["noisy"] is False, unit
    assert busy.columns("error")["load_max"] == 9.0  # the machine is still said


def test_the_calibrator_measures_this_machine_and_removes_its_file(tmp_path):
    with Calibrator(tmp_path, "tiny") as calibrator:
        assert calibrator.probe.stat().st_size == 16 * 2**20
        found = calibrator.measure()
    for rate in (found.gemm, found.memory, found.disk):
        assert math.isfinite(rate) and rate > 0
    assert list(tmp_path.iterdir()) == []
