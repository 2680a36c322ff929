"""numba functions are compiled once per machine, not once per command: each is declared with
``cache=True``, and a new process loads the compiled code from numba's cache (beside the module
or, where that folder is read-only, under ``NUMBA_CACHE_DIR`` or the user's cache) instead of
compiling it again, which would cost every `train` and `evaluate` a fraction of a second."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from numba.core.caching import NullCache
from numba.core.registry import CPUDispatcher

import imgscale

PACKAGE = Path(imgscale.__file__).parent


def _modules_using_numba() -> list[str]:
    found = []
    # The layers are links in the package folder (pyproject's package-dir): walk through them.
    for folder, _, files in os.walk(PACKAGE, followlinks=True):
        for path in sorted(Path(folder) / f for f in files if f.endswith(".py")):
            text = path.read_text(encoding="utf-8")
            if "import numba" in text or "from numba" in text:
                relative = path.relative_to(PACKAGE).with_suffix("")
                found.append(".".join(("imgscale", *relative.parts)))
    return found


def test_every_numba_function_of_the_package_is_cached():
    modules = _modules_using_numba()
    assert "imgscale.pipeline.top_k" in modules and "imgscale.pipeline.reductions" in modules
    for name in modules:
        module = importlib.import_module(name)
        dispatchers = [v for v in vars(module).values() if isinstance(v, CPUDispatcher)]
        for dispatcher in dispatchers:
            where = f"{name}.{dispatcher.py_func.__name__}"
            assert not isinstance(dispatcher._cache, NullCache), f"{where}: no cache=True"


# The kernels a `train` (class sums) and an `evaluate` (top-k) run, called as they call them.
_CALL_KERNELS = """
import json
import numpy as np
from imgscale.pipeline import reductions, top_k

top_k.top_k_columns(np.random.default_rng(0).random((5, 40), dtype=np.float32), 5)
reductions.chunk_row_stats(np.ones((6, 3), np.float32), np.array([0, 1, 0, 2, 1, -1]), 3, False)
print(json.dumps({
    f"{d.py_func.__module__}.{d.py_func.__name__}": len(d.stats.cache_misses)
    for d in (top_k._top_k_scan, reductions._accumulate_sums)
}))
"""


@pytest.mark.slow
def test_a_new_process_loads_the_compiled_kernels_instead_of_compiling_them():
    def run() -> dict[str, int]:
        done = subprocess.run(
            [sys.executable, "-c", _CALL_KERNELS], capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout)

    run()  # compiles and writes the cache if no process on this machine has yet
    misses = run()
    assert len(misses) == 2 and set(misses.values()) == {0}, misses
