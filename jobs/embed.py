"""Incremental batch embedding: embed the rows of a source store that a destination store lacks.

Paper 001 §3 "Incremental Learning": unlabelled images arrive in batches (1,000 images) and are
embedded by interpolating the fitted eigenfunctions, never by refitting. Here a batch is a range
of source rows [start, stop), appended to the destination store as one committed batch with id
``rows-{start}-{stop}`` and the source rows' ids, labels and splits. The destination's committed
row count is the watermark: source rows below it are embedded, the rest are not.

Why this is exactly-once: the store commits a batch atomically (a killed writer leaves the store
unchanged), appending a committed batch id is a no-op, and each batch is written only if, under
the store's writer lock, the destination still holds exactly ``start`` rows. A run killed at any
instant therefore leaves a prefix of whole batches, and the next run continues from it with the
same batch boundaries an uninterrupted run would have used.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.pipeline import Pipeline

from imgscale.jobs.models import model_steps
from imgscale.pipeline.compute import compute
from imgscale.storage import FeatureStore, StoreError, create_or_open, create_store

# Target bytes of the destination's chunks: a commit rewrites the tail chunk, so chunks of an
# incrementally written store are kept smaller than the 64 MiB read-optimised default.
DST_CHUNK_BYTES = 16 * 2**20


def batch_id(start: int, stop: int) -> str:
    return f"rows-{start}-{stop}"


def embedding_steps(model: BaseEstimator) -> BaseEstimator:
    """The part of a saved model that embeds: the model itself, or a pipeline without its
    classifier."""
    if not isinstance(model, Pipeline):
        if not hasattr(model, "transform"):
            raise ValueError(f"{type(model).__name__} is not an embedding (it has no transform)")
        return model
    *embeddings, last = model_steps(model)
    if hasattr(last, "predict") or not hasattr(last, "transform"):
        if not embeddings:
            raise ValueError("the model pipeline has no embedding step")
        return model[:-1]
    return model


def output_dim(embedding: BaseEstimator) -> int:
    return int(model_steps(embedding)[-1].n_components_)


def _destination(
    dst: str | os.PathLike, src: FeatureStore, dim: int, batch_rows: int, provenance: dict
):
    """`create_or_open` of DST: an empty store of ``dim`` columns holding SRC's class names,
    chunked in whole batches of about DST_CHUNK_BYTES (bounds each commit's tail rewrite)."""
    per_chunk = max(1, DST_CHUNK_BYTES // (4 * dim * batch_rows)) * batch_rows
    create = partial(
        create_store,
        dim=dim,
        class_names=src.class_names or None,
        rows_per_chunk=per_chunk,
        provenance=provenance,
    )
    return create_or_open(dst, create)


def embed_new_rows(
    model: BaseEstimator,
    src: FeatureStore,
    dst: str | os.PathLike,
    *,
    batch_rows: int = 1000,
    slab_batches: int | None = None,
    max_rows: int | None = None,
    provenance: dict | None = None,
    on_commit: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Embed SRC rows [watermark, committed_rows) into DST in batches of ``batch_rows``.

    Rows are embedded ``slab_batches`` batches at a time (default: about two source chunks, so
    the cluster has whole chunks to work on) and committed one batch at a time.
    ``max_rows`` bounds the rows embedded by this run (a multiple of ``batch_rows`` keeps the
    batch boundaries of an unbounded run). ``on_commit(start, stop)`` is called after each
    commit. Returns a summary.
    """
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be positive, got {batch_rows}")
    started = time.perf_counter()
    embedding = embedding_steps(model)
    dim = output_dim(embedding)
    n = src.committed_rows
    meta = src.rows()
    provenance = {"source": str(src.path.resolve()), **(provenance or {})}
    with _destination(dst, src, dim, batch_rows, provenance) as (store, _):
        if store.dim != dim:
            raise StoreError(f"store {dst}: dim {store.dim}, but the model embeds to {dim}")
        first = watermark = store.committed_rows
        _check_prefix(store, meta, watermark)
        if max_rows is not None:
            n = min(n, watermark + int(max_rows))
        if slab_batches is None:
            slab_batches = max(1, round(2 * src.rows_per_chunk / batch_rows))
        ids = meta.column("id").to_numpy(zero_copy_only=False)
        labels = meta.column("label").to_numpy()
        splits = meta.column("split").to_numpy(zero_copy_only=False)
        features = src.features()
        batches = skipped = 0
        stopped_by = None
        while watermark < n and stopped_by is None:
            slab_stop = min(n, watermark + slab_batches * batch_rows)
            embedded = compute(embedding.transform(features[watermark:slab_stop]))[0]
            for start in range(watermark, slab_stop, batch_rows):
                stop = min(start + batch_rows, slab_stop)
                rows = slice(start - watermark, stop - watermark)
                with store.writer(batch_id(start, stop)) as writer:
                    if writer.already_committed:
                        skipped += 1
                        continue
                    if writer.start != start:
                        # Another writer moved DST on; it owns the rest of this run's work.
                        stopped_by = writer.start
                        break
                    writer.write(
                        embedded[rows], labels[start:stop], ids[start:stop], splits[start:stop]
                    )
                batches += 1
                if on_commit is not None:
                    on_commit(start, stop)
            watermark = slab_stop
    final = store.committed_rows
    seconds = time.perf_counter() - started
    return {
        "source_rows": int(n),
        "watermark_before": int(first),
        "watermark_after": int(final),
        "rows_embedded": int(final - first),
        "batches_committed": int(batches),
        "batches_already_committed": int(skipped),
        "stopped_by_other_writer": stopped_by is not None,
        "seconds": seconds,
        "rows_per_second": (final - first) / seconds if seconds > 0 else 0.0,
    }


def _check_prefix(store: FeatureStore, meta, watermark: int) -> None:
    """DST must hold SRC's first `watermark` rows (same ids, in order): the same pair of stores."""
    if watermark > meta.num_rows:
        raise StoreError(
            f"store {store.path}: holds {watermark} rows, more than the source's {meta.num_rows}"
        )
    if watermark == 0:
        return
    held = store.ids()
    expected = meta.column("id").to_numpy(zero_copy_only=False)[:watermark]
    if not np.array_equal(held, expected):
        bad = int(np.flatnonzero(held != expected)[0])
        raise StoreError(
            f"store {store.path}: row {bad} has id {held[bad]!r}, the source's has "
            f"{expected[bad]!r}; it was not embedded from this source"
        )
