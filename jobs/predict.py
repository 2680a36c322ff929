"""Write a model's top-k predictions for a store's rows to parquet, a block of rows at a time."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from sklearn.base import BaseEstimator

from imgscale.pipeline._compute import compute
from imgscale.storage import FeatureStore

# Blocks computed together per round trip: enough to keep every worker busy.
BLOCKS_PER_ROUND = 8


def predict_to_parquet(
    model: BaseEstimator,
    store: FeatureStore,
    out: str | os.PathLike,
    *,
    split: str | None = None,
    k: int = 5,
) -> int:
    """Write ``id, label, top_k`` per row (class names where the store has them); return rows."""
    k = min(k, len(model.classes_))
    top_k = model.predict_top_k(store.features(split), k=k)
    ids = store.ids(split)
    names = _label_names(store, model.classes_)
    schema = pa.schema(
        [("id", pa.string()), ("label", pa.string()), ("top_k", pa.list_(pa.string(), k))]
    )
    blocks = top_k.to_delayed().ravel()
    start = 0
    with pq.ParquetWriter(out, schema) as writer:
        for first in range(0, len(blocks), BLOCKS_PER_ROUND):
            for block in compute(*blocks[first : first + BLOCKS_PER_ROUND]):
                stop = start + len(block)
                top_names = names[np.searchsorted(model.classes_, block)]
                writer.write_table(
                    pa.table(
                        {
                            "id": pa.array(ids[start:stop], pa.string()),
                            "label": pa.array(top_names[:, 0], pa.string()),
                            "top_k": pa.FixedSizeListArray.from_arrays(
                                pa.array(top_names.ravel(), pa.string()), k
                            ),
                        },
                        schema=schema,
                    )
                )
                start = stop
    return start


def _label_names(store: FeatureStore, classes: np.ndarray) -> np.ndarray:
    names = store.class_names
    return np.array([names[c] if c < len(names) else str(c) for c in classes], dtype=object)
