"""Behaviour every embedding shares: dask = numpy, lazy float32 output, parameters sent once,
composition with RidgeClassifier in make_pipeline, and scikit-learn's estimator checks."""

import cloudpickle
import dask.array as da
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import load_digits
from sklearn.pipeline import make_pipeline
from sklearn.utils.estimator_checks import parametrize_with_checks

from imgscale.pipeline.classify import RidgeClassifier
from imgscale.pipeline.embed import (
    PCA,
    AddKPCA,
    GaussianRandomProjection,
    HistogramIntersection,
    Nystrom,
    RandomFourierFeatures,
    SquareRoot,
)
from tests.pipeline.embed.conftest import as_dask

SMALL = [
    RandomFourierFeatures(64, random_state=0),
    SquareRoot(),
    HistogramIntersection(n_levels=4),
    Nystrom(n_components=8, n_landmarks=40, random_state=0),
    Nystrom(n_components=8, n_landmarks=40, kernel="intersection", random_state=0),
    AddKPCA(n_landmarks=16, random_state=0),
    PCA(n_components=4),
    PCA(n_components=4, whiten=True),
    GaussianRandomProjection(16, random_state=0),
]
IDS = [repr(e) for e in SMALL]


@pytest.mark.parametrize("estimator", SMALL, ids=IDS)
def test_dask_input_gives_the_numpy_result_lazily_as_float32(estimator, histograms):
    expected = clone(estimator).fit(histograms).transform(histograms)
    lazy = clone(estimator).fit(as_dask(histograms)).transform(as_dask(histograms))
    assert isinstance(lazy, da.Array)
    assert lazy.chunks[0] == as_dask(histograms).chunks[0]
    got = lazy.compute()
    assert expected.dtype == got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("estimator", SMALL, ids=IDS)
def test_fitted_parameters_enter_the_transform_graph_once(estimator, histograms):
    big = np.tile(histograms, (10, 1))
    model = clone(estimator).fit(big)
    fitted_bytes = sum(v.nbytes for v in vars(model).values() if isinstance(v, np.ndarray))

    def graph_bytes(chunk_rows):
        graph = model.transform(as_dask(big, chunk_rows)).__dask_graph__()
        return len(cloudpickle.dumps(dict(graph)))

    # 20× the chunks: the graph grows by small per-task records, not a copy of the parameters.
    assert graph_bytes(100) - graph_bytes(2000) < max(fitted_bytes, 1) + 20_000


@pytest.mark.parametrize("estimator", SMALL, ids=IDS)
def test_composes_with_ridge_classifier_in_make_pipeline(estimator):
    X, y = load_digits(return_X_y=True)
    model = make_pipeline(clone(estimator), RidgeClassifier()).fit(X[::2], y[::2])
    # PCA keeps only 4 of 64 dimensions here; every other embedding scores above 0.9.
    assert model.score(X[1::2], y[1::2]) > 0.6


def test_wrong_width_is_rejected(histograms):
    model = RandomFourierFeatures(8, random_state=0).fit(histograms)
    with pytest.raises(ValueError, match="features"):
        model.transform(as_dask(histograms[:, :5]))


# Outputs are float32 by design; BLAS blocks a GEMM differently for a permuted or sliced batch,
# so rows differ by about one float32 ulp, above the check's float64 tolerance (rtol 1e-7).
FLOAT32_ROUNDING = "float32 GEMM output differs by ~1 ulp with row order"


def _expected_failed(estimator):
    if isinstance(estimator, (RandomFourierFeatures, PCA, GaussianRandomProjection)):
        return {"check_methods_sample_order_invariance": FLOAT32_ROUNDING}
    return {}


@parametrize_with_checks(
    [
        RandomFourierFeatures(32, n_neighbors=3, random_state=0),
        SquareRoot(),
        HistogramIntersection(),
        Nystrom(n_components=4, n_landmarks=20, n_neighbors=3, random_state=0),
        AddKPCA(n_landmarks=8, random_state=0),
        PCA(n_components=2),
        GaussianRandomProjection(8, random_state=0),
    ],
    expected_failed_checks=_expected_failed,
)
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)
