"""A model save that is killed leaves a scratch folder that the next save of that model removes
(they used to pile up, hidden, 98 MB after one SIGKILL), never one a running save still writes;
a save that runs out of room fails in one line naming the model and where it was writing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np

from imgscale.jobs import models
from imgscale.pipeline.classify import NearestClassMean
from imgscale.storage import create_store

# Saves an NCM model to argv[1], stopping for a minute inside the write after touching argv[2].
SLOW_SAVE = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import numpy as np
    from imgscale.jobs import models
    from imgscale.pipeline.classify import NearestClassMean
    from imgscale.storage import saved_models as storage_models

    write = storage_models._write_array
    def slow_write(*args):
        write(*args)
        Path(sys.argv[2]).touch()
        time.sleep(60)
    storage_models._write_array = slow_write
    X = np.random.default_rng(0).normal(size=(60, 8)).astype(np.float32)
    models.save(NearestClassMean().fit(X, np.arange(60) % 3), sys.argv[1])
    """
)


def _model() -> NearestClassMean:
    X = np.random.default_rng(1).normal(size=(60, 8)).astype(np.float32)
    return NearestClassMean().fit(X, np.arange(60) % 3)


def _scratch(model: Path) -> list[Path]:
    return sorted(model.parent.glob(f".{model.name}.*"))


def _start_slow_save(model: Path, tmp_path: Path) -> subprocess.Popen:
    marker = tmp_path / "writing"
    saver = subprocess.Popen([sys.executable, "-c", SLOW_SAVE, str(model), str(marker)])
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert saver.poll() is None and time.monotonic() < deadline, "the save never started"
        time.sleep(0.05)
    return saver


def test_the_scratch_of_a_killed_save_is_removed_by_the_next_save(tmp_path: Path) -> None:
    model = tmp_path / "m.model"
    saver = _start_slow_save(model, tmp_path)
    (scratch,) = _scratch(model)
    # A save running in another process keeps its scratch.
    models.save(_model(), model)
    assert _scratch(model) == [scratch]

    os.kill(saver.pid, signal.SIGKILL)
    saver.wait(timeout=30)
    assert scratch.is_dir()
    models.save(_model(), model, replace=True)
    assert _scratch(model) == []
    assert models.load(model)[0].means_.shape == (3, 8)


def _limited_to(max_bytes: int):
    """A preexec_fn giving the child a file size limit (writes beyond it fail with EFBIG)."""
    import resource

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))

    return limit


def test_a_save_without_room_fails_naming_the_model_and_the_file(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    y = np.arange(200) % 20
    store = create_store(tmp_path / "s.zarr", 2048, rows_per_chunk=200)
    store.append("b0", rng.normal(size=(200, 2048)).astype(np.float32), y)
    model = tmp_path / "m.model"
    imgscale = str(Path(sys.executable).with_name("imgscale"))
    ledger = ["--ledger", str(tmp_path / "ledger")]
    done = subprocess.run(
        [imgscale, "train", str(store.path), str(model), "--method", "ncm", *ledger],
        capture_output=True, text=True, timeout=300, preexec_fn=_limited_to(150_000),
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    line = done.stderr.splitlines()[-1]  # after the line naming the cluster it started
    assert line.startswith(
        f"imgscale: error: model {model}: could not write {tmp_path}/.m.model.saving-"
    )
    assert line.endswith("(File too large); nothing was saved")
    assert not model.exists() and _scratch(model) == []
