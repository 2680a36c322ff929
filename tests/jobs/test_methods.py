"""The method table: every entry reaches `imgscale train`, its help and the model allow-list;
options are refused where they do not apply; a new entry trains through `jobs.train.train`."""

from __future__ import annotations

import re

import dask.array as da
import numpy as np
import pytest
from click.testing import CliRunner

from imgscale.jobs import methods
from imgscale.jobs.cli import cli
from imgscale.jobs.models import MODEL_CLASSES
from imgscale.jobs.train import train
from imgscale.pipeline.classify import NearestClassMean


def train_help() -> str:
    result = CliRunner().invoke(cli, ["train", "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("name", list(methods.METHODS))
def test_each_method_is_a_choice_listed_in_help_with_its_options(name):
    command = cli.commands["train"]
    method_param = next(p for p in command.params if p.name == "method")
    assert name in method_param.type.choices
    entry = methods.METHODS[name]
    assert f"  {name} " in train_help().split("Methods:")[1]
    flags = {flag for p in command.params for flag in p.opts}
    for option in entry.options:
        assert option.flag in flags


def assert_loadable(reference: str) -> None:
    """The class ``reference`` names is an estimator of pipeline.classify or .embed (their
    ``__init__`` exports it), under its own name in the model allow-list."""
    module, name = reference.split(":")
    assert module in (methods.CLASSIFY, methods.EMBED)
    cls = methods.estimator_class(reference)
    assert cls.__name__ == name and hasattr(cls, "fit") and hasattr(cls, "get_params")
    assert MODEL_CLASSES[name] == reference


@pytest.mark.parametrize("name", list(methods.METHODS))
def test_each_method_estimator_is_loadable(name):
    for reference in methods.METHODS[name].estimators:
        assert_loadable(reference)


def test_every_embedding_is_loadable():
    for reference, _ in methods.EMBEDDINGS.values():
        assert_loadable(reference)


def test_option_choices_are_the_estimators_own():
    """The table spells the choices out (--help imports no estimator); they must not drift."""
    from imgscale.pipeline.classify import ExemplarHOPE, RidgeClassifier
    from imgscale.pipeline.gram import GRAM_PRECISIONS

    assert methods.GRAM_PRECISION.type == GRAM_PRECISIONS
    assert methods.RHO_CRITERION.type == RidgeClassifier.RHO_CRITERIA
    assert methods.HOPE_EXEMPLAR_INIT.type == ExemplarHOPE.EXEMPLAR_INITS
    assert methods.HOPE_SOLVER.type == ExemplarHOPE.SOLVERS
    for value in GRAM_PRECISIONS:  # and the estimator accepts each
        RidgeClassifier(gram_precision=value).fit(np.eye(3, dtype=np.float32), np.arange(3))


def test_the_sgd_iteration_defaults_in_help_are_the_estimators_own():
    from imgscale.pipeline.classify import (
        ExemplarHOPE,
        MetricKNeighborsClassifier,
        MetricNearestClassMean,
    )

    defaults = {
        "ncm-metric": MetricNearestClassMean().max_iter,
        "knn": MetricKNeighborsClassifier().max_iter,
        "hope": ExemplarHOPE().max_iter,
    }
    spelled = ", ".join(f"{name} {iterations}" for name, iterations in defaults.items())
    assert f"(default: {spelled})" in methods.MAX_ITER.help
    # Early stopping: never by default for the metric learners, after 10 validations for hope.
    assert MetricNearestClassMean().n_iter_no_change is None
    assert MetricKNeighborsClassifier().n_iter_no_change is None
    assert f"hope {ExemplarHOPE().n_iter_no_change})" in methods.PATIENCE.help
    assert "ncm-metric and knn run --max-iter" in methods.PATIENCE.help


def test_an_option_of_another_method_is_refused_naming_the_methods_that_take_it(
    digits_store, tmp_path
):
    result = CliRunner().invoke(
        cli, ["train", str(digits_store.path), str(tmp_path / "m"), "--method", "ridge",
              "--max-iter", "5"],
    )  # fmt: skip
    assert result.exit_code == 2
    takers = re.search(r"--max-iter applies to --method (.*) only", result.output).group(1)
    assert {"ncm-metric", "knn"} <= set(takers.split(", ")) and "ridge" not in takers
    assert not (tmp_path / "m").exists()


def test_a_validation_split_for_a_method_that_reads_none_is_refused(digits_store, tmp_path):
    result = CliRunner().invoke(
        cli, ["train", str(digits_store.path), str(tmp_path / "m"), "--method", "ncm",
              "--val-split", "val"],
    )  # fmt: skip
    assert result.exit_code == 2
    takers = re.search(r"--val-split applies to --method (.*) only", result.output).group(1)
    assert {"ridge", "ncm-metric", "knn", "ssl"} <= set(takers.split(", "))
    assert "ncm" not in takers.split(", ")
    assert not (tmp_path / "m").exists()


def test_train_refuses_an_option_the_method_does_not_take(digits_store):
    with pytest.raises(ValueError, match="--rho applies to --method ridge, ssl only"):
        train(digits_store, "ncm", rho=1.0)


def test_ssl_without_an_eigenvalue_embedding_is_refused(digits_store):
    with pytest.raises(ValueError, match="needs --embedding"):
        train(digits_store, "ssl")


def test_a_new_entry_trains_with_the_store_data_and_options_it_declares(monkeypatch, digits_store):
    seen = {}
    shrink = methods.Option("shrink", float, 0.0, "a test option.")

    def fit(data: methods.TrainingData, options: dict):
        seen["options"] = options
        seen["validation"] = data.validation(labelled_only=True)
        return NearestClassMean().fit(data.X, data.y)

    entry = methods.Method(
        "test-ncm", "test", fit, (f"{methods.CLASSIFY}:NearestClassMean",), (shrink,), True
    )
    monkeypatch.setitem(methods.METHODS, "test-ncm", entry)
    model = train(digits_store, "test-ncm", shrink=0.5)
    assert seen["options"] == {"shrink": 0.5}
    X_val, y_val = seen["validation"]
    np.testing.assert_array_equal(y_val, digits_store.labels("val"))
    np.testing.assert_array_equal(X_val.compute(), digits_store.features("val").compute())
    X, y = digits_store.features("train").compute(), digits_store.labels("train")
    means = np.stack([X[y == c].mean(axis=0) for c in range(10)])
    np.testing.assert_allclose(model.means_, means, rtol=1e-5, atol=1e-5)
    assert train(digits_store, "test-ncm").classes_.tolist() == list(range(10))
    assert seen["options"] == {"shrink": 0.0}


class ArrayStore:
    """What `TrainingData` reads of a raw store, over in-memory splits."""

    codec = None  # rows kept as float32

    def __init__(self, splits: dict[str, tuple[np.ndarray, np.ndarray]]):
        self.splits = splits

    def features(self, split, where=None):
        X = self.splits[split][0]
        return da.from_array(X if where is None else X[where], chunks=(2, -1))

    def stored_rows(self, split):
        return self.features(split)

    def labels(self, split):
        return self.splits[split][1]


def test_validation_keeps_or_drops_unlabelled_rows_and_is_none_without_labelled_ones():
    X_val = np.arange(12, dtype=np.float32).reshape(4, 3)
    store = ArrayStore(
        {
            "train": (np.ones((2, 3), np.float32), np.array([0, 1])),
            "val": (X_val, np.array([1, -1, 0, -1])),
            "unlabelled": (X_val, np.full(4, -1)),
        }
    )
    X, y = methods.TrainingData(store, "train", "val").validation()
    np.testing.assert_array_equal(X.compute(), X_val)
    np.testing.assert_array_equal(y, [1, -1, 0, -1])
    X, y = methods.TrainingData(store, "train", "val").validation(labelled_only=True)
    np.testing.assert_array_equal(X.compute(), X_val[[0, 2]])
    np.testing.assert_array_equal(y, [1, 0])
    assert methods.TrainingData(store, "train", "unlabelled").validation() is None
    assert methods.TrainingData(store, "train", None).validation() is None
    assert methods.TrainingData(store, "train", "val").stored()[1] is None
