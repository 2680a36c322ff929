"""The short calibration around each benchmark and the rule that calls a benchmark noisy."""

import itertools
import math
import subprocess
import sys
import time

import pytest

from imgscale.bench.calibration import (
    DRIFT_LIMIT,
    OTHERS_LIMIT,
    SHOTS,
    Calibration,
    Calibrator,
    Conditions,
    LoadSampler,
    Probe,
    drift,
    moved,
    other_cpu_seconds,
)


def calibration(gemm, memory, disk):
    return Calibration(Probe.of(gemm), Probe.of(memory), Probe.of(disk))


# Shots recorded back to back on a quiet 2-core VM (load 0.7, nothing else running): four
# calibrations of seven interleaved shots each. GEMM loses half its rate for a few shots when the
# hypervisor takes a core; the disk's level moves by a fifth within seconds.
QUIET = [
    calibration(
        [182, 181, 101, 102, 101, 194, 172],
        [19.0, 19.0, 19.6, 28.0, 20.0, 18.6, 19.7],
        [1.48, 1.48, 1.50, 1.49, 1.56, 1.52, 1.53],
    ),
    calibration(
        [191, 102, 154, 193, 195, 192, 194],
        [21.5, 19.3, 19.5, 19.9, 20.5, 19.8, 19.7],
        [1.51, 1.51, 1.84, 1.89, 1.88, 1.81, 1.85],
    ),
    calibration(
        [192, 192, 193, 184, 186, 183, 187],
        [19.0, 19.4, 20.3, 19.6, 19.8, 20.2, 19.3],
        [1.82, 1.85, 0.801, 1.63, 1.81, 1.67, 1.71],
    ),
    calibration(
        [185, 185, 184, 186, 187, 186, 194],
        [20.3, 19.7, 19.5, 19.4, 21.3, 19.7, 20.1],
        [1.72, 1.66, 1.72, 1.66, 1.70, 1.73, 1.68],
    ),
]


def test_a_probe_keeps_the_median_and_range_of_its_shots():
    assert Probe.of([3.0, 1.0, 2.0, 9.0, 2.5]) == Probe(median=2.5, low=1.0, high=9.0)
    assert Probe.of([4.0, 1.0]) == Probe(median=2.5, low=1.0, high=4.0)


def test_the_drift_is_the_largest_relative_change_of_a_probes_median():
    before = calibration([40.0], [20.0], [1.0])
    assert drift(before, calibration([42.0], [19.0], [1.03])) == pytest.approx(0.05)
    assert drift(before, calibration([40.0], [20.0], [0.85])) == pytest.approx(0.15)
    assert drift(before, before) == 0


def test_a_probe_moved_when_its_median_passes_the_limit_beyond_both_ranges():
    assert DRIFT_LIMIT == 0.10
    before = Probe(median=1.0, low=0.95, high=1.05)
    assert before.moved(Probe(median=1.2, low=1.10, high=1.30))  # 20%, apart
    assert before.moved(Probe(median=0.8, low=0.70, high=0.90))  # 20% down, apart
    assert not before.moved(Probe(median=1.2, low=1.04, high=1.30))  # 20%, but the ranges touch
    assert not before.moved(Probe(median=1.08, low=1.06, high=1.10))  # apart, but 8%


def test_quiet_shots_recorded_on_this_vm_are_not_noisy_though_their_medians_move():
    # The disk's median moved 23% between the first two calibrations, and a single shot of each
    # probe (the rule before shots) moves by up to twice: neither is the machine being busy.
    assert drift(QUIET[0], QUIET[1]) == pytest.approx(0.227, abs=0.001)
    assert 182 / 102 - 1 > DRIFT_LIMIT
    for before, after in itertools.pairwise(QUIET):
        assert moved(before, after) == []
        assert not Conditions(before, after, load_max=0.7, other_cores=0.03).noisy


def test_a_core_taken_by_another_process_is_noisy():
    # Two busy processes beside the probe on 2 cores leave it about half the GEMM rate.
    taken = calibration(
        [92, 95, 60, 91, 97, 90, 93],
        [18.4, 18.9, 18.2, 18.8, 19.0, 18.5, 18.7],
        [1.70, 1.66, 1.72, 1.66, 1.70, 1.73, 1.68],
    )
    conditions = Conditions(QUIET[3], taken, load_max=1.5, other_cores=0.0)
    assert conditions.moved == ["GEMM"] and conditions.noisy
    said = conditions.describe()
    assert said.startswith("**Noisy**: other processes kept 0.00 cores busy (limit 0.20), load up")
    assert "calibration moved 51% (GEMM beyond its shots' range; limit 10%)" in said
    quiet = Conditions(QUIET[2], QUIET[3], load_max=1.0, other_cores=0.03)
    assert quiet.describe().startswith("Quiet: ")


def test_other_processes_busy_past_the_limit_are_noisy_whatever_the_calibration_or_load():
    assert OTHERS_LIMIT == 0.2
    assert Conditions(QUIET[3], QUIET[3], load_max=0.5, other_cores=0.21).noisy
    # The benchmark's own two workers and client keep the load above the cores: not noisy.
    assert not Conditions(QUIET[3], QUIET[3], load_max=2.6, other_cores=0.05).noisy
    columns = Conditions(QUIET[0], QUIET[1], load_max=2.345, other_cores=1.0).columns("images/s")
    assert columns == {
        "noisy": True, "load_max": 2.35, "calibration_drift": 0.2267, "other_cores": 1.0,
        "gemm_gflops": 182.0,  # the host's rate: the medians 181 and 192 averaged
    }  # fmt: skip


def test_a_busy_machine_leaves_times_and_rates_noisy_not_accuracies_or_sizes():
    busy = Conditions(QUIET[3], QUIET[3], load_max=9.0, other_cores=1.8)
    for unit in ("s", "ms", "rows/s", "GB/s", "x"):
        assert busy.columns(unit)["noisy"] is True, unit
    for unit in ("per-class rate", "error", "GiB", "bytes", "fraction", ""):
        assert busy.columns(unit)["noisy"] is False, unit
    assert busy.columns("error")["load_max"] == 9.0  # the machine is still said


def test_the_calibrator_measures_this_machine_and_removes_its_file(tmp_path):
    with Calibrator(tmp_path, "tiny") as calibrator:
        assert calibrator.probe.stat().st_size == 16 * 2**20
        found = calibrator.measure()
    for probe in found.probes().values():
        assert math.isfinite(probe.median) and 0 < probe.low <= probe.median <= probe.high
    assert SHOTS >= 5
    assert list(tmp_path.iterdir()) == []


def test_two_runs_given_one_work_dir_each_probe_and_remove_their_own_file(tmp_path):
    """Two `imgscale bench` runs started with one --workdir: the first to close its calibrator
    used to remove the file the other was about to read (a run failed, No such file)."""
    with Calibrator(tmp_path, "tiny") as first:
        with Calibrator(tmp_path, "tiny") as second:
            assert first.probe != second.probe
        assert first.probe.is_file() and not second.probe.exists()
        assert math.isfinite(first.measure(shots=1).disk.median)
    assert list(tmp_path.iterdir()) == []


def test_the_sampler_counts_processes_started_apart_and_not_this_ones_children(tmp_path):
    spin = "import time\nwhile time.process_time() < 2.5: pass\n"  # 2.5 CPU seconds
    (tmp_path / "spin.py").write_text(spin)
    # A child of this process (as the benchmark's cluster and commands are) is not another's.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    # A process started apart (its own session, its parent gone: reparented) spins a core.
    launcher = (
        "import os, subprocess, sys\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    spinner = subprocess.Popen([sys.executable, sys.argv[1]])\n"
        "    open(sys.argv[2], 'w').write(str(spinner.pid))\n"
        "    spinner.wait()\n"
        "    open(sys.argv[3], 'w').close()\n"
        "os._exit(0)\n"
    )
    started, done = tmp_path / "pid", tmp_path / "done"
    try:
        with LoadSampler(interval=0.5) as sampler:
            subprocess.run([sys.executable, "-c", launcher, str(tmp_path / "spin.py"),
                            str(started), str(done)], check=True)  # fmt: skip
            while not started.exists() or not started.read_text():
                time.sleep(0.05)
            others = other_cpu_seconds()
            assert int(started.read_text()) in others and child.pid not in others
            while not done.exists():
                time.sleep(0.1)
    finally:
        child.kill()
        child.wait()
    # The spinner's 2.5 CPU seconds, less what it used before it was first seen and after it was
    # last seen (at most one interval each); whatever else ran only adds.
    assert sampler.other_seconds > 1.2
    assert sampler.other_cores > 0
    assert sampler.peak > 0
