"""Small labelled data with unlabelled rows that move the mean, shared by the pipeline tests."""

import dask.array as da
import numpy as np
import pytest

N_LABELLED, N_UNLABELLED, N_FEATURES, N_CLASSES = 300, 120, 12, 5


@pytest.fixture
def data():
    """(X float32, y with -1 for unlabelled rows); the unlabelled rows sit far from the rest."""
    rng = np.random.default_rng(0)
    y_l = rng.integers(0, N_CLASSES, N_LABELLED)
    centres = rng.normal(size=(N_CLASSES, N_FEATURES)) * 2
    X_l = centres[y_l] + rng.normal(size=(N_LABELLED, N_FEATURES))
    X_u = rng.normal(size=(N_UNLABELLED, N_FEATURES)) + 3.0
    order = rng.permutation(N_LABELLED + N_UNLABELLED)
    X = np.vstack([X_l, X_u]).astype(np.float32)[order]
    y = np.concatenate([y_l, np.full(N_UNLABELLED, -1)])[order]
    return X, y


def as_dask(a, rows=57):
    """A row-chunked dask array with several (uneven) chunks."""
    return da.from_array(a, chunks=(rows, *a.shape[1:]))


def computing_with(fn):
    """An in-process executor whose `compute` is ``fn(*collections)`` (for `use_executor`)."""
    from imgscale.pipeline.compute import InProcess

    class Hooked(InProcess):
        def compute(self, collections):
            return fn(*collections)

    return Hooked()
