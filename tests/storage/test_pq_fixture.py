"""A PQ store written before the codec moved to `pipeline` (tests/fixtures/pq-store-v2, written at
7b97115) opens and reads back exactly what it read then: codes, decoded rows, a split, metadata.

The fixture is 300 rows of D = 16 in two batches (ids given for the second, "train" and "test"
splits, three classes and unlabelled rows), 128 rows a chunk, codes of M = 4 with a rotation,
and the ``.npy`` files beside it hold what that code read back (codes, all rows, the test split).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr

from imgscale.storage import open_store

FIXTURES = Path(__file__).parents[1] / "fixtures"


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "pq-store-v2"
    shutil.copytree(FIXTURES / "pq-store-v2", path)
    return open_store(path)


def test_codes_and_decoded_rows_read_back_as_written(store):
    codes = store.codes().compute(scheduler="synchronous")
    np.testing.assert_array_equal(codes, np.load(FIXTURES / "pq-store-v2-codes.npy"))
    # Decoded rows are centroids times the rotation: a BLAS of another release may round the
    # float32 product's last bit differently, so they are equal to rounding, the codes exactly.
    features = store.features().compute(scheduler="synchronous")
    expected = np.load(FIXTURES / "pq-store-v2-features.npy")
    np.testing.assert_allclose(features, expected, rtol=0, atol=1e-5)
    test_rows = store.features("test").compute(scheduler="synchronous")
    expected = np.load(FIXTURES / "pq-store-v2-test-features.npy")
    np.testing.assert_allclose(test_rows, expected, rtol=0, atol=1e-5)


def test_decoded_rows_are_the_codebook_centroids_rotated_back(store):
    codebook = zarr.open_array(store.path / "codebook", mode="r")[...]
    rotation = zarr.open_array(store.path / "rotation", mode="r")[...]
    codes = np.load(FIXTURES / "pq-store-v2-codes.npy")
    centroids = np.concatenate([codebook[j, codes[:, j]] for j in range(codebook.shape[0])], 1)
    np.testing.assert_allclose(
        store.features().compute(scheduler="synchronous"), centroids @ rotation.T, atol=1e-5
    )


def test_metadata_and_info_read_back_as_written(store):
    store.verify()
    info = store.info()
    assert (info["rows"], info["dim"], info["encoding"]) == (300, 16, "pq")
    assert (info["pq_m"], info["pq_dsub"], info["pq_rotation"]) == (4, 4, True)
    assert info["splits"] == {"train": 250, "test": 50}
    assert info["source"] == {"note": "issue 29 fixture"}
    assert store.class_names == ["a", "b", "c"]
    assert store.ids()[0] == "first:0" and store.ids()[-1] == "s99"
    assert store.codec.codebook.shape == (4, 256, 4) and store.codec.rotation.shape == (16, 16)
