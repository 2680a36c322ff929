"""`imgscale plot`: a PNG of a model's 2-D embedding of sampled rows, exemplars drawn."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from click.testing import CliRunner

from imgscale.jobs import models
from imgscale.jobs.cli import cli
from imgscale.jobs.plot import PLOT_HINT, embedded_sample
from imgscale.pipeline.classify import ExemplarHOPE
from imgscale.pipeline.embed import PCA


@pytest.fixture(scope="module")
def hope_model(digits_store, tmp_path_factory):
    X, y = digits_store.features("train").compute(), digits_store.labels("train")
    model = ExemplarHOPE(n_factors=40, n_hidden=20, n_exemplars=10, max_iter=20, random_state=0)
    path = tmp_path_factory.mktemp("plot") / "hope.model"
    models.save(model.fit(X, y), path)
    return path


def test_sample_is_the_embedding_of_distinct_labelled_rows_of_the_split(hope_model, digits_store):
    model, _ = models.load(hope_model)
    points, labels = embedded_sample(model, digits_store, "test", max_points=100)
    assert points.shape == (100, 2)
    X_test, y_test = digits_store.features("test").compute(), digits_store.labels("test")
    embedded = model.transform(X_test)
    # each point is the embedding of one test row with that label, no row twice
    match = np.abs(points[:, None, :] - embedded[None]).max(axis=2) < 1e-5
    rows = match.argmax(axis=1)
    assert match.any(axis=1).all() and len(set(rows)) == 100
    np.testing.assert_array_equal(labels, y_test[rows])


def test_plot_writes_a_png_with_the_exemplars(
    hope_model, digits_store, tmp_path, scheduler_address
):
    out = tmp_path / "hope.png"
    args = [hope_model, digits_store.path, out, "--json", "--scheduler", scheduler_address]
    result = CliRunner().invoke(cli, ["plot", *map(str, args)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert '"points": 360' in result.stdout and '"exemplars": 10' in result.stdout


def test_a_model_without_a_2d_embedding_is_refused(digits_store, tmp_path):
    X = digits_store.features("train").compute()
    models.save(PCA(n_components=1).fit(X), tmp_path / "pca.model")
    model, _ = models.load(tmp_path / "pca.model")
    with pytest.raises(ValueError, match="embeds to \\(1,\\) dimensions; a plot needs 2"):
        embedded_sample(model, digits_store, "test", 50)


def test_without_matplotlib_the_error_says_what_to_install(
    hope_model, digits_store, tmp_path, monkeypatch, scheduler_address
):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    args = [hope_model, digits_store.path, tmp_path / "x.png", "--scheduler", scheduler_address]
    result = CliRunner().invoke(cli, ["plot", *map(str, args)])
    assert result.exit_code != 0
    assert str(result.exception) == PLOT_HINT
    assert "dask:" not in result.output  # refused before connecting to any cluster
    assert not (tmp_path / "x.png").exists()
