"""``imgscale compress``: a raw store → a product-quantized store, encoded on the cluster.

1. Train: a uniform sample of rows is gathered chunk by chunk (one task per source chunk takes its
   sampled rows), so only the sample reaches the client; faiss trains the codec there.
2. Encode: one task per source chunk reads, encodes and measures its reconstruction error on a
   worker and returns only uint8 codes (M bytes a row) and a few sums.
3. Write: the client is the single writer. It appends the codes in source order through the
   store's BatchWriter, one batch per source batch (same batch ids, ids, labels and splits), so
   each batch commits last and a failure leaves nothing: a store this command created is removed.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dask
import numpy as np

from pipeline._compute import compute, gather_rows
from storage import FeatureStore, StoreError
from storage.layout import read_record, write_record
from storage.lock import StoreLock
from storage.pq import DEFAULT_SAMPLE, PQCodec, check_m, create_pq_store, sample_indices

# Encode tasks in flight when no distributed client is available (plain dask.compute windows).
_WINDOW = 8


def encode_chunk(X: np.ndarray, codec: PQCodec) -> tuple[np.ndarray, float, np.ndarray, float]:
    """(codes, Σ‖x − x̂‖², Σx, Σ‖x‖²) of one chunk; the sums give MSE relative to variance."""
    codes = codec.encode(X)
    error = codec.decode(codes)
    np.subtract(X, error, out=error)
    # Row norms in float32 (D terms each), summed over rows in float64: no float64 copy of X.
    return (
        codes,
        float(np.einsum("nd,nd->n", error, error).sum(dtype=np.float64)),
        X.sum(axis=0, dtype=np.float64),
        float(np.einsum("nd,nd->n", X, X).sum(dtype=np.float64)),
    )


def train_codec(
    src: FeatureStore, m: int, *, rotate: bool, sample: int, seed: int, niter: int = 25
) -> PQCodec:
    """Codec trained on ``sample`` rows of ``src`` drawn uniformly (all rows if fewer)."""
    n = src.committed_rows
    check_m(src.dim, m)
    index = sample_indices(n, sample, seed)
    rows = gather_rows(src.features(), index)
    return PQCodec.train(rows, m, rotate=rotate, seed=seed, niter=niter)


def compress(
    src: FeatureStore,
    dst: str | Path,
    m: int,
    *,
    rotate: bool = False,
    sample: int = DEFAULT_SAMPLE,
    seed: int = 0,
    niter: int = 25,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Write the PQ store ``dst`` from ``src``; returns a summary (relative MSE, sizes, times)."""
    dst = Path(dst)
    n = src.committed_rows
    if n == 0:
        raise StoreError(f"store {src.path}: no committed rows to compress")
    if src.encoding != "raw":
        raise StoreError(f"store {src.path}: encoding {src.encoding!r}; expected a raw store")
    if dst.exists() and (not dst.is_dir() or any(dst.iterdir())):
        raise StoreError(f"store {dst}: path exists and is not empty; refusing to overwrite it")
    check_m(src.dim, m)
    started = time.perf_counter()
    codec = train_codec(src, m, rotate=rotate, sample=sample, seed=seed, niter=niter)
    train_seconds = time.perf_counter() - started

    src_record = read_record(src.path)
    pre_existing_dir = dst.is_dir()
    started = time.perf_counter()
    try:
        store = create_pq_store(
            dst,
            codec,
            class_names=src.class_names,
            rows_per_chunk=src.rows_per_chunk,
            provenance={"command": "compress"},
            source={
                "path": str(src.path.resolve()),
                "committed_rows": n,
                "created": src_record["created"],
                "sample_rows": min(sample, n),
                "seed": seed,
                "niter": niter,
            },
        )
        totals = _write_codes(src, store, codec, src_record, progress)
    except BaseException:
        shutil.rmtree(dst, ignore_errors=True)
        if pre_existing_dir:
            dst.mkdir()
        raise
    encode_seconds = time.perf_counter() - started

    sse, feature_sum, square_sum = totals
    total_variance = (square_sum - feature_sum @ feature_sum / n) / n
    relative_mse = (sse / n) / total_variance if total_variance > 0 else 0.0
    with StoreLock(store.path):
        record = read_record(store.path)
        record["pq"]["mse"] = sse / n
        record["pq"]["relative_mse"] = relative_mse
        write_record(store.path, record)
    info = store.info()
    return {
        "rows": n,
        "dim": src.dim,
        "pq_m": m,
        "rotation": rotate,
        "mse": sse / n,
        "total_variance": total_variance,
        "relative_mse": relative_mse,
        "train_seconds": train_seconds,
        "encode_seconds": encode_seconds,
        "encode_rows_per_second": n / encode_seconds,
        "bytes_on_disk": info["bytes_on_disk"],
        "source_bytes_on_disk": src.info()["bytes_on_disk"],
        "compression_ratio": info["compression_ratio"],
    }


def _write_codes(
    src: FeatureStore,
    store: FeatureStore,
    codec: PQCodec,
    src_record: dict[str, Any],
    progress: Callable[[int, int], None] | None,
) -> tuple[float, np.ndarray, float]:
    n = src_record["committed_rows"]
    results = _encoded_chunks(src, codec)
    totals = [0.0, np.zeros(src.dim), 0.0]
    rows = src.rows()
    pending: list[np.ndarray] = []
    pending_rows = 0
    done = 0
    for batch in src_record["batches"]:
        start, stop = batch["start"], batch["stop"]
        meta = rows.slice(start, stop - start)
        labels = meta.column("label").to_numpy()
        ids = meta.column("id").to_numpy(zero_copy_only=False)
        splits = meta.column("split").to_numpy(zero_copy_only=False)
        with store.writer(batch["batch_id"]) as writer:
            at = start
            while at < stop:
                if not pending_rows:
                    codes, sse, feature_sum, square_sum = next(results)
                    totals[0] += sse
                    totals[1] += feature_sum
                    totals[2] += square_sum
                    pending, pending_rows = [codes], len(codes)
                block = pending[0][: stop - at]
                pending[0] = pending[0][len(block) :]
                pending_rows -= len(block)
                local = slice(at - start, at - start + len(block))
                writer.write(block, labels[local], ids[local], splits[local])
                at += len(block)
                done += len(block)
                if progress is not None:
                    progress(done, n)
    return totals[0], totals[1], totals[2]


def _encoded_chunks(src: FeatureStore, codec: PQCodec) -> Iterator[tuple]:
    """encode_chunk results of every source chunk, in row order, computed on the cluster."""
    shared = dask.delayed(codec, pure=True)
    task = dask.delayed(encode_chunk, pure=True)
    blocks = src.features().to_delayed().ravel()
    tasks = [task(block, shared) for block in blocks]
    try:
        from distributed import get_client

        client = get_client()
    except (ImportError, ValueError):
        client = None
    if client is not None:
        # All submitted at once (results are small codes); consumed in order by the writer.
        futures = client.compute(tasks)
        for future in futures:
            yield future.result()
            future.release()
        return
    for start in range(0, len(tasks), _WINDOW):
        yield from compute(*tasks[start : start + _WINDOW])
