"""A bad method option is refused by the flag the user typed, not the estimator's name for it."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from imgscale.jobs.cli import cli
from imgscale.jobs.methods import METHODS, estimator_class
from imgscale.storage import create_store


@pytest.mark.parametrize("method", [m for m in METHODS.values() if m.options], ids=lambda m: m.name)
def test_every_option_of_a_method_names_a_parameter_its_estimator_checks(method):
    checked = set()
    for reference in method.estimators:
        checked |= set(getattr(estimator_class(reference), "_parameter_rules", {}))
    # Each option a method takes sets a parameter its estimator checks by rule, or one whose
    # other checks the method names (``parameters``), or is read by jobs itself.
    read_by_jobs = {"rho", "gram_precision", "rho_criterion", "sizes"}
    names = {o.name for o in method.options} - read_by_jobs
    reached = {method.parameters.get(p, p) for p in checked} | set(method.parameters.values())
    assert names <= reached, names - reached


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--method", "hope", "--factors", "0"], "--factors must be positive"),
        (["--method", "hope", "--hidden-units", "0"], "--hidden-units must be positive"),
        (["--method", "knn", "--metric-dim", "0"], "--metric-dim must be positive"),
        (["--method", "knn", "--n-iter-no-change", "0"], "--n-iter-no-change must be positive"),
        (["--method", "local", "--samples", "0"], "--samples must be positive"),
        (["--method", "hope", "--exemplars", "2"], "--exemplars is 2: need at least one"),
    ],
)
def test_a_bad_option_is_named_by_its_flag(tmp_path, argv, message):
    rng = np.random.default_rng(0)
    store = create_store(tmp_path / "s.zarr", 4)
    store.append("b", rng.standard_normal((60, 4)).astype(np.float32), np.arange(60) % 3)
    result = CliRunner().invoke(cli, ["train", str(store.path), str(tmp_path / "m"), *argv])
    assert result.exit_code != 0
    assert str(result.exception).startswith(message), result.exception
