"""Paper 004's offline fits as cluster tasks, and its queries scored on the cluster, give the
same bits as in-process."""

from __future__ import annotations

import dask.array as da
import numpy as np
from distributed import Client

from imgscale.jobs.cluster import cluster_mapper
from imgscale.pipeline.classify import PredictedNeighbourhoodClassifier


def test_results_are_identical_with_and_without_the_cluster(scheduler_address):
    rng = np.random.default_rng(0)
    centres = 3 * rng.normal(size=(4, 6))
    mode = rng.integers(0, 4, 300)
    X = (centres[mode] + rng.normal(size=(300, 6))).astype(np.float32)
    y = mode % 2
    params = {"n_neighbourhoods": 80, "sizes": (10, 20), "n_samples": 3, "random_state": 0}
    alone = PredictedNeighbourhoodClassifier(**params).fit(X, y)
    expected = alone.predict_proba(X[:60])
    with Client(scheduler_address) as client:
        spread = PredictedNeighbourhoodClassifier(**params).fit(X, y, cluster_mapper(client))
        got = client.compute(spread.predict_proba(da.from_array(X[:60], chunks=20))).result()
    np.testing.assert_array_equal(spread.neighbourhood_members_, alone.neighbourhood_members_)
    np.testing.assert_array_equal(spread.regression_coef_, alone.regression_coef_)
    np.testing.assert_array_equal(got, expected)
