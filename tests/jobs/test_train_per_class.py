"""`imgscale train --per-class N --seed S`: a classifier learns from N labelled rows a class of
the split (a seeded sample, paper 000 §4.1), the other rows counting as unlabelled."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner, Result

from imgscale.jobs import models
from imgscale.jobs.cli import cli
from imgscale.jobs.train import labelled_sample
from imgscale.storage import open_store


def run(*args) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args])


def names(n: int) -> np.ndarray:
    return np.array([f"img/{i:05d}" for i in range(n)])


def test_sample_keeps_n_rows_a_class_with_their_labels():
    y = np.repeat(np.arange(4), [30, 12, 50, 20])
    y[::7] = -1  # unlabelled rows stay unlabelled
    sample = labelled_sample(y, names(len(y)), 10, seed=1)
    kept = sample >= 0
    np.testing.assert_array_equal(np.bincount(sample[kept]), [10, 10, 10, 10])
    np.testing.assert_array_equal(sample[kept], y[kept])
    assert (sample[y == -1] == -1).all()


def test_sample_is_seeded_and_nested_across_sizes():
    y, ids = np.tile(np.arange(5), 40), names(200)
    a, b = labelled_sample(y, ids, 8, seed=3), labelled_sample(y, ids, 8, seed=3)
    np.testing.assert_array_equal(a, b)
    assert (labelled_sample(y, ids, 8, seed=4) != a).any()
    larger = labelled_sample(y, ids, 20, seed=3)
    # With one seed, the rows labelled at 8 a class are among those labelled at 20.
    assert (larger[a >= 0] == a[a >= 0]).all()


def test_sample_is_the_same_images_whatever_the_row_order():
    # Ingests commit rows in the order their tasks finish: the sample must follow the images.
    y, ids = np.tile(np.arange(5), 40), names(200)
    sample = labelled_sample(y, ids, 8, seed=2)
    order = np.random.default_rng(0).permutation(200)
    shuffled = labelled_sample(y[order], ids[order], 8, seed=2)
    assert set(ids[order][shuffled >= 0]) == set(ids[sample >= 0])
    np.testing.assert_array_equal(shuffled, sample[order])


def test_sample_refuses_a_class_with_too_few_rows():
    y = np.repeat(np.arange(3), [10, 4, 10])
    with pytest.raises(ValueError, match=r"class 'b' has only 4 labelled rows in split 'train'"):
        labelled_sample(y, names(24), 5, class_names=["a", "b", "c"])


def test_cli_ncm_learns_from_the_sampled_rows_only(tmp_path, digits_store, scheduler_address):
    model = tmp_path / "ncm.model"
    result = run(
        "train", digits_store.path, model, "--method", "ncm", "--per-class", 20, "--seed", 7,
        "--scheduler", scheduler_address,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    ncm, provenance = models.load(model)
    store = open_store(digits_store.path)
    y = store.labels("train")
    np.testing.assert_array_equal(ncm.class_counts_, np.full(10, 20))
    assert provenance["labelled_per_class"] == 20 and provenance["sample_seed"] == 7
    # The means are those of exactly the rows labelled_sample draws with the same seed.
    sample = labelled_sample(y, store.ids("train"), 20, seed=7)
    X = store.features("train").compute().astype(np.float64)
    expected = np.stack([X[sample == c].mean(axis=0) for c in range(10)])
    np.testing.assert_allclose(ncm.means_, expected, rtol=1e-5, atol=1e-6)


def test_cli_ridge_centres_on_all_rows_and_fits_the_sample(
    tmp_path, digits_store, scheduler_address
):
    model = tmp_path / "ridge.model"
    result = run(
        "train", digits_store.path, model, "--method", "ridge", "--rho", 0.2, "--per-class", 15,
        "--scheduler", scheduler_address,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    ridge, _ = models.load(model)
    store = open_store(digits_store.path)
    X = store.features("train").compute().astype(np.float64)
    sample = labelled_sample(store.labels("train"), store.ids("train"), 15, seed=0)
    centred = X[sample >= 0] - X.mean(axis=0)
    Y = (sample[sample >= 0, None] == np.arange(10)).astype(np.float64)
    coef = np.linalg.solve(centred.T @ centred + 0.2 * np.eye(X.shape[1]), centred.T @ Y).T
    np.testing.assert_allclose(ridge.coef_, coef, rtol=0, atol=1e-6 * np.abs(coef).max())
    np.testing.assert_allclose(ridge.mean_, X.mean(axis=0), rtol=1e-9)


def test_cli_refuses_more_rows_than_a_class_has(tmp_path, digits_store):
    counts = np.bincount(open_store(digits_store.path).labels("train"))
    model = tmp_path / "m"
    result = run("train", digits_store.path, model, "--per-class", counts.min() + 1)
    assert result.exit_code != 0
    assert f"has only {counts.min()} labelled rows in split 'train'" in str(result.exception)
    assert not model.exists()


def test_cli_refuses_a_seed_without_per_class(tmp_path, digits_store):
    result = run("train", digits_store.path, tmp_path / "m", "--seed", 3)
    assert result.exit_code != 0
    assert "--seed draws the --per-class sample" in result.output
