"""A store whose record and row array disagree on the row width is refused when opened."""

from __future__ import annotations

import json

import numpy as np
import pytest

from imgscale.storage import StoreError, create_store, open_store


def test_a_record_edited_to_another_width_is_refused_by_name(tmp_path):
    store = create_store(tmp_path / "s.zarr", 8, rows_per_chunk=64)
    rng = np.random.default_rng(0)
    store.append("a", rng.standard_normal((100, 8)).astype(np.float32), np.arange(100) % 3)
    record = tmp_path / "s.zarr" / "zarr.json"
    meta = json.loads(record.read_text())
    assert meta["attributes"]["imgscale"]["dim"] == 8
    meta["attributes"]["imgscale"]["dim"] = 6
    record.write_text(json.dumps(meta))
    with pytest.raises(StoreError, match=r"record says rows are 6 values wide but its row array "
                       r"has 8 columns"):  # fmt: skip
        open_store(tmp_path / "s.zarr")
