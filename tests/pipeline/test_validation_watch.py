"""`watch_validations`: each iterative learner shows its watcher every validation it records."""

import numpy as np
import pytest

from imgscale.pipeline.classify import (
    ExemplarHOPE,
    MetricKNeighborsClassifier,
    MetricNearestClassMean,
    watch_validations,
)
from tests.pipeline.test_ncm_metric import noisy_classes

STEPS = {"max_iter": 60, "validate_every": 20, "random_state": 0}
LEARNERS = {
    "ncm-metric": lambda: MetricNearestClassMean(n_components=2, batch_size=64, **STEPS),
    "knn": lambda: MetricKNeighborsClassifier(n_components=2, batch_size=64, **STEPS),
    "hope": lambda: ExemplarHOPE(n_factors=8, n_hidden=8, n_exemplars=6, **STEPS),
}


@pytest.mark.parametrize("name", LEARNERS)
def test_every_validation_is_shown_with_the_best_so_far(name):
    X, y = noisy_classes()
    seen = []
    with watch_validations(seen.append):
        model = LEARNERS[name]().fit(X, y)
    assert [v.iteration for v in seen][-3:] == [20, 40, 60]
    assert {v.max_iter for v in seen} == {60}
    errors = np.array([v.error for v in seen])
    np.testing.assert_array_equal(errors, np.asarray(model.validation_error_))
    np.testing.assert_array_equal([v.best_error for v in seen], np.minimum.accumulate(errors))
    first_best = [v.iteration for v in seen][int(np.argmin(errors))]
    assert seen[-1].best_iteration == first_best == model.best_iteration_


@pytest.mark.parametrize("name", LEARNERS)
def test_each_learner_stops_after_n_iter_no_change_validations_without_a_better_w(name):
    X, y = noisy_classes()
    seen = []
    patience = 2
    model = LEARNERS[name]().set_params(max_iter=2000, validate_every=1, n_iter_no_change=patience)
    with watch_validations(seen.append):
        model.fit(X, y)
    errors = np.asarray(model.validation_error_)
    # The best W came `patience` validations before the end and none after it was better.
    assert int(np.argmin(errors)) == len(errors) - 1 - patience
    assert model.best_iteration_ == seen[-1 - patience].iteration
    assert seen[-1].iteration == model.n_iter_ < 2000  # an early stop is its last validation


def test_nothing_is_shown_outside_the_context():
    X, y = noisy_classes()
    seen = []
    with watch_validations(seen.append):
        pass
    LEARNERS["ncm-metric"]().fit(X, y)
    assert seen == []
