"""A store's rows written out for other tools: parquet streamed chunk by chunk, or one .npz.

Parquet holds one row group per store chunk, with columns ``id``, ``label`` (the class name,
null when unlabelled), ``split`` and ``features`` (a fixed-size list of float32), so any size
streams in the memory of one chunk. An .npz is built in memory (numpy writes it whole), so it is
refused past `NPZ_MAX_BYTES` of features; it holds ``X`` (float32), ``y`` (int32, -1 =
unlabelled), ``ids``, ``splits`` and ``class_names``, all plain arrays (no pickle needed to load).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from imgscale.storage.errors import StoreError
from imgscale.storage.layout import tmp_path_for
from imgscale.storage.store import FeatureStore

NPZ_MAX_BYTES = 2 * 2**30
FORMATS = (".parquet", ".npz")


def export_rows(
    store: FeatureStore,
    out: str | os.PathLike,
    *,
    split: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Write the store's committed rows (of ``split``, if given) to ``out`` (.parquet or .npz),
    atomically: a reader or a crash sees no file or the whole file. Returns the rows written."""
    out = Path(out)
    if out.suffix not in FORMATS:
        raise StoreError(f"{out}: expected a .parquet or .npz file to export to")
    store.require_split(split)
    meta = store.rows(split, columns=["id", "label", "split"])
    features = store.features(split)
    names = store.class_names
    tmp = tmp_path_for(out)
    try:
        if out.suffix == ".npz":
            _write_npz(tmp, features, meta, names, store, progress)
        else:
            _write_parquet(tmp, features, meta, names, progress)
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return features.shape[0]


def _blocks(features, progress: Callable[[int, int], None] | None):
    """Each chunk of rows in order, read here (one chunk in memory at a time)."""
    done, n = 0, features.shape[0]
    for i in range(features.numblocks[0]):
        block = np.asarray(features.blocks[i].compute(scheduler="synchronous"), np.float32)
        done += len(block)
        if progress is not None:
            progress(done, n)
        yield block


def _write_parquet(tmp: Path, features, meta: pa.Table, names: list[str], progress) -> None:
    dim = features.shape[1]
    named = _label_names(meta.column("label").to_numpy(), names)
    schema = pa.schema(
        [
            ("id", pa.string()),
            ("label", pa.string()),
            ("split", pa.string()),
            ("features", pa.list_(pa.float32(), dim)),
        ]
    )
    start = 0
    with pq.ParquetWriter(tmp, schema) as writer:
        for block in _blocks(features, progress):
            stop = start + len(block)
            values = pa.array(block.ravel(), pa.float32())
            table = pa.table(
                [
                    meta.column("id").slice(start, len(block)),
                    pa.array(named[start:stop], pa.string()),
                    meta.column("split").slice(start, len(block)).cast(pa.string()),
                    pa.FixedSizeListArray.from_arrays(values, dim),
                ],
                schema=schema,
            )
            writer.write_table(table)
            start = stop


def _label_names(labels: np.ndarray, names: list[str]) -> np.ndarray:
    """Each row's class name (its number where the store names none), None if unlabelled."""
    lookup = np.array(names, dtype=object) if names else None
    out = np.empty(len(labels), dtype=object)
    labelled = labels >= 0
    out[labelled] = lookup[labels[labelled]] if lookup is not None else labels[labelled].astype(str)
    return out


def _write_npz(
    tmp: Path, features, meta: pa.Table, names: list[str], store: FeatureStore, progress
) -> None:
    n, dim = features.shape
    if n * dim * 4 > NPZ_MAX_BYTES:
        raise StoreError(
            f"store {store.path}: {n} rows × {dim} float32 is {n * dim * 4 / 2**30:.1f} GiB, "
            f"more than an .npz export holds ({NPZ_MAX_BYTES / 2**30:g} GiB, built in memory); "
            "export to .parquet, which streams"
        )
    X = np.empty((n, dim), np.float32)
    start = 0
    for block in _blocks(features, progress):
        X[start : start + len(block)] = block
        start += len(block)
    with open(tmp, "wb") as file:
        np.savez(
            file,
            X=X,
            y=meta.column("label").to_numpy().astype(np.int32),
            ids=np.array(meta.column("id").to_pylist(), dtype=str),
            splits=np.array(meta.column("split").cast(pa.string()).to_pylist(), dtype=str),
            class_names=np.array(names, dtype=str),
        )
