"""Write a model's top-k predictions for a store's rows to parquet, a block of rows at a time.

The file is written beside OUT (in the temporary folder when OUT is an object-store URL) and
renamed onto it, or uploaded whole, at the end, so a failed or cancelled run leaves no
half-written OUT (and an earlier OUT stays as it was).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from sklearn.base import BaseEstimator

from imgscale.jobs.class_names import is_numbered, to_model_labels
from imgscale.pipeline.compute import compute
from imgscale.storage import FeatureStore, is_url, location, publish_file

# Blocks computed together per round trip: enough to keep every worker busy.
BLOCKS_PER_ROUND = 8


def predict_to_parquet(
    model: BaseEstimator,
    store: FeatureStore,
    out: str | os.PathLike,
    *,
    split: str | None = None,
    k: int = 5,
    class_names: list[str] | None = None,
) -> int:
    """Write ``id, true_label, label, top_k`` per row; return rows.

    Labels are the model's class names (``class_names``, its table; else the store's), as
    integers when the classes are the numbers 0..C-1 of an integer-labelled store. ``true_label``
    is the store's label for the row (null if unlabelled).
    """
    store.require_split(split)
    names = store.class_names if class_names is None else class_names
    k = min(k, len(model.classes_))
    top_k = model.predict_top_k(store.features(split), k=k)
    ids = store.ids(split)
    true = to_model_labels(store.labels(split), store, names, f"split {split!r}")
    numbered = is_numbered(names)
    label_type = pa.int32() if numbered else pa.string()
    table = np.arange(len(names), dtype=np.int32) if numbered else np.array(names, dtype=object)
    schema = pa.schema(
        [
            ("id", pa.string()),
            ("true_label", label_type),
            ("label", label_type),
            ("top_k", pa.list_(label_type, k)),
        ]
    )
    blocks = top_k.to_delayed().ravel()
    start = 0
    folder = Path(tempfile.gettempdir()) if is_url(out) else Path(out).parent
    partial = folder / f".{location(out).name}.{os.getpid()}.partial"
    try:
        with pq.ParquetWriter(partial, schema) as writer:
            for first in range(0, len(blocks), BLOCKS_PER_ROUND):
                for block in compute(*blocks[first : first + BLOCKS_PER_ROUND]):
                    stop = start + len(block)
                    top = table[block]
                    rows_true = true[start:stop]
                    writer.write_table(
                        pa.table(
                            {
                                "id": pa.array(ids[start:stop], pa.string()),
                                "true_label": pa.array(
                                    table[rows_true], label_type, mask=rows_true < 0
                                ),
                                "label": pa.array(top[:, 0], label_type),
                                "top_k": pa.FixedSizeListArray.from_arrays(
                                    pa.array(top.ravel(), label_type), k
                                ),
                            },
                            schema=schema,
                        )
                    )
                    start = stop
        publish_file(partial, out)
    finally:
        partial.unlink(missing_ok=True)
    return start
