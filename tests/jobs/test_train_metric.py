"""`imgscale train --method ncm-metric | knn`: learned-metric models train, save, load, predict
and evaluate through the CLI on a generated store (raw and PQ), on the test cluster."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from imgscale.jobs import models
from imgscale.jobs.cli import cli
from imgscale.pipeline.pq import PQCodec
from imgscale.storage import create_coded_store, create_store

N_CLASSES, DIM = 5, 12
NAMES = [f"c{i}" for i in range(N_CLASSES)]


def _rows(seed: int, n: int):
    centres = 3 * np.random.default_rng(0).normal(size=(N_CLASSES, DIM))
    rng = np.random.default_rng(seed)
    y = rng.integers(0, N_CLASSES, n).astype(np.int32)
    return (rng.normal(size=(n, DIM)) + centres[y]).astype(np.float32), y


SPLITS = {"train": _rows(1, 500), "val": _rows(2, 150), "test": _rows(3, 200)}


def _invoke(*args) -> str:
    return _run(*args).stdout


def _run(*args):
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture
def raw_store(tmp_path):
    store = create_store(tmp_path / "raw.zarr", DIM, class_names=NAMES, rows_per_chunk=128)
    for split, (X, y) in SPLITS.items():
        store.append(split, X, y, split=split)
    return store


def _brute_force_ncm(model, X) -> np.ndarray:
    """argmin_c ‖W(x − μ_c)‖² over every class (eq. 9 without shortcuts), float64."""
    W, means = model.components_.astype(np.float64), model.means_.astype(np.float64)
    distances = (((X[:, None, :] - means[None]) @ W.T) ** 2).sum(axis=2)
    return model.classes_[np.argsort(distances, axis=1, kind="stable")]


def _brute_force_knn(model, X_train, y_train, X) -> np.ndarray:
    """Plain majority of the k nearest projected train rows (ties: nearest neighbour's class)."""
    W = model.components_.astype(np.float64)
    Z, R = X @ W.T, X_train @ W.T
    distances = ((Z[:, None, :] - R[None]) ** 2).sum(axis=2)
    neighbours = y_train[np.argsort(distances, axis=1, kind="stable")[:, : model.n_neighbors_]]
    votes = np.array([np.bincount(row, minlength=N_CLASSES) for row in neighbours])
    return votes, neighbours[:, 0]


def _train(store, model, method, scheduler_address) -> tuple:
    """The model trained by 40 SGD steps from the CLI, and what the command wrote on stderr."""
    result = _run(
        "train", store.path, model, "--method", method, "--metric-dim", 4, "--max-iter", 40,
        "--n-iter-no-change", 3, "--scheduler", scheduler_address,
    )  # fmt: skip
    return models.load(model)[0], result.stderr


def _evaluate(model, store, scheduler_address) -> dict:
    return json.loads(
        _invoke("evaluate", model, store.path, "--json", "--scheduler", scheduler_address)
    )


def test_ncm_metric_trains_saves_and_scores_by_eq9_from_the_cli(
    raw_store, tmp_path, scheduler_address
):
    path = tmp_path / "ncm.zarr"
    model, stderr = _train(raw_store, path, "ncm-metric", scheduler_address)
    # SGD's validations (at 0 and 40) redraw one line, ended before the summary.
    errors = model.validation_error_
    assert list(model.validation_iterations_) == [0, 40]
    first = f"\rtrain: iteration 0/40, validation error {errors[0]:.4f} (best {errors[0]:.4f} at 0)"
    last = (
        f"\rtrain: iteration 40/40, validation error {errors[1]:.4f} "
        f"(best {errors.min():.4f} at {model.best_iteration_})\n"
    )
    assert first + last + f"{path}: ncm-metric" in stderr
    X, y = SPLITS["train"]
    expected_means = np.stack([X[y == c].astype(np.float64).mean(axis=0) for c in range(5)])
    np.testing.assert_allclose(model.means_, expected_means, rtol=1e-5, atol=1e-5)
    assert model.components_.shape == (4, DIM)
    assert model.n_iter_no_change == 3
    Xt, yt = SPLITS["test"]
    ranking = _brute_force_ncm(model, Xt.astype(np.float64))
    report = _evaluate(path, raw_store, scheduler_address)
    assert report["top1_error"] == pytest.approx(np.mean(ranking[:, 0] != yt))
    out = tmp_path / "predictions.parquet"
    _invoke("predict", path, raw_store.path, out, "--split", "test", "--top-k", 3,
            "--scheduler", scheduler_address)  # fmt: skip
    top = np.array(pq.read_table(out).column("top_k").to_pylist())
    np.testing.assert_array_equal(top, np.asarray(NAMES)[ranking[:, :3]])


def test_ncm_metric_on_a_pq_store_takes_means_from_codes(tmp_path, scheduler_address):
    X, y = SPLITS["train"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fewer than 39×256 training rows
        codec = PQCodec.train(X, 4, niter=5)
    store = create_coded_store(tmp_path / "pq.zarr", codec, class_names=NAMES, rows_per_chunk=128)
    for split, (Xs, ys) in SPLITS.items():
        store.append(split, codec.encode(Xs), ys, split=split)
    model, _ = _train(store, tmp_path / "ncm.zarr", "ncm-metric", scheduler_address)
    decoded = codec.decode(codec.encode(X)).astype(np.float64)
    expected = np.stack([decoded[y == c].mean(axis=0) for c in range(N_CLASSES)])
    np.testing.assert_allclose(model.means_, expected, rtol=1e-4, atol=1e-4)


def test_knn_trains_saves_and_predicts_the_brute_force_vote_from_the_cli(
    raw_store, tmp_path, scheduler_address
):
    path = tmp_path / "knn.zarr"
    model, _ = _train(raw_store, path, "knn", scheduler_address)
    assert model.n_iter_no_change == 3
    X, y = SPLITS["train"]
    np.testing.assert_allclose(model.reference_, X @ model.components_.T, rtol=1e-5, atol=1e-4)
    Xt, yt = SPLITS["test"]
    votes, nearest = _brute_force_knn(model, X.astype(np.float64), y, Xt.astype(np.float64))
    out = tmp_path / "predictions.parquet"
    _invoke("predict", path, raw_store.path, out, "--split", "test", "--top-k", 1,
            "--scheduler", scheduler_address)  # fmt: skip
    predicted = np.array(pq.read_table(out).column("label").to_pylist())
    top = np.sort(votes, axis=1)
    clear = top[:, -1] > top[:, -2]
    expected = np.asarray(NAMES)[np.where(clear, votes.argmax(axis=1), nearest)]
    np.testing.assert_array_equal(predicted[clear], expected[clear])
    report = _evaluate(path, raw_store, scheduler_address)
    assert report["top1_error"] == pytest.approx(np.mean(np.searchsorted(NAMES, predicted) != yt))


def test_the_summary_says_when_sgd_ran_out_of_iterations_still_improving():
    from types import SimpleNamespace

    from imgscale.jobs.cli.model_commands import best_iteration_text

    def text(best, last):
        return best_iteration_text(SimpleNamespace(best_iteration_=best, n_iter_=last))

    assert text(2000, 2000) == (
        "best W at iteration 2000 of 2000 (the last: still improving; a larger --max-iter may "
        "score higher)"
    )
    assert text(1200, 2000) == "best W at iteration 1200"
    assert text(0, 0) == "best W at iteration 0"


def test_the_validation_line_redraws_twice_a_second_ends_at_the_last_and_is_quiet_with_json(
    capsys, monkeypatch
):
    from imgscale.jobs.cli import printers
    from imgscale.pipeline.classify import Validation

    clock = [100.0]
    monkeypatch.setattr(printers.time, "monotonic", lambda: clock[0])
    printers.validation_line("train", quiet=True)(Validation(40, 40, 0.5, 0.4, 20))
    assert capsys.readouterr().err == ""
    show = printers.validation_line("train")
    show(Validation(0, 40, 0.6, 0.6, 0))
    clock[0] += 0.2
    show(Validation(20, 40, 0.5, 0.5, 20))  # 0.2 s after the last draw: not drawn
    clock[0] += 0.2
    show(Validation(40, 40, 0.55, 0.5, 20))  # the last iteration is always drawn
    assert capsys.readouterr().err == (
        "\rtrain: iteration 0/40, validation error 0.6000 (best 0.6000 at 0)"
        "\rtrain: iteration 40/40, validation error 0.5500 (best 0.5000 at 20)\n"
    )
