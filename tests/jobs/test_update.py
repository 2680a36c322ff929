"""`imgscale update` (issue 45): after a sequence of adds, middle-batch removals, forgets and
re-ingests, the updated model equals a model trained from scratch on the store as it now is
(predictions identical, decision values within float32 rounding), for NCM and ridge on raw and
PQ stores; it reads only the changed rows; models that cannot follow their store are refused by
name."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from imgscale.jobs import models
from imgscale.jobs.cli import cli
from imgscale.storage import create_coded_store, create_store
from tests.jobs.conftest import refused

DIM, CHUNK, CLASSES = 8, 16, ["p", "q", "r", "s"]


def _imgscale(*args) -> dict:
    result = CliRunner().invoke(cli, [*map(str, args), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout.strip().splitlines()[-1])


def _refused(*args) -> str:
    return refused(*map(str, args))


def _rows(n: int, seed: int, labels: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """``n`` rows around one centre per class (some unlabelled: -1), seeded."""
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(99).normal(scale=2.0, size=(len(CLASSES), DIM))
    y = rng.choice(labels, n)
    X = centres[np.maximum(y, 0)] + rng.normal(size=(n, DIM))
    return X.astype(np.float32), y.astype(np.int32)


class Store:
    """A store of raw rows or of PQ codes, written batch by batch."""

    def __init__(self, path: Path, codec=None):
        if codec is None:
            self.store = create_store(path, DIM, class_names=CLASSES, rows_per_chunk=CHUNK)
        else:
            self.store = create_coded_store(path, codec, class_names=CLASSES, rows_per_chunk=CHUNK)
        self.codec = codec

    def append(self, batch: str, n: int, seed: int, labels: list[int], split="train") -> None:
        X, y = _rows(n, seed, labels)
        rows = X if self.codec is None else self.codec.encode(X)
        ids = [f"{batch}-{seed}:{i}" for i in range(n)]
        self.store.append(batch, rows, y, ids=ids, split=split)


def _codec():
    from imgscale.pipeline.pq import PQCodec

    X, _ = _rows(800, 1000, [0, 1, 2, 3])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # few training rows: the codebook's quality is not tested
        return PQCodec.train(X, 4, seed=0, niter=4)


def _decisions(model_path: Path, store) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    model, _ = models.load(model_path)
    X = store.features("test").compute()
    return np.asarray(model.classes_), model.predict(X), model.decision_function(X)


def _assert_equal_to_fresh_train(model_path: Path, store, tmp_path: Path, method: str) -> None:
    """The updated model against `train` from scratch on the store as it now is."""
    fresh = tmp_path / f"fresh-{np.random.default_rng().integers(1 << 30)}.model"
    _imgscale("train", store.path, fresh, "--method", method)
    _assert_equal_models(model_path, fresh, store, method)


def _assert_equal_models(model_path: Path, fresh: Path, store, method: str) -> None:
    """The updated model against ``fresh``, trained from scratch on the store as it now is."""
    (classes, predicted, scores), (classes0, predicted0, scores0) = (
        _decisions(model_path, store),
        _decisions(fresh, store),
    )
    np.testing.assert_array_equal(classes, classes0)
    np.testing.assert_array_equal(predicted, predicted0)
    scale = np.abs(scores0).max()
    np.testing.assert_allclose(scores, scores0, rtol=0, atol=4 * np.finfo(np.float32).eps * scale)
    updated, provenance = models.load(model_path)
    trained, provenance0 = models.load(fresh)
    for key in ("rows", "store_batches", "class_names", "committed_rows"):
        assert provenance[key] == provenance0[key], key
    if method == "ridge":
        assert updated.rho_ == trained.rho_ and updated.rho_selection_ == "validation"
        np.testing.assert_allclose(updated.mean_, trained.mean_, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("coded", [False, True], ids=["raw", "pq"])
@pytest.mark.parametrize("method", ["ncm", "ridge"])
def test_an_updated_model_equals_a_model_trained_from_scratch(tmp_path, method, coded):
    s = Store(tmp_path / "s.zarr", _codec() if coded else None)
    s.append("a", 40, 0, [-1, 0, 1])
    s.append("b", 30, 1, [0, 1, 2])
    s.append("val", 60, 2, [0, 1, 2], split="val")
    s.append("c", 25, 3, [1, 2, -1])
    s.append("test", 50, 4, [0, 1, 2, 3], split="test")
    store = s.store
    model = tmp_path / "m.model"
    _imgscale("train", store.path, model, "--method", method)

    # 1. Rows added (a class never seen: "s"), a middle batch removed, rows forgotten.
    s.append("d", 35, 5, [0, 3, -1])
    s.append("val-s", 15, 7, [3], split="val")
    store.remove_batch("b")
    ids = store.ids("train")
    store.forget([ids[0], ids[7], ids[-1]], reason="mislabelled")
    summary = _imgscale("update", model, store.path)
    assert summary["batches_added"] == ["d", "val-s"] and summary["batches_removed"] == ["b"]
    assert summary["rows_added"] == 35 - 1 and summary["rows_removed"] == 30 + 2
    assert summary["forgotten_rows"] == 2  # of "a"; the row of "d" was never in the model
    assert summary["classes_added"] == ["s"] and summary["classes_removed"] == []
    _assert_equal_to_fresh_train(model, store, tmp_path, method)

    # 2. A batch ingested again with other rows; rows forgotten from a batch added since.
    store.remove_batch("c")
    s.append("c", 20, 6, [1, 2])
    store.forget([store.ids("train")[-2]])
    summary = _imgscale("update", model, store.path, "--out", tmp_path / "m2.model")
    assert summary["batches_added"] == ["c"] and summary["batches_removed"] == ["c"]
    assert summary["rows_added"] == 19 and summary["rows_removed"] == 25
    _assert_equal_to_fresh_train(tmp_path / "m2.model", store, tmp_path, method)

    # 3. Every row of a class removed: the class leaves the model, and is said.
    store.forget(_ids_of(store, 3))
    store.remove_batch("val-s")  # ridge validates on classes it has: as `train` does
    summary = _imgscale("update", tmp_path / "m2.model", store.path)
    assert summary["classes_removed"] == ["s"]
    _assert_equal_to_fresh_train(tmp_path / "m2.model", store, tmp_path, method)


def _ids_of(store, label: int) -> list[str]:
    return store.ids("train")[store.labels("train") == label].tolist()


def _grown(tmp_path: Path) -> tuple[Store, Path]:
    """A store and a model trained on it, then a batch added, one removed and rows forgotten."""
    s = Store(tmp_path / "s.zarr")
    s.append("a", 60, 0, [-1, 0, 1, 2])
    s.append("b", 40, 1, [0, 1, 2])
    s.append("val", 60, 2, [0, 1, 2], split="val")
    s.append("test", 50, 4, [0, 1, 2], split="test")
    return s, tmp_path / "m.model"


def _change(s: Store) -> None:
    s.append("c", 45, 5, [0, 2, -1])
    s.store.remove_batch("b")
    s.store.forget(s.store.ids("train")[[3, 11]].tolist())


def test_ncm_metric_follows_the_store_under_its_kept_metric(tmp_path):
    s, model = _grown(tmp_path)
    _imgscale("train", s.store.path, model, "--method", "ncm-metric", "--metric-dim", "3",
              "--max-iter", "20")  # fmt: skip
    W = models.load(model)[0].components_.astype(np.float64)
    _change(s)
    summary = _imgscale("update", model, s.store.path)
    assert summary["metric_learned_rows"] == 100
    assert summary["rows_changed_since_metric"] == 45 + 40 + 2
    updated = models.load(model)[0]
    np.testing.assert_array_equal(updated.components_, W.astype(np.float32))
    # The dense reference: class means of the rows as they now are, distances under W.
    X, y = s.store.features("train").compute().astype(np.float64), s.store.labels("train")
    classes = np.unique(y[y >= 0])
    means = np.stack([X[y == c].mean(axis=0) for c in classes])
    np.testing.assert_array_equal(updated.classes_, classes)
    np.testing.assert_allclose(updated.means_, means, rtol=1e-6, atol=1e-6)
    test = s.store.features("test").compute().astype(np.float64)
    distances = (((test[:, None, :] - means[None]) @ W.T) ** 2).sum(axis=2)
    np.testing.assert_array_equal(updated.predict(test), classes[distances.argmin(axis=1)])


def test_knn_neighbours_follow_the_store_under_the_kept_metric(tmp_path):
    s, model = _grown(tmp_path)
    _imgscale("train", s.store.path, model, "--method", "knn", "--metric-dim", "3",
              "--max-iter", "5")  # fmt: skip
    trained = models.load(model)[0]
    _change(s)
    s.store.forget(_ids_of(s.store, 1)[:3])  # rows of an added batch and of a kept one
    summary = _imgscale("update", model, s.store.path)
    assert summary["metric_learned_rows"] == 100
    updated = models.load(model)[0]
    np.testing.assert_array_equal(updated.components_, trained.components_)
    assert updated.n_neighbors_ == trained.n_neighbors_
    # The dense reference: the labelled train rows as they now are, in store order, under W.
    X, y = s.store.features("train").compute(), s.store.labels("train")
    expected = X[y >= 0].astype(np.float64) @ trained.components_.T.astype(np.float64)
    np.testing.assert_array_equal(updated.classes_, np.unique(y[y >= 0]))
    np.testing.assert_array_equal(updated.classes_[updated.reference_index_], y[y >= 0])
    np.testing.assert_allclose(updated.reference_, expected, rtol=0, atol=1e-5)
    dense = models.load(model)[0]
    dense.reference_ = expected.astype(np.float32)
    test = s.store.features("test").compute()
    np.testing.assert_array_equal(updated.predict(test), dense.predict(test))


def test_ssl_follows_the_store_with_its_eigenfunctions_kept_or_refitted(tmp_path):
    s, model = _grown(tmp_path)
    _imgscale("train", s.store.path, model, "--method", "ssl", "--embedding", "pcalap",
              "--n-components", "4")  # fmt: skip
    embedding = models.load(model)[0].steps[0][1]
    _change(s)
    summary = _imgscale("update", model, s.store.path, "--out", tmp_path / "kept.model")
    assert summary["embedding"] == "kept"
    from imgscale.pipeline.classify import SemiSupervisedEigenSolver

    # The solve from scratch on the rows as they now are, under the same eigenfunctions.
    U = embedding.transform(s.store.features("train").compute())
    U_val = embedding.transform(s.store.features("val").compute())
    reference = SemiSupervisedEigenSolver(lam=None).fit(
        U, s.store.labels("train"), embedding.eigenvalues_, U_val, s.store.labels("val")
    )
    kept = models.load(tmp_path / "kept.model")[0]
    test = embedding.transform(s.store.features("test").compute())
    assert kept.steps[-1][1].lam_ == reference.lam_
    np.testing.assert_array_equal(kept.steps[-1][1].classes_, reference.classes_)
    np.testing.assert_array_equal(kept.steps[-1][1].predict(test), reference.predict(test))
    scores, scores0 = kept.steps[-1][1].decision_function(test), reference.decision_function(test)
    atol = 4 * np.finfo(np.float32).eps * np.abs(scores0).max()
    np.testing.assert_allclose(scores, scores0, rtol=0, atol=atol)
    # Refitted: the model `train` fits on the store as it now is.
    summary = _imgscale("update", model, s.store.path, "--refit-embedding")
    assert summary["embedding"] == "refitted"
    _assert_equal_to_fresh_ssl(model, s.store, tmp_path)


def _assert_equal_to_fresh_ssl(model: Path, store, tmp_path: Path) -> None:
    fresh = tmp_path / "fresh-ssl.model"
    _imgscale("train", store.path, fresh, "--method", "ssl", "--embedding", "pcalap",
              "--n-components", "4")  # fmt: skip
    (classes, predicted, scores), (classes0, predicted0, scores0) = (
        _decisions(model, store),
        _decisions(fresh, store),
    )
    np.testing.assert_array_equal(classes, classes0)
    np.testing.assert_array_equal(predicted, predicted0)
    np.testing.assert_array_equal(scores, scores0)


@pytest.mark.parametrize("method", ["ncm", "ridge"])
def test_only_the_changed_rows_are_read(tmp_path, method):
    """Ridge's validation rows too: rows added to and forgotten from the validation split are
    read, the unchanged ones are not (ρ is chosen from their kept statistics)."""
    s, model = _grown(tmp_path)
    _imgscale("train", s.store.path, model, "--method", method)
    s.append("c", 45, 5, [0, 2, -1])
    s.store.remove_batch("b")
    s.append("val-2", 30, 6, [0, 1, 2], split="val")
    s.store.forget(s.store.ids("val")[[40, 75]].tolist())
    fresh = tmp_path / "fresh.model"
    _imgscale("train", s.store.path, fresh, "--method", method)
    # Rows 0-15 are of batch "a" and rows 112-127 of batch "val", both unchanged: without their
    # chunks, train fails, update does not.
    for chunk in ("0", "7"):
        (s.store.path / "features" / "c" / chunk / "0").unlink()
    assert "chunk" in _refused("train", s.store.path, tmp_path / "again.model", "--method", method)
    summary = _imgscale("update", model, s.store.path)
    assert summary["rows_added"] == 45 and summary["rows_removed"] == 40
    _assert_equal_models(model, fresh, s.store, method)


def test_the_changed_rows_are_read_through_a_graph_of_the_chunks_that_hold_them(tmp_path):
    """`features_at` and `codes_at` make one task per chunk holding rows asked for: the graph
    of an update grows with the change, not with the store."""
    for coded, codec in ((False, None), (True, _codec())):
        s = Store(tmp_path / f"s-{coded}.zarr", codec)
        s.append("a", 100, 0, [0, 1])  # 7 chunks of 16 rows
        read = s.store.codes_at if coded else s.store.features_at
        whole = (s.store.codes() if coded else s.store.features()).compute()
        positions = np.array([3, 4, 50, 99])  # in chunks 0, 3 and 6
        rows = read(positions)
        assert rows.chunks[0] == (2, 1, 1)
        np.testing.assert_array_equal(rows.compute(), whole[positions])
        assert read(np.array([], np.int64)).compute().shape == (0, whole.shape[1])


def test_a_ridge_model_choosing_rho_by_the_per_class_rate_follows_the_store(tmp_path):
    """`--rho-criterion rate` keeps no validation statistics: `update` reads the validation
    split again and chooses ρ by its per-class rate, as `train` does."""
    s, model = _grown(tmp_path)
    rate = ("--method", "ridge", "--rho-criterion", "rate")
    _imgscale("train", s.store.path, model, *rate)
    _change(s)
    s.append("val-2", 30, 6, [0, 1, 2], split="val")
    _imgscale("update", model, s.store.path)
    fresh = tmp_path / "fresh.model"
    _imgscale("train", s.store.path, fresh, *rate)
    _assert_equal_models(model, fresh, s.store, "ridge")
    updated, trained = models.load(model)[0], models.load(fresh)[0]
    assert updated.rho_criterion == "rate" and not hasattr(updated, "validation_gram_")
    np.testing.assert_allclose(updated.rho_scores_, trained.rho_scores_)


def _as_saved_before_validation_statistics(model_path: Path) -> None:
    """The ridge model at ``model_path`` as an imgscale that chose ρ by the validation rows'
    per-class rate saved it: the same fitted values, without the validation statistics."""
    model, provenance = models.load(model_path)
    for name in [name for name in vars(model) if name.startswith("validation_")]:
        delattr(model, name)
    models.save(model, model_path, replace=True, **provenance)


def test_a_ridge_model_without_validation_statistics_reads_the_validation_split_once(tmp_path):
    s, model = _grown(tmp_path)
    _imgscale("train", s.store.path, model, "--method", "ridge")
    _as_saved_before_validation_statistics(model)
    loaded, _ = models.load(model)
    assert not hasattr(loaded, "validation_gram_")
    assert (loaded.predict(s.store.features("test").compute()) >= 0).all()
    _change(s)
    _imgscale("update", model, s.store.path)  # reads all of "val", and keeps its statistics
    _assert_equal_to_fresh_train(model, s.store, tmp_path, "ridge")
    assert models.load(model)[0].validation_class_counts_.sum() == 60
    s.append("d", 30, 8, [1, 2])
    fresh = tmp_path / "fresh.model"
    _imgscale("train", s.store.path, fresh, "--method", "ridge")
    (s.store.path / "features" / "c" / "7" / "0").unlink()  # rows 112-127, of "val"
    _imgscale("update", model, s.store.path)
    _assert_equal_models(model, fresh, s.store, "ridge")


@pytest.mark.parametrize(
    ("train_args", "expected"),
    [
        (["--method", "ridge", "--embedding", "rff", "--n-components", "16"], "Nyström"),
        (["--method", "ncm", "--per-class", "5"], "learned from a sample of 5 labelled rows"),
    ],
)
def test_models_that_cannot_follow_their_store_are_refused_by_name(tmp_path, train_args, expected):
    s, model = _grown(tmp_path)
    _imgscale("train", s.store.path, model, *train_args)
    before = (model / "zarr.json").read_bytes()
    _change(s)
    message = _refused("update", model, s.store.path)
    assert message.startswith(f"model {model}") and expected in message
    assert "train it again" in message and "\n" not in message
    assert (model / "zarr.json").read_bytes() == before


def test_a_model_of_another_store_or_of_a_dropped_last_batch_is_refused(tmp_path):
    s, model = _grown(tmp_path)
    _imgscale("train", s.store.path, model, "--method", "ncm")
    other = Store(tmp_path / "other.zarr")
    other.append("a", 60, 0, [-1, 0, 1, 2])
    message = _refused("update", model, other.store.path)
    assert f"was trained on another store than {other.store.path}" in message
    s.store.remove_batch("test")  # the last batch: the store drops its rows
    s.store.remove_batch("val")  # now the last one: dropped too
    s.store.remove_batch("b")  # the last again
    message = _refused("update", model, s.store.path)
    assert (
        "batch 'b' the model learned from was removed and its rows are no longer on disk" in message
    )


def test_models_stay_valid_across_compaction_or_are_refused_by_name(tmp_path):
    from imgscale.storage import compact_store

    s, model = _grown(tmp_path)
    _imgscale("train", s.store.path, model, "--method", "ncm")
    stale = tmp_path / "stale.model"
    _imgscale("train", s.store.path, stale, "--method", "ncm")
    _change(s)
    _imgscale("update", model, s.store.path)
    compact_store(s.store.path)
    # Batches keep their digests and forgotten counts: the updated model has nothing to do.
    s.append("d", 30, 8, [1, 2])
    summary = _imgscale("update", model, s.store.path)
    assert summary["rows_added"] == 30 and summary["rows_removed"] == 0
    assert summary["batches_removed"] == [] and summary["forgotten_rows"] == 0
    _assert_equal_to_fresh_train(model, s.store, tmp_path, "ncm")
    # The model from before the change would subtract rows compaction dropped.
    message = _refused("update", stale, s.store.path)
    assert message == (
        f"store {s.store.path}: rows of batch 'a' the model learned from were forgotten and "
        "then compacted away (`imgscale compact`), so they cannot be subtracted; train the "
        "model again"
    )


def test_a_ridge_model_solved_in_its_dual_form_is_refused_by_name(tmp_path):
    """Fewer labelled rows than features: `train` solves ridge in its dual form (an n × n
    Gram), which keeps no D × D sums for `update` to add rows to; `update` says so in one line
    and leaves the model as it was. Trained again, it is the dense solution on the rows."""
    wide = 64
    store = create_store(tmp_path / "wide.zarr", wide, class_names=CLASSES, rows_per_chunk=CHUNK)
    rng = np.random.default_rng(0)
    for batch, n, split in (("a", 40, "train"), ("v", 20, "val")):
        y = rng.integers(0, len(CLASSES), n).astype(np.int32)
        X = (rng.normal(size=(n, wide)) + y[:, None]).astype(np.float32)
        store.append(batch, X, y, ids=[f"{batch}:{i}" for i in range(n)], split=split)
    model = tmp_path / "ridge.model"
    _imgscale("train", store.path, model, "--method", "ridge")
    trained, _ = models.load(model)
    assert trained.solver_ == "dual" and not hasattr(trained, "gram_")
    X, y = store.features("train").compute().astype(np.float64), store.labels("train")
    centred = X - X.mean(axis=0)
    exact = np.linalg.solve(
        centred.T @ centred + trained.rho_ * np.eye(wide), centred.T @ np.eye(len(CLASSES))[y]
    )
    np.testing.assert_allclose(trained.coef_.T, exact, rtol=0, atol=1e-5 * np.abs(exact).max())
    before = (model / "zarr.json").read_bytes()
    store.append("b", rng.normal(size=(8, wide)).astype(np.float32), np.zeros(8, np.int32))
    message = _refused("update", model, store.path)
    assert message.startswith(f"model {model} is a ridge solved in its dual form")
    assert "train it again" in message and "\n" not in message
    assert (model / "zarr.json").read_bytes() == before
