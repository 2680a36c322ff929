"""Models round-trip through zarr + JSON, and loading only ever builds allow-listed classes."""

from __future__ import annotations

import json

import dask.array as da
import numpy as np
import pytest
from sklearn.datasets import load_digits

from imgscale.jobs import models
from imgscale.pipeline.classify import MetricKNeighborsClassifier, NearestClassMean, RidgeClassifier
from imgscale.storage import StoreError


@pytest.fixture(scope="module")
def digits():
    data = load_digits()
    return data.data.astype(np.float32), data.target


@pytest.mark.parametrize("estimator", [RidgeClassifier(rho=0.2), NearestClassMean()])
def test_loaded_model_scores_exactly_as_saved(tmp_path, digits, estimator):
    X, y = digits
    fitted = estimator.fit(X[:1000], y[:1000])
    models.save(fitted, tmp_path / "m", store="digits")
    loaded, provenance = models.load(tmp_path / "m")
    assert type(loaded) is type(fitted)
    assert provenance["store"] == "digits"
    np.testing.assert_array_equal(loaded.decision_function(X), fitted.decision_function(X))


@pytest.mark.parametrize("estimator", [RidgeClassifier(rho=0.2), NearestClassMean()])
def test_partial_fit_continues_after_reload(tmp_path, digits, estimator):
    X, y = digits
    uninterrupted = type(estimator)(**estimator.get_params()).fit(X[:900], y[:900])
    uninterrupted.partial_fit(X[900:], y[900:])
    models.save(estimator.fit(X[:900], y[:900]), tmp_path / "m")
    resumed, _ = models.load(tmp_path / "m")
    resumed.partial_fit(X[900:], y[900:])
    np.testing.assert_allclose(
        resumed.decision_function(X), uninterrupted.decision_function(X), rtol=1e-6, atol=1e-6
    )


def test_saving_over_an_existing_model_is_refused(tmp_path, digits):
    X, y = digits
    models.save(NearestClassMean().fit(X, y), tmp_path / "m")
    with pytest.raises(StoreError, match="already exists"):
        models.save(NearestClassMean().fit(X, y), tmp_path / "m")


def test_a_model_naming_a_class_outside_the_allow_list_is_refused(tmp_path, digits):
    X, y = digits
    models.save(NearestClassMean().fit(X, y), tmp_path / "m")
    metadata_file = tmp_path / "m" / "zarr.json"
    metadata = json.loads(metadata_file.read_text())
    record = metadata["attributes"]["imgscale_model"]
    record["steps"][0]["kind"] = "subprocess.Popen"
    # A record without a checksum (schema version 2), so the allow-list is what refuses it.
    record["schema_version"] = 2
    del record["record_crc32c"]
    metadata_file.write_text(json.dumps(metadata))
    with (
        pytest.warns(UserWarning, match="schema version 2"),
        pytest.raises(StoreError, match=r"unknown estimator 'subprocess\.Popen'"),
    ):
        models.load(tmp_path / "m")


def test_a_knn_fitted_on_dask_rows_holds_numpy_state_and_loads_equal(tmp_path, digits):
    """kNN fitted on dask rows (irregular row chunks included) holds its reference rows as numpy,
    so it saves and loads without a cluster."""
    X, y = digits
    rows = da.from_array(X, chunks=((700, 500, 597), 64))
    fitted = MetricKNeighborsClassifier(n_neighbors=3, n_components=16, max_iter=5).fit(rows, y)
    assert isinstance(fitted.reference_, np.ndarray)
    models.save(fitted, tmp_path / "m")
    loaded, _ = models.load(tmp_path / "m")
    np.testing.assert_array_equal(loaded.reference_, fitted.reference_)
    np.testing.assert_array_equal(loaded.predict(X[:200]), fitted.predict(X[:200]))
