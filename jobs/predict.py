"""Write a model's top-k predictions for a store's rows to parquet, a block of rows at a time.

The file is written beside OUT (in the temporary folder when OUT is an object-store URL) and
renamed onto it, or uploaded whole, at the end, so a failed or cancelled run leaves no
half-written OUT (and an earlier OUT stays as it was).

`predict_saved_model` is ``imgscale predict``: a saved model applied to a store on the cluster.
`predict_new_rows` keeps a dataset of predictions current as a store grows (scheduled runs): OUT
is a folder of parts ``rows-{start:012d}-{stop:012d}.parquet``, each holding the predictions of
the store's rows [start, stop); a run predicts the rows past the last part and adds one part,
written whole or not at all, so a killed run is redone by the next.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from sklearn.base import BaseEstimator

from imgscale.jobs.class_names import is_numbered, model_class_names, to_model_labels
from imgscale.jobs.on_cluster import model_on_cluster
from imgscale.pipeline.compute import compute
from imgscale.storage import FeatureStore, StoreError, is_url, location, publish_file

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
    first_row: int = 0,
) -> int:
    """Write ``id, true_label, label, top_k`` per row; return rows.

    Labels are the model's class names (``class_names``, its table; else the store's), as
    integers when the classes are the numbers 0..C-1 of an integer-labelled store. ``true_label``
    is the store's label for the row (null if unlabelled). ``first_row``: only rows from there
    on (of those in ``split``).
    """
    store.require_split(split)
    names = store.class_names if class_names is None else class_names
    k = min(k, len(model.classes_))
    ids, labels = store.ids(split), store.labels(split)
    where = None
    if first_row:
        where = np.arange(len(ids)) >= first_row
        ids, labels = ids[first_row:], labels[first_row:]
    top_k = model.predict_top_k(store.features(split, where=where), k=k)
    true = to_model_labels(labels, store, names, f"split {split!r}" if split else "its rows")
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
    except OSError as exc:  # disk full, quota, permissions: name what was being written
        reason = os.strerror(exc.errno) if exc.errno else str(exc).splitlines()[0]
        raise StoreError(f"predictions {out}: {reason} (writing {partial})") from exc
    finally:
        partial.unlink(missing_ok=True)
    return start


def predict_new_rows(
    model: BaseEstimator,
    store: FeatureStore,
    out: str | os.PathLike,
    *,
    k: int = 5,
    class_names: list[str] | None = None,
    split: str | None = None,
) -> tuple[int, int]:
    """Predict the store's rows (of ``split``, else all) past the last part of the dataset
    folder ``out`` into a new part; returns (first row, rows predicted), counted among the
    split's rows. The rows already predicted must still be the store's (same id at the last
    predicted row), else the dataset belongs to another store or split."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    parts = sorted(folder.glob("rows-*-*.parquet"))
    first = int(parts[-1].stem.split("-")[2]) if parts else 0
    store.require_split(split)
    ids = store.ids(split)
    n = len(ids)
    if first > n:
        raise ValueError(f"{folder}: predicts {first} rows, more than store {store.path} holds")
    if first:
        last_id = pq.read_table(parts[-1], columns=["id"]).column("id")[-1].as_py()
        if ids[first - 1] != last_id:
            raise ValueError(
                f"{folder}: its row {first - 1} is {last_id!r}, store {store.path}'s is "
                f"{ids[first - 1]!r}; a batch was removed from the store since (its "
                "rows moved up) or these predictions are of another store: predict into a new "
                "folder"
            )
    if first == n:
        return first, 0
    part = folder / f"rows-{first:012d}-{n:012d}.parquet"
    rows = predict_to_parquet(
        model, store, part, split=split, k=k, class_names=class_names, first_row=first
    )
    return first, rows


def predict_saved_model(
    model: str,
    store: str,
    out: str,
    *,
    split: str | None = None,
    top_k: int = 5,
    new_rows: bool = False,
    scheduler: str | None = None,
    quiet: bool = False,
    warn: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """The saved MODEL's top-k predictions for STORE's rows (of ``split``, else all) on the
    cluster, written to the parquet file OUT (`predict_to_parquet`), or with ``new_rows`` those
    of the rows past OUT's last part as a new part (`predict_new_rows`). ``warn`` is told of
    batches the model learned from that STORE no longer holds as they were. Returns the rows
    written, the first of them and OUT."""
    on_cluster = model_on_cluster(model, store, scheduler, quiet=quiet, splits=[split], warn=warn)
    with on_cluster as (fitted, provenance, feature_store):
        names = model_class_names(provenance, feature_store)
        if new_rows:
            first, rows = predict_new_rows(
                fitted, feature_store, out, k=top_k, class_names=names, split=split
            )
        else:
            first = 0
            rows = predict_to_parquet(
                fitted, feature_store, out, split=split, k=top_k, class_names=names
            )
    return {"rows": rows, "first_row": first, "out": str(out)}
