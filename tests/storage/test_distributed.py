"""features() runs on a cluster whose workers are other processes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from distributed import Client, LocalCluster

from imgscale.storage import StoreError, create_store
from tests.storage.conftest import random_rows


@pytest.mark.slow
def test_features_compute_on_worker_processes_and_report_damage(tmp_path: Path) -> None:
    store = create_store(tmp_path / "s.zarr", 4, rows_per_chunk=16)
    X = random_rows(100, 0, dim=4)
    store.append("b", X, split=np.where(np.arange(100) % 2, "train", "test"))
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as c,
        Client(c) as client,
    ):
        np.testing.assert_allclose(
            client.compute(store.features().sum(axis=0)).result(), X.sum(axis=0), rtol=1e-5
        )
        np.testing.assert_array_equal(client.compute(store.features("test")).result(), X[::2])
        (store.path / "features" / "c" / "3" / "0").unlink()
        with pytest.raises(StoreError, match="rows 48–63"):
            client.compute(store.features()).result()
