"""scikit-learn's estimator checks and pipeline composition for the classifiers."""

from sklearn.datasets import load_digits
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from imgscale.pipeline.classify import NearestClassMean, RidgeClassifier

# The check uses labels {-1, 1}; here -1 means "unlabelled" (scikit-learn's semi-supervised
# convention, design doc), so that problem has one class by construction.
UNLABELLED_MINUS_ONE = "label -1 means unlabelled, so labels {-1, 1} are one class"


def _expected_failed(estimator):
    return {"check_classifiers_classes": UNLABELLED_MINUS_ONE}


@parametrize_with_checks(
    [RidgeClassifier(), NearestClassMean()], expected_failed_checks=_expected_failed
)
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


def test_ridge_classifier_works_after_standard_scaler_in_make_pipeline():
    X, y = load_digits(return_X_y=True)
    model = make_pipeline(StandardScaler(), RidgeClassifier()).fit(X[::2], y[::2])
    assert model.score(X[1::2], y[1::2]) > 0.9


def test_nearest_class_mean_works_after_standard_scaler_in_make_pipeline():
    X, y = load_digits(return_X_y=True)
    model = make_pipeline(StandardScaler(), NearestClassMean()).fit(X[::2], y[::2])
    assert model.score(X[1::2], y[1::2]) > 0.85
