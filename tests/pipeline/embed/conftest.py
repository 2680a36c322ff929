"""Small non-negative data (histogram-like) and a dask helper for the embedding tests."""

import dask.array as da
import numpy as np
import pytest


@pytest.fixture
def histograms():
    """200 × 6 non-negative float32 rows with distinct values (no ties in any column)."""
    rng = np.random.default_rng(0)
    return rng.gamma(2.0, 1.0, size=(200, 6)).astype(np.float32)


def as_dask(a, rows=37):
    """A row-chunked dask array with several uneven chunks."""
    return da.from_array(a, chunks=(rows, *a.shape[1:]))


def match_signs(a: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """`a` with column signs flipped to agree with `reference` (eigenvector signs are free)."""
    signs = np.sign((a * reference).sum(axis=0))
    return a * np.where(signs == 0, 1, signs)
