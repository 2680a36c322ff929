"""`imgscale train --gram-precision`: ridge's Gram precision chosen on the command line, saved in
the model, and a float32 Gram giving the float64 result to within its rounding."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner, Result

from imgscale.jobs import models
from imgscale.jobs.cli import cli
from imgscale.storage import open_store


def run(*args) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args])


def dense_ridge(E: np.ndarray, E_all: np.ndarray, y: np.ndarray, rho: float) -> np.ndarray:
    """Wᵀ of ridge on labelled rows E centred on the mean of E_all, solved densely in float64."""
    E, mean = E.astype(np.float64), E_all.astype(np.float64).mean(axis=0)
    classes = np.unique(y)
    Y = (y[:, None] == classes[None, :]).astype(np.float64)
    centred = E - mean
    gram = centred.T @ centred + rho * np.eye(E.shape[1])
    return np.linalg.solve(gram, centred.T @ Y).T


@pytest.fixture(scope="module")
def trained(tmp_path_factory, digits_store, scheduler_address) -> dict:
    """RFF-300 → ridge trained through the CLI once per precision, at a fixed ρ."""
    root = tmp_path_factory.mktemp("gram-precision")
    out = {}
    for precision in ("float64", "float32"):
        model = root / f"{precision}.model"
        result = run(
            "train", digits_store.path, model, "--embedding", "rff", "--n-components", "300",
            "--gamma", "0.002", "--method", "ridge", "--rho", "0.2", "--gram-precision", precision,
            "--scheduler", scheduler_address,
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        out[precision] = models.load(model)[0]
    return out


@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_each_precision_is_saved_and_matches_a_dense_solve(trained, digits_store, precision):
    pipeline = trained[precision]
    rff, ridge = pipeline.steps[0][1], pipeline.steps[1][1]
    assert ridge.gram_precision == precision
    store = open_store(digits_store.path)
    X, y = store.features("train").compute(), store.labels("train")
    E = rff.transform(X)
    labelled = y >= 0
    expected = dense_ridge(E[labelled], E, y[labelled], 0.2)
    scale = np.abs(expected).max()
    tolerance = 1e-6 if precision == "float64" else 1e-4
    np.testing.assert_allclose(ridge.coef_, expected, rtol=0, atol=tolerance * scale)


def test_float32_gram_gives_the_float64_predictions(trained, digits_store):
    store = open_store(digits_store.path)
    X_test = store.features("test").compute()
    a, b = trained["float64"], trained["float32"]
    # Same embedding (same seed and bandwidth), so the models differ only by the Gram's rounding.
    np.testing.assert_array_equal(a.steps[0][1].random_weights_, b.steps[0][1].random_weights_)
    np.testing.assert_allclose(b.decision_function(X_test), a.decision_function(X_test), atol=1e-4)
    assert (a.predict(X_test) == b.predict(X_test)).mean() == 1.0


def test_gram_precision_is_refused_for_other_methods(tmp_path, digits_store):
    result = run(
        "train", digits_store.path, tmp_path / "m", "--method", "ncm", "--gram-precision", "float32"
    )
    assert result.exit_code != 0
    assert "--gram-precision applies to --method ridge only" in result.output
    assert not (tmp_path / "m").exists()
