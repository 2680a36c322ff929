"""`imgscale embed`: incremental batch embedding, resumed by source batch (paper 001 §3).

Reference: the model's all-at-once `transform` of every source row, and a DST written by one
uninterrupted run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from imgscale.jobs import models
from imgscale.jobs.embed_store import embed_new_rows
from imgscale.pipeline.embed import ALE
from imgscale.storage import create_store, open_store
from tests.conftest import wait_for_report

ROWS, DIM, BATCH = 1200, 12, 100


def _rows(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = rng.integers(-1, 3, n)
    X = rng.standard_normal((n, DIM)).astype(np.float32) + labels[:, None].astype(np.float32)
    return X, labels


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> tuple[Path, np.ndarray]:
    """A source store shared by the tests that do not append to it."""
    X, labels = _rows(ROWS, 0)
    path = tmp_path_factory.mktemp("embed-src") / "src.zarr"
    store = create_store(path, DIM, class_names=["a", "b", "c"], rows_per_chunk=256)
    split = np.where(np.arange(ROWS) % 5 == 0, "val", "train")
    store.append("first", X, labels, split=split)
    return store.path, X


@pytest.fixture(scope="module")
def model_path(tmp_path_factory, source) -> Path:
    path = tmp_path_factory.mktemp("embed-model") / "ale.model"
    models.save(ALE(n_components=8).fit(source[1]), path)
    return path


def _contents(path: Path) -> dict:
    store = open_store(path)
    store.verify()
    rows = store.rows()
    return {
        "features": store.features().compute(),
        **{name: rows.column(name).to_pylist() for name in ("id", "label", "split", "batch_id")},
    }


def _assert_same(a: dict, b: dict) -> None:
    np.testing.assert_array_equal(a["features"], b["features"])
    for name in ("id", "label", "split", "batch_id"):
        assert a[name] == b[name], name


def test_every_source_row_is_embedded_once_as_transform_gives_it(tmp_path, source, model_path):
    model, _ = models.load(model_path)
    summary = embed_new_rows(model, open_store(source[0]), tmp_path / "dst.zarr", batch_rows=BATCH)
    assert summary["rows_embedded"] == ROWS and summary["batches_committed"] == ROWS // BATCH
    dst, src = open_store(tmp_path / "dst.zarr"), open_store(source[0])
    np.testing.assert_array_equal(dst.features().compute(), model.transform(source[1]))
    assert list(dst.ids()) == list(src.ids())
    np.testing.assert_array_equal(dst.labels(), src.labels())
    assert list(dst.splits()) == list(src.splits())
    digest = src.batches()[0]["digest"]
    assert dst.rows().column("batch_id")[0].as_py() == f"first@{digest}/0-100"

    again = embed_new_rows(model, src, tmp_path / "dst.zarr", batch_rows=BATCH)
    assert again["rows_embedded"] == 0 and open_store(tmp_path / "dst.zarr").committed_rows == ROWS


def test_rows_added_to_the_source_are_picked_up_by_the_next_run(tmp_path, source, model_path):
    model, _ = models.load(model_path)
    src = create_store(tmp_path / "src.zarr", DIM, class_names=["a", "b", "c"])
    src.append("first", source[1], open_store(source[0]).labels())
    embed_new_rows(model, src, tmp_path / "dst.zarr", batch_rows=BATCH)
    X_new, labels_new = _rows(250, 1)
    src.append("second", X_new, labels_new)
    summary = embed_new_rows(model, src, tmp_path / "dst.zarr", batch_rows=BATCH)
    assert (summary["rows_before"], summary["rows_after"]) == (ROWS, ROWS + 250)
    dst = open_store(tmp_path / "dst.zarr")
    np.testing.assert_array_equal(dst.features().compute()[ROWS:], model.transform(X_new))
    assert list(dst.ids()) == list(src.ids())


def test_a_destination_from_another_source_is_refused(tmp_path, source, model_path):
    model, _ = models.load(model_path)
    embed_new_rows(model, open_store(source[0]), tmp_path / "dst.zarr", batch_rows=BATCH)
    other = create_store(tmp_path / "other.zarr", DIM)
    other.append("x", _rows(ROWS, 2)[0])
    with pytest.raises(Exception, match="not embedded from this source"):
        embed_new_rows(model, other, tmp_path / "dst.zarr", batch_rows=BATCH)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, source, model_path) -> Path:
    """DST written by one uninterrupted run."""
    path = tmp_path_factory.mktemp("embed-ref") / "reference.zarr"
    embed_new_rows(models.load(model_path)[0], open_store(source[0]), path, batch_rows=BATCH)
    return path


# The child embeds with a pause after each commit (or inside one) and reports its progress, so
# the parent can SIGKILL it at a chosen instant.
CHILD = """
import sys, time
import imgscale.storage.writer
from imgscale.jobs import models
from imgscale.jobs.embed_store import embed_new_rows
from imgscale.storage import open_store

model_path, src, dst, progress, mode = sys.argv[1:]
def report(text):
    with open(progress, "a") as f:
        f.write(text + "\\n")

if mode == "inside_commit":
    original = imgscale.storage.writer.write_record
    calls = [0]
    def slow_record(path, record):
        calls[0] += 1
        if calls[0] == 4:  # the fourth batch: rows file written, commit record not yet
            report("committing")
            time.sleep(60)
        original(path, record)
    imgscale.storage.writer.write_record = slow_record

def on_commit(start, stop):
    report(f"committed {stop}")
    time.sleep(0.05)

model, _ = models.load(model_path)
report("started")
embed_new_rows(model, open_store(src), dst, batch_rows=BATCH_ROWS, on_commit=on_commit)
report("done")
""".replace("BATCH_ROWS", str(BATCH))


KILL_POINTS = {
    "soon_after_start": ("after_commit", "started", 0.2),
    "between_batches": ("after_commit", "committed 700", 0.02),
    "inside_a_commit": ("inside_commit", "committing", 0.0),
}


@pytest.mark.parametrize("point", KILL_POINTS, ids=list(KILL_POINTS))
def test_a_sigkilled_run_resumes_to_exactly_the_uninterrupted_result(
    tmp_path, source, model_path, reference, point
):
    model, _ = models.load(model_path)
    mode, line, delay = KILL_POINTS[point]
    script, progress, dst = tmp_path / "child.py", tmp_path / "progress", tmp_path / "dst.zarr"
    script.write_text(CHILD)
    argv = [sys.executable, str(script), str(model_path), str(source[0]), str(dst)]
    child = subprocess.Popen([*argv, str(progress), mode])
    try:
        wait_for_report(progress, line, child, timeout=60, who="child")
        time.sleep(delay)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()

    held = open_store(dst).committed_rows if (dst / "zarr.json").exists() else 0
    assert held % BATCH == 0 and held < ROWS  # whole batches only, and the run was cut short
    summary = embed_new_rows(model, open_store(source[0]), dst, batch_rows=BATCH)
    assert summary["rows_before"] == held
    _assert_same(_contents(dst), _contents(reference))


def test_a_trained_ale_ssl_pipeline_embeds_with_its_ale_step(tmp_path, source):
    from imgscale.jobs.train import make_embedding, train
    from imgscale.pipeline.classify import SemiSupervisedEigenSolver

    fitted = train(open_store(source[0]), "ssl", embedding=make_embedding("ale", n_components=8))
    assert isinstance(fitted.steps[-1][1], SemiSupervisedEigenSolver)
    assert fitted.steps[-1][1].lam_ in fitted.steps[-1][1].lam_grid  # chosen on the val split
    models.save(fitted, tmp_path / "pipeline.model")
    loaded, _ = models.load(tmp_path / "pipeline.model")
    embed_new_rows(loaded, open_store(source[0]), tmp_path / "dst.zarr", batch_rows=BATCH)
    np.testing.assert_array_equal(
        open_store(tmp_path / "dst.zarr").features().compute(),
        fitted.steps[0][1].transform(source[1]),
    )
