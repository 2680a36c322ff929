"""The overhead benchmark's numpy peer sums each class's rows of a real store, as a dense
reference does."""

import subprocess
import sys

import numpy as np

from imgscale.bench.class_sums_peer import class_sums
from imgscale.bench.common import mixture_store
from imgscale.storage.layout import FEATURES


def test_the_peer_sums_each_labelled_class_from_the_chunk_files(tmp_path):
    store = mixture_store(tmp_path / "mixture.zarr", 40_000, 512, 5)
    assert store.committed_rows > store.rows_per_chunk  # rows in more than one chunk file
    X = store.features().compute()
    labels = store.labels().astype(np.int64)
    labels[::7] = -1  # unlabelled rows are no class's
    expected = np.zeros((5, 512))
    np.add.at(expected, labels[labels >= 0], X[labels >= 0].astype(np.float64))

    found = class_sums(tmp_path / "mixture.zarr" / FEATURES, labels, store.rows_per_chunk, 512, 5)
    np.testing.assert_allclose(found, expected, rtol=1e-5, atol=1e-4)

    np.save(tmp_path / "labels.npy", labels)
    printed = subprocess.run(
        [sys.executable, "-m", "imgscale.bench.class_sums_peer", str(tmp_path / "mixture.zarr" /
         FEATURES), str(tmp_path / "labels.npy"), str(store.rows_per_chunk), "512", "5"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert float(printed) == np.float64(found.sum())
