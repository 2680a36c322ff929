"""A command imports only what it uses: `--help` none of the computing libraries, `info` no
dask. Checked on the module list ``python -X importtime`` prints, in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys

import pytest

COMPUTING = ("dask", "distributed", "zarr", "pyarrow", "sklearn", "numba", "scipy")


def imported_packages(*args: str) -> set[str]:
    """Top-level packages a fresh ``python -X importtime -m imgscale ARGS`` imports."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "imgscale", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("import time:")]
    assert len(lines) > 10, result.stderr[-2000:]  # the listing is there to check
    return {line.rsplit("|", 1)[1].strip().split(".")[0] for line in lines[1:]}


@pytest.mark.parametrize("args", [("--help",), ("train", "--help"), ("bench", "--help")])
def test_help_imports_no_computing_library(args):
    imported = imported_packages(*args)
    assert "click" in imported
    assert not imported & set(COMPUTING), sorted(imported & set(COMPUTING))


def test_info_reads_the_store_without_dask_or_estimators(digits_store):
    imported = imported_packages("info", str(digits_store.path))
    assert {"zarr", "pyarrow"} <= imported
    assert not imported & {"dask", "distributed", "sklearn", "numba", "scipy"}


def test_info_of_a_pq_store_loads_its_codec_without_dask_or_numba(tmp_path):
    import shutil
    from pathlib import Path

    store = tmp_path / "pq.zarr"
    shutil.copytree(Path(__file__).parents[1] / "fixtures" / "pq-store-v2", store)
    imported = imported_packages("info", str(store))
    assert {"zarr", "pyarrow", "imgscale"} <= imported
    assert not imported & {"dask", "distributed", "sklearn", "numba", "scipy", "faiss"}
