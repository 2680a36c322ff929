"""Declared parameter rules: every estimator refuses a bad parameter before reading a row, in one
line naming the parameter, what it may be and the value given."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest

from imgscale.pipeline.classify import (
    ExemplarHOPE,
    MetricKNeighborsClassifier,
    MetricNearestClassMean,
    PredictedNeighbourhoodClassifier,
)
from imgscale.pipeline.embed import (
    AddKPCA,
    GaussianRandomProjection,
    HistogramIntersection,
    Nystrom,
    PCALap,
    RandomFourierFeatures,
)
from imgscale.pipeline.params import Each, Interval, Options, check_params


class Dummy:
    _parameter_rules: ClassVar[dict[str, tuple]] = {
        "rate": (Interval(float, 0, 1, closed="left"),),
        "count": (Interval(int, 1, None), None),
        "mode": (Options(("fast", "exact")),),
        "sizes": (Each(Interval(int, 2, None)),),
    }

    def __init__(self, rate=0.5, count=None, mode="fast", sizes=(2, 3)):
        self.rate, self.count, self.mode, self.sizes = rate, count, mode, sizes


@pytest.mark.parametrize(
    ("param", "value", "message"),
    [
        ("rate", 1.0, "rate must be in [0, 1), got 1.0"),
        ("rate", float("nan"), "rate must be in [0, 1), got nan"),
        ("count", 0, "count must be positive or None, got 0"),
        ("count", 1.5, "count must be positive or None, got 1.5"),
        ("count", True, "count must be positive or None, got True"),
        ("mode", "slow", "mode must be one of fast, exact, got 'slow', an unknown mode"),
        ("sizes", (), "sizes must be a non-empty sequence of values each at least 2, got ()"),
        (
            "sizes",
            (2, 1),
            "sizes must be a non-empty sequence of values each at least 2, got (2, 1)",
        ),
    ],
)
def test_a_value_no_rule_accepts_is_refused_in_one_line_naming_it(param, value, message):
    with pytest.raises(ValueError) as refused:
        check_params(Dummy(**{param: value}))
    assert str(refused.value) == message


def test_values_a_rule_accepts_pass():
    check_params(Dummy(rate=0, count=np.int64(3), mode="exact", sizes=[2, np.int32(9)]))
    check_params(Dummy(rate=np.float32(0.25)))


def test_a_positive_float_without_upper_bound_must_be_finite():
    rule = Interval(float, 0, None, closed="neither")
    assert rule.describe() == "positive and finite"
    assert not rule.accepts(np.inf) and rule.accepts(1e30)


@pytest.mark.parametrize(
    ("estimator", "message"),
    [
        (ExemplarHOPE(batch_size=0), "batch_size must be positive, got 0"),
        (MetricKNeighborsClassifier(n_targets=0), "n_targets must be positive, got 0"),
        (MetricNearestClassMean(learning_rate=-1.0), "learning_rate must be positive and finite"),
        (PredictedNeighbourhoodClassifier(compression=1.5), "compression must be in (0, 1]"),
        (PredictedNeighbourhoodClassifier(metric="cosine"), "metric must be one of euclidean"),
        (PCALap(n_bins=2), "n_bins must be at least 3, got 2"),
        (AddKPCA(n_landmarks=0), "n_landmarks must be positive, got 0"),
        (GaussianRandomProjection(n_components=0), "n_components must be positive, got 0"),
        (HistogramIntersection(n_levels=0), "n_levels must be positive, got 0"),
        (Nystrom(kernel="laplace"), "kernel must be one of gaussian, intersection"),
        (RandomFourierFeatures(gamma=-1.0), "gamma must be positive and finite or None, got -1.0"),
    ],
)
def test_an_estimator_refuses_a_bad_parameter_when_it_fits(estimator, message):
    X = np.abs(np.random.default_rng(0).normal(size=(40, 4))).astype(np.float32)
    y = np.arange(40) % 2
    with pytest.raises(ValueError) as refused:
        estimator.fit(X, y)
    assert str(refused.value).startswith(message)
    assert "\n" not in str(refused.value)
