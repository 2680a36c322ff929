"""Shared helpers: small generated stores and a snapshot of everything a reader can observe."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from imgscale.storage import FeatureStore, create_store

DIM = 6
ROWS_PER_CHUNK = 10


def random_rows(n: int, seed: int, dim: int = DIM) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)


def snapshot(store: FeatureStore) -> dict:
    """What a reader sees, plus the raw commit record, for before/after comparisons."""
    fresh = FeatureStore(store.path)
    return {
        "committed_rows": fresh.committed_rows,
        "record": json.loads((Path(store.path) / "zarr.json").read_text()),
        "rows": fresh.rows().to_pylist(),
        "features": fresh.features().compute().tobytes(),
        "classes": fresh.class_names,
    }


@pytest.fixture
def store(tmp_path: Path) -> FeatureStore:
    """A store with 25 committed rows (a partly filled tail chunk) and two classes."""
    s = create_store(
        tmp_path / "s.zarr", DIM, class_names=["cat", "dog"], rows_per_chunk=ROWS_PER_CHUNK
    )
    s.append("b0", random_rows(25, 0), labels=np.arange(25) % 3 - 1)
    return s
