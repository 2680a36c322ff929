"""One installed top-level package, `imgscale`, that shadowing folders cannot break.

A Dask worker puts its local directory first on ``sys.path`` and spills to ``<that>/storage``;
users keep their own ``pipeline.py`` or ``jobs/`` beside their data. Neither may change what
``imgscale.storage`` or ``imgscale.pipeline`` resolve to, in a regular or an editable install.
"""

from __future__ import annotations

import json
import site
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest

from imgscale.jobs import models

REPO = Path(__file__).resolve().parents[1]
LAYOUT_0_1_0 = Path(__file__).parent / "jobs" / "data" / "layout-0.1.0"

# Runs inside the fresh install, from a folder holding the look-alikes; prints where each layer
# was imported from, on the client and on a real worker process.
PROBE = textwrap.dedent(
    """
    import json, sys
    from distributed import Client, LocalCluster

    def where(shadow):
        sys.path.insert(0, shadow)  # a worker's local directory: storage/ and jobs/ folders
        import numpy as np
        import imgscale.jobs.cli, imgscale.pipeline, imgscale.storage
        from imgscale.pipeline.classify import NearestClassMean
        X = np.arange(12, dtype=np.float32).reshape(6, 2)
        NearestClassMean().fit(X, np.array([0, 0, 0, 1, 1, 1]))
        return {m.__name__: m.__file__ for m in (imgscale.jobs.cli, imgscale.pipeline,
                                                 imgscale.storage)}

    if __name__ == "__main__":
        shadow = sys.argv[1]
        with LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=None,
                          local_directory=shadow) as cluster, Client(cluster) as client:
            worker = client.submit(where, shadow).result()
            print(json.dumps({"client": where(shadow), "worker": worker}))
    """
)


def test_installed_wheel_has_one_top_level_package(wheel):
    with zipfile.ZipFile(wheel) as archive:
        top_level = next(n for n in archive.namelist() if n.endswith(".dist-info/top_level.txt"))
        assert archive.read(top_level).decode().split() == ["imgscale"]
        roots = {name.split("/")[0] for name in archive.namelist()}
    assert {r for r in roots if not r.endswith(".dist-info")} == {"imgscale"}


def test_every_package_folder_is_installed(wheel):
    """A new sub-package must be added to pyproject's package list, or installs lose it."""
    with zipfile.ZipFile(wheel) as archive:
        installed = {n for n in archive.namelist() if n.endswith("__init__.py")}
    for layer in ("storage", "pipeline", "jobs", "bench"):
        for init in (REPO / layer).rglob("__init__.py"):
            relative = init.relative_to(REPO).as_posix()
            assert f"imgscale/{relative}" in installed, f"{relative} is not installed"


@pytest.mark.slow
@pytest.mark.parametrize("editable", [False, True], ids=["regular", "editable"])
def test_shadowing_folders_do_not_change_what_imgscale_imports(tmp_path, wheel, editable):
    python = _fresh_venv(tmp_path / "venv")
    install = ["-e", str(REPO)] if editable else [str(wheel)]
    _run([python, "-m", "pip", "install", "-q", "--no-deps", *install], cwd=tmp_path)

    work = tmp_path / "work"
    shadow = work / "shadow"
    for folder in (shadow / "storage", shadow / "jobs", work / "storage"):
        folder.mkdir(parents=True)
    (shadow / "jobs" / "__init__.py").write_text("raise ImportError('a user jobs/ was imported')\n")
    (work / "pipeline.py").write_text("raise ImportError('the user pipeline.py was imported')\n")
    (work / "probe.py").write_text(PROBE)

    result = json.loads(_run([python, "probe.py", str(shadow)], cwd=work).splitlines()[-1])
    expected_root = REPO if editable else tmp_path / "venv"
    for side in ("client", "worker"):
        for module, file in result[side].items():
            assert Path(file).is_relative_to(expected_root), (side, module, file)
            assert not Path(file).is_relative_to(work), (side, module, file)
    assert "Usage: imgscale" in _run([python, "-m", "imgscale", "--help"], cwd=work)


@pytest.mark.parametrize("name", ["rff-ridge", "ncm"])
def test_models_saved_by_the_previous_layout_load(name):
    """Saved with the top-level `storage`/`pipeline`/`jobs` layout: classes are named, not
    imported by module path, so the move changes nothing in the file. They predate per-chunk
    checksums, so they load with a warning that they are unverified."""
    with pytest.warns(UserWarning, match="schema version 1"):
        model, provenance = models.load(LAYOUT_0_1_0 / f"{name}.model")
    expected = np.load(LAYOUT_0_1_0 / "expected.npz")[name.replace("-", "_")]
    from sklearn.datasets import load_digits

    X = load_digits().data.astype(np.float32)[1000:1100]
    scores = model.decision_function(X)
    # Same predictions; scores equal to float32 rounding (BLAS builds order their sums
    # differently, so the last bit of a float32 dot product may change between releases).
    np.testing.assert_array_equal(scores.argmax(axis=1), expected.argmax(axis=1))
    rounding = 32 * np.finfo(np.float32).eps * np.abs(expected).max()
    np.testing.assert_allclose(scores, expected, rtol=0, atol=rounding)
    assert provenance["rows"] == 1000


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(REPO)])
    return next(out.glob("imgscale-*.whl"))


def _fresh_venv(path: Path) -> str:
    """A new venv that sees this environment's dependencies but not its imgscale install: a
    path line in a .pth file adds the folder without running the .pth hooks inside it."""
    _run([sys.executable, "-m", "venv", "--without-pip", str(path)])
    python = str(path / "bin" / "python")
    target = _run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"])
    dependencies = [p for p in site.getsitepackages() if Path(p).is_dir()]
    (Path(target.strip()) / "dependencies.pth").write_text("\n".join(dependencies) + "\n")
    return python


def _run(command: list, cwd: Path | None = None) -> str:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{command}: {done.stderr[-2000:]}"
    return done.stdout


@pytest.mark.parametrize(
    "module", ["imgscale.pipeline.embed", "imgscale.pipeline.classify", "imgscale.jobs.cli"]
)
def test_each_layer_imports_first_in_a_fresh_interpreter(module: str) -> None:
    """An import cycle between pipeline.embed and pipeline.classify once broke every command."""
    result = subprocess.run(
        [sys.executable, "-c", f"import {module}"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
