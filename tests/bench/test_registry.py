"""The benchmark registry: what a benchmark is handed, and how names are chosen."""

from pathlib import Path

import pytest

from imgscale.bench.registry import (
    MODULES,
    REPEATS,
    SCALES,
    Context,
    Skipped,
    benchmark_modules,
    benchmarks,
    data_dir,
)
from imgscale.bench.suite import select


def _context(tmp_path: Path, scale: str = "tiny", data: Path | None = None) -> Context:
    return Context(scale=scale, out=tmp_path, workdir=tmp_path, data_dir=data, benchmark="demo")


def test_pick_returns_the_value_of_the_runs_scale(tmp_path):
    for scale in SCALES:
        ctx = _context(tmp_path, scale)
        assert ctx.pick(tiny=1, small=2, medium=3, large=4) == SCALES.index(scale) + 1


def test_pick_refuses_a_missing_scale(tmp_path):
    with pytest.raises(TypeError, match="large"):
        _context(tmp_path).pick(tiny=1, small=2, medium=3)


def test_missing_data_skips_with_what_is_missing(tmp_path):
    with pytest.raises(Skipped, match="--data-dir"):
        _context(tmp_path).data("mnist.npz")
    with pytest.raises(Skipped, match=r"mnist\.npz"):
        _context(tmp_path, data=tmp_path).data("mnist.npz")
    (tmp_path / "mnist.npz").write_bytes(b"")
    assert _context(tmp_path, data=tmp_path).data("mnist.npz") == tmp_path / "mnist.npz"


def test_data_dir_comes_from_the_option_then_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("IMGSCALE_DATA", raising=False)
    assert data_dir(None) is None
    monkeypatch.setenv("IMGSCALE_DATA", str(tmp_path))
    assert data_dir(None) == tmp_path
    assert data_dir("/elsewhere") == Path("/elsewhere")


def test_every_module_registers_a_benchmark_in_module_order():
    registered = benchmarks()
    modules = [b.run.__module__ for b in registered.values()]
    assert sorted(set(modules), key=modules.index) == benchmark_modules()
    assert set(modules) == set(benchmark_modules())


def test_the_reproductions_register_through_their_entry_point_after_the_harness_own():
    """`imgscale bench` runs the papers' reproductions (another distribution, installed beside
    it) with its own benchmarks, and ships none of them itself."""
    import imgscale.bench
    import imgscale_reproductions

    modules = benchmark_modules()
    own = [f"imgscale.bench.{module}" for module in MODULES]
    theirs = [f"imgscale_reproductions.{module}" for module in imgscale_reproductions.MODULES]
    assert modules == own + theirs
    registered = benchmarks()
    assert registered["natural-ncm"].run.__module__ == "imgscale_reproductions.natural_ncm"
    assert registered["ridge"].run.__module__ == "imgscale.bench.ridge"
    bench = Path(imgscale.bench.__file__).parent
    assert not {f"{module}.py" for module in imgscale_reproductions.MODULES} & {
        file.name for file in bench.glob("*.py")
    }


def test_select_refuses_an_unknown_name_naming_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown benchmark nope; known: .*ridge"):
        select(("ridge", "nope"))
    assert [b.name for b in select(("pq", "ridge"))] == ["pq", "ridge"]


def test_every_scale_says_how_many_repetitions_a_speed_figure_takes(tmp_path):
    assert set(REPEATS) == set(SCALES) and min(REPEATS.values()) >= 2
    assert _context(tmp_path).repeats == 3
