"""Embed a store into another: the source batches a destination store lacks, by batch id and digest.

Paper 001 §3 "Incremental Learning": unlabelled images arrive in batches (1,000 images) and are
embedded by interpolating the fitted eigenfunctions, never by refitting. Here the destination
(DST) records which batches of the source (SRC) it holds, by batch id and content digest
(`FeatureStore.batches`): each DST batch holds source rows [a, b) of one SRC batch, with id
``{batch}@{digest}/{a}-{b}``, and the source rows' ids, labels and splits. A run

1. removes from DST the rows of SRC batches that SRC no longer holds as they were (removed, or
   committed again with other rows under the same id): their embeddings are stale;
2. embeds, in SRC's row order, the rows of each SRC batch that DST does not hold yet, as DST
   batches of ``batch_rows`` rows.

Why this is exactly-once: the store commits a batch atomically (a killed writer leaves the store
unchanged), a DST batch's id names the source rows it holds, and appending a committed batch id
is a no-op. A run killed at any instant therefore leaves whole DST batches, and the next run
continues each SRC batch after the rows DST holds of it. Resuming by batch, not by a row count,
keeps DST right when a batch anywhere in SRC is removed or replaced.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.pipeline import Pipeline

from imgscale.jobs.models import model_steps
from imgscale.jobs.on_cluster import model_on_cluster
from imgscale.pipeline.compute import compute
from imgscale.storage import FeatureStore, StoreError, create_or_open, create_store

# Target bytes of the destination's chunks: a commit rewrites the tail chunk, so chunks of an
# incrementally written store are kept smaller than the 64 MiB read-optimised default.
DST_CHUNK_BYTES = 16 * 2**20


# A DST batch id: the SRC batch, its digest, and the rows [a, b) of it the DST batch holds.
PIECE = re.compile(r"^(?P<batch>.+)@(?P<digest>[0-9a-f]{8})/(?P<start>\d+)-(?P<stop>\d+)$")


def batch_id(source: dict[str, Any], start: int, stop: int) -> str:
    """The DST batch id of rows [start, stop) of SRC batch ``source`` (`FeatureStore.batches`)."""
    return f"{source['batch_id']}@{source['digest']}/{start}-{stop}"


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
    """Bring DST up to date with SRC: drop its stale batches, embed SRC rows it lacks.

    Rows are embedded ``slab_batches`` DST batches at a time (default: about two source chunks,
    so the cluster has whole chunks to work on) and committed one DST batch at a time.
    ``max_rows`` bounds the rows embedded by this run (a multiple of ``batch_rows`` keeps the
    batch boundaries of an unbounded run). ``on_commit(start, stop)`` is called after each
    commit with the source rows (in SRC's row order) the batch held. Returns a summary.
    """
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be positive, got {batch_rows}")
    started = time.perf_counter()
    embedding = embedding_steps(model)
    dim = output_dim(embedding)
    sources = src.batches()
    source_path = str(src.path.resolve())
    provenance = {"source": source_path, "source_created": src.created, **(provenance or {})}
    with _destination(dst, src, dim, batch_rows, provenance) as (store, _):
        if store.dim != dim:
            raise StoreError(f"store {dst}: dim {store.dim}, but the model embeds to {dim}")
        _check_source(store, src, source_path)
        rows_before = store.committed_rows
        held, stale = _held_rows(store, sources)
        if stale:
            store.remove_batches(stale)
        stale_batches = sorted({PIECE.match(piece)["batch"] for piece in stale})
        rows_after_removal = store.committed_rows
        if slab_batches is None:
            slab_batches = max(1, round(2 * src.rows_per_chunk / batch_rows))
        budget = np.inf if max_rows is None else int(max_rows)
        meta = src.rows()
        ids = meta.column("id").to_numpy(zero_copy_only=False)
        labels = meta.column("label").to_numpy()
        splits = meta.column("split").to_numpy(zero_copy_only=False)
        features = src.features()
        batches = skipped = 0
        first = 0  # the source batch's first row among SRC's rows
        for source in sources:
            done = held.get((source["batch_id"], source["digest"]), 0)
            stop = min(source["rows"], done + budget)
            budget -= stop - done
            while done < stop:
                slab_stop = min(stop, done + slab_batches * batch_rows)
                rows = slice(first + done, first + slab_stop)
                embedded = compute(embedding.transform(features[rows]))[0]
                for start in range(done, slab_stop, batch_rows):
                    end = min(start + batch_rows, slab_stop)
                    part = slice(first + start, first + end)
                    with store.writer(batch_id(source, start, end)) as writer:
                        if writer.already_committed:
                            skipped += 1
                            continue
                        writer.write(
                            embedded[start - done : end - done], labels[part], ids[part],
                            splits[part],
                        )  # fmt: skip
                    batches += 1
                    if on_commit is not None:
                        on_commit(part.start, part.stop)
                done = slab_stop
            first += source["rows"]
    rows_after = store.committed_rows
    embedded_rows = rows_after - rows_after_removal
    seconds = time.perf_counter() - started
    return {
        "source_rows": int(first),
        "rows_before": int(rows_before),
        "rows_after": int(rows_after),
        "rows_embedded": int(embedded_rows),
        "stale_batches_removed": stale_batches,
        "stale_rows_removed": int(rows_before - rows_after_removal),
        "batches_committed": int(batches),
        "batches_already_committed": int(skipped),
        "seconds": seconds,
        "rows_per_second": embedded_rows / seconds if seconds > 0 else 0.0,
    }


def embed_store(
    model: str,
    src: str,
    dst: str | os.PathLike,
    *,
    batch_rows: int = 1000,
    max_rows: int | None = None,
    scheduler: str | None = None,
    quiet: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """``imgscale embed``: `embed_new_rows` of store SRC into DST with the saved MODEL's
    embedding, on the cluster; DST records the model it was embedded with. ``progress(done,
    total)`` is called after each commit: SRC's rows up to the last one committed, of all."""
    from imgscale.jobs.cluster import shared_path

    with model_on_cluster(model, src, scheduler, quiet=quiet) as (fitted, _, source):

        def on_commit(start: int, stop: int) -> None:
            if progress is not None:
                progress(stop, source.committed_rows)

        return embed_new_rows(
            fitted,
            source,
            dst,
            batch_rows=batch_rows,
            max_rows=max_rows,
            provenance={"model": str(shared_path(model))},
            on_commit=on_commit,
        )


def _check_source(store: FeatureStore, src: FeatureStore, source_path: str) -> None:
    """DST must have been embedded from SRC (the same store at the same place) by batch: a DST
    of another source would have every batch taken as stale and removed."""
    created = store.created
    if created.get("source") != source_path or created.get("source_created", src.created) != (
        src.created
    ):
        raise StoreError(
            f"store {store.path}: embedded from store {created.get('source')} (created "
            f"{created.get('source_created', {}).get('time', 'at an unknown time')}), not from "
            f"{source_path} (created {src.created.get('time')}); it was not embedded from this "
            "source"
        )
    by_position = [b["batch_id"] for b in store.batches() if not PIECE.match(b["batch_id"])]
    if by_position:
        raise StoreError(
            f"store {store.path}: batches {by_position[:3]} were embedded by row position (an "
            "earlier imgscale), which cannot tell which source batches they hold; remove "
            f"{store.path} and run embed again"
        )


def _held_rows(
    store: FeatureStore, sources: list[dict[str, Any]]
) -> tuple[dict[tuple[str, str], int], list[str]]:
    """Rows DST holds of each SRC batch, by (batch id, digest), and the DST batches of SRC
    batches SRC no longer holds as they were (stale)."""
    live = {(s["batch_id"], s["digest"]) for s in sources}
    held: dict[tuple[str, str], int] = {}
    stale = []
    for batch in store.batches():
        piece = PIECE.match(batch["batch_id"])
        key = (piece["batch"], piece["digest"])
        if key not in live:
            stale.append(batch["batch_id"])
        elif int(piece["start"]) != held.get(key, 0):
            raise StoreError(
                f"store {store.path}: batch {batch['batch_id']!r} starts at row "
                f"{piece['start']} of source batch {key[0]!r}, where {held.get(key, 0)} rows of "
                "it are held; expected each source batch's rows in order"
            )
        else:
            held[key] = int(piece["stop"])
    return held, stale
