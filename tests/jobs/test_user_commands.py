"""Commands as a user types them: classes matched by name, outputs checked before any work, no
silent fallbacks, predictions with integer labels and the true label."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from imgscale.jobs import models
from imgscale.jobs.cli import cli, main
from imgscale.storage import create_store
from imgscale.storage import writer as writer_module

NAMES = [f"c{i}" for i in range(6)]


def _rows(seed: int, n: int = 600):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 6
    X = (rng.normal(size=(n, 16)) + 3 * np.random.default_rng(99).normal(size=(6, 16))[y]).astype(
        np.float32
    )
    return X, y


def _store(path: Path, X, y, names, split="train"):
    store = create_store(path, X.shape[1], class_names=names, rows_per_chunk=4096)
    store.append("all", X, y, split=split)
    return store


def _run(*args, scheduler: str | None = None):
    argv = [str(a) for a in args] + (["--scheduler", scheduler] if scheduler else [])
    return CliRunner().invoke(cli, argv)


@pytest.fixture
def stores(tmp_path: Path):
    """full: classes c0–c5; base: c0–c4 only; new: c5 and c0 rows numbered 0 and 1 (so c5 is
    label 0 there, as c0 is in the model); test: every class, numbered in reverse."""
    X, y = _rows(0)
    Xt, yt = _rows(1, 120)
    full = _store(tmp_path / "full.zarr", X, y, NAMES)
    base = _store(tmp_path / "base.zarr", X[y < 5], y[y < 5], NAMES[:5])
    pick = (y == 5) | (y == 0)
    new = _store(tmp_path / "new.zarr", X[pick], np.where(y[pick] == 5, 0, 1), ["c5", "c0"])
    test = _store(tmp_path / "test.zarr", Xt, 5 - yt, NAMES[::-1], split="test")
    return {"full": full, "base": base, "new": new, "test": test, "X": X, "y": y}


def test_a_class_added_by_name_scores_exactly_as_if_trained_with_it(
    stores, tmp_path, scheduler_address
):
    reference, added = tmp_path / "ref.model", tmp_path / "added.model"
    for store, model in ((stores["full"], reference), (stores["base"], added)):
        result = _run("train", store.path, model, "--method", "ncm", scheduler=scheduler_address)
        assert result.exit_code == 0, result.output
    result = _run(
        "add-class", added, stores["new"].path, "--label", "c5", "--json",
        scheduler=scheduler_address,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["class_index"] == 5
    ref, ref_provenance = models.load(reference)
    got, provenance = models.load(added)
    assert provenance["class_names"] == ref_provenance["class_names"] == NAMES
    np.testing.assert_array_equal(got.classes_, ref.classes_)
    np.testing.assert_array_equal(got.means_, ref.means_)
    np.testing.assert_array_equal(
        got.decision_function(stores["X"]), ref.decision_function(stores["X"])
    )
    # Evaluated on a store that numbers the classes in reverse: the same figures.
    figures = [
        json.loads(
            _run("evaluate", m, stores["test"].path, "--json", scheduler=scheduler_address).stdout
        )
        for m in (reference, added)
    ]
    assert figures[0] == figures[1] and figures[0]["per_class_rate"] > 0.9


def test_a_class_the_model_has_is_refused_unless_replaced(stores, tmp_path, scheduler_address):
    model = tmp_path / "ncm.model"
    _run("train", stores["base"].path, model, "--method", "ncm", scheduler=scheduler_address)
    before = models.load(model)[0].means_
    refused = _run(
        "add-class", model, stores["new"].path, "--label", "c0", scheduler=scheduler_address
    )
    assert refused.exit_code != 0
    assert f"model {model}: already has class 'c0'" in str(refused.exception)
    np.testing.assert_array_equal(models.load(model)[0].means_, before)
    replaced = _run(
        "add-class", model, stores["new"].path, "--label", "c0", "--replace",
        scheduler=scheduler_address,
    )  # fmt: skip
    assert replaced.exit_code == 0, replaced.output
    after = models.load(model)[0].means_
    X, y = stores["X"], stores["y"]
    np.testing.assert_allclose(after[0], X[y == 0].mean(axis=0), rtol=1e-6)
    np.testing.assert_array_equal(after[1:], before[1:])


# -- outputs are checked before any work (finding 5) ------------------------------------------


@pytest.mark.parametrize(
    ("command", "what"),
    [
        (lambda s, out: ["train", s, out, "--method", "ncm"], "MODEL"),
        (lambda s, out: ["compress", s, out, "--m", "4"], "DST"),
        (lambda s, out: ["predict", out, s, out], "OUT"),
        (lambda s, out: ["add-class", out, s, "--label", "c0", "--out", out], "--out"),
        (lambda s, out: ["plot", out, s, out / "keep"], "OUT"),
    ],
)
def test_an_existing_output_is_refused_before_any_work(stores, tmp_path, command, what):
    out = tmp_path / "exists"
    out.mkdir()
    (out / "keep").write_text("mine")
    argv = command(stores["full"].path, out)
    result = _run(*argv)
    assert result.exit_code == 2
    assert f"{what} {argv[-1] if what == 'OUT' else out} already exists; expected a new path" in (
        result.output
    )
    assert "dask:" not in result.output  # no cluster was started
    assert (out / "keep").read_text() == "mine"


def test_an_output_in_a_missing_folder_is_refused_before_any_work(stores, tmp_path):
    result = _run("train", stores["full"].path, tmp_path / "nope" / "m.model")
    assert result.exit_code == 2 and "does not exist" in result.output
    assert "dask:" not in result.output


# -- no silent fallbacks (finding 6) ----------------------------------------------------------


def test_a_misspelled_val_split_lists_the_splits(tmp_path):
    X, y = _rows(0)
    store = create_store(tmp_path / "s.zarr", 16, class_names=NAMES)
    store.append("a", X[:500], y[:500], split="train")
    store.append("b", X[500:], y[500:], split="val")
    result = _run("train", store.path, tmp_path / "m", "--val-split", "vall")
    assert result.exit_code == 1
    assert "no split 'vall'; it has 'train' (500 rows), 'val' (100 rows)" in str(result.exception)
    assert not (tmp_path / "m").exists()


def test_a_store_with_one_class_does_not_train(tmp_path, scheduler_address):
    X, _ = _rows(0)
    store = _store(tmp_path / "s.zarr", X, np.full(len(X), 3), NAMES)
    result = _run(
        "train", store.path, tmp_path / "m", "--method", "ncm", scheduler=scheduler_address
    )
    assert result.exit_code == 1
    assert "split 'train' has 1 labelled classes ['c3']; expected at least 2" in str(
        result.exception
    )
    assert not (tmp_path / "m").exists()


def test_an_unknown_split_lists_the_available_ones(stores, tmp_path, scheduler_address):
    model = tmp_path / "ncm.model"
    _run("train", stores["full"].path, model, "--method", "ncm", scheduler=scheduler_address)
    for argv in (
        ["evaluate", model, stores["test"].path, "--split", "tset"],
        ["predict", model, stores["test"].path, tmp_path / "p.parquet", "--split", "tset"],
        ["add-class", model, stores["new"].path, "--label", "c5", "--split", "tset"],
    ):
        result = _run(*argv)
        assert result.exit_code == 1, argv
        assert "no split 'tset'; it has" in str(result.exception), argv


# -- predictions (finding 9) ------------------------------------------------------------------


def test_predictions_of_an_integer_labelled_store_are_integers_with_the_true_label(
    tmp_path, scheduler_address
):
    X, y = _rows(0)
    np.savez(tmp_path / "train.npz", X=X, y=y)
    Xt, yt = _rows(1, 60)
    yt[::7] = -1
    np.savez(tmp_path / "test.npz", X=Xt, y=yt)
    store = tmp_path / "s.zarr"
    assert _run("ingest", tmp_path / "train.npz", store).exit_code == 0
    assert _run("ingest", tmp_path / "test.npz", store, "--split", "test").exit_code == 0
    model, out = tmp_path / "ncm.model", tmp_path / "p.parquet"
    _run("train", store, model, "--method", "ncm", scheduler=scheduler_address)
    result = _run("predict", model, store, out, "--split", "test", scheduler=scheduler_address)
    assert result.exit_code == 0, result.output
    table = pq.read_table(out)
    assert str(table.schema.field("label").type) == "int32"
    assert table.column("true_label").to_pylist() == [None if v < 0 else v for v in yt]
    expected = models.load(model)[0].predict(Xt)
    assert table.column("label").to_pylist() == expected.tolist()


def test_a_failed_ingest_prints_its_error_on_a_line_of_its_own(tmp_path, monkeypatch, capsys):
    """The error used to be glued to the unfinished progress line."""
    np.save(tmp_path / "x.npy", np.zeros((3 * 4096, 4), np.float32))
    flushes = []

    def fail_second(self, final):
        flushes.append(final)
        if len(flushes) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(self, final)

    real = writer_module.BatchWriter._flush
    monkeypatch.setattr(writer_module.BatchWriter, "_flush", fail_second)
    store = create_store(tmp_path / "s.zarr", 4, rows_per_chunk=4096).path
    monkeypatch.setattr("sys.argv", ["imgscale", "ingest", str(tmp_path / "x.npy"), str(store)])
    with pytest.raises(SystemExit) as exit_:
        main()
    assert exit_.value.code == 1
    lines = capsys.readouterr().err.split("\n")
    assert lines[0] == "\ringest: 4096/12288 rows (33%)"
    assert (
        lines[1] == f"imgscale: error: store {store}: no space left on device; nothing was "
        "committed and the rows written so far were removed"
    )


def test_a_repeated_ingest_says_it_was_skipped_and_remove_batch_undoes_the_last(tmp_path):
    X, y = _rows(0, 60)
    np.savez(tmp_path / "a.npz", X=X, y=y)
    store = tmp_path / "s.zarr"
    first = _run("ingest", tmp_path / "a.npz", store)
    assert first.exit_code == 0 and "committed (60 rows;" in first.stderr
    again = _run("ingest", tmp_path / "a.npz", store)
    assert again.exit_code == 0
    assert again.stderr.endswith("already committed (60 rows), skipped\n")
    info = json.loads(_run("info", store, "--json").stdout)
    assert info["splits"] == {"train": 60} and info["batches"][0]["rows"] == 60
    removed = _run("remove-batch", store, info["batches"][0]["batch_id"])
    assert removed.exit_code == 0 and "removed (60 rows)" in removed.stderr
    assert json.loads(_run("info", store, "--json").stdout)["rows"] == 0
