"""``imgscale compress``: a raw store → a product-quantized store, encoded on the cluster.

1. Train: a uniform sample of rows is gathered chunk by chunk (one task per source chunk takes its
   sampled rows), so only the sample reaches the client; the codec is trained a block of
   sub-spaces a task (``jobs.ingest.train_pq``, the trainer of ``ingest --pq`` too), on the
   cluster's workers when there is one.
2. Encode and write: one task per source chunk reads, encodes and measures its reconstruction
   error on a worker, writes the codes as the same chunk of the PQ store (one writer per chunk)
   and returns only a few sums. The client holds the store's `CopyWriter` (writer lock) meanwhile
   and commits every batch once all chunks are written (same batch ids, ids, labels and splits as
   the source), so a failure commits nothing: a store this command created is removed. The
   client writes no codes and validates no id one by one: its CPU is on the cores the workers
   encode on.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import dask
import numpy as np

from imgscale.jobs.ingest import train_pq
from imgscale.jobs.on_cluster import store_on_cluster
from imgscale.pipeline.compute import (
    cluster_threads,
    compute_as_completed,
    current_executor,
    gather_rows,
)
from imgscale.pipeline.pq import (
    DEFAULT_SAMPLE,
    PQCodec,
    check_m,
    check_training_rows,
    sample_indices,
)
from imgscale.storage import (
    CopyWriter,
    FeatureStore,
    StoreError,
    create_coded_store,
    create_or_open,
    is_url,
    location,
    write_row_chunk,
)


def _train_codec(
    src: FeatureStore, m: int, *, rotate: bool, sample: int, seed: int, niter: int = 25
) -> PQCodec:
    """Codec trained on ``sample`` rows of ``src`` drawn uniformly (all rows if fewer), the
    rows sent once to each worker of the current executor."""
    n = src.committed_rows
    _check_m(src, m)
    index = sample_indices(n, sample, seed)
    rows = gather_rows(src.features(), index)
    check_training_rows(len(rows), stacklevel=3)

    def run(kernel: Callable, items: list[tuple]) -> Iterator[tuple[int, np.ndarray]]:
        return enumerate(current_executor().map(kernel, ([rows],), items))

    return train_pq(
        run, src.dim, m, threads=cluster_threads(), seed=seed, rotate=rotate, niter=niter
    )


def compress_on_cluster(
    src: str,
    dst: str | Path,
    m: int,
    *,
    rotate: bool = False,
    sample: int = DEFAULT_SAMPLE,
    seed: int = 0,
    scheduler: str | None = None,
    quiet: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """`imgscale compress`: open SRC on the cluster, whose workers must see ``dst``'s folder
    too, and `compress` it into the new PQ store ``dst``; returns its summary."""
    from imgscale.jobs.cluster import shared_path

    dst = shared_path(dst)
    with store_on_cluster(src, scheduler, quiet=quiet, shared_paths=[dst.parent]) as source:
        return compress(source, dst, m, rotate=rotate, sample=sample, seed=seed, progress=progress)


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
    codec: PQCodec | None = None,
) -> dict[str, Any]:
    """Write the PQ store ``dst`` from ``src``; returns a summary (relative MSE, sizes, times).

    ``codec``: one already trained (e.g. another store's, so both share a codebook) instead of
    training on ``sample`` rows; its M must be ``m``.
    """
    dst = location(dst)
    n = src.committed_rows
    if n == 0:
        raise StoreError(f"store {src.path}: no committed rows to compress")
    if src.codec is not None:
        raise StoreError(f"store {src.path}: encoding {src.encoding!r}; expected a raw store")
    if dst.exists() and (is_url(dst) or not dst.is_dir() or any(dst.iterdir())):
        raise StoreError(f"store {dst}: path exists and is not empty; refusing to overwrite it")
    _check_m(src, m)
    started = time.perf_counter()
    if codec is None:
        codec = _train_codec(src, m, rotate=rotate, sample=sample, seed=seed, niter=niter)
    elif codec.m != m or codec.dim != src.dim:
        raise StoreError(f"codec for D={codec.dim}, M={codec.m}; expected D={src.dim}, M={m}")
    train_seconds = time.perf_counter() - started

    create = partial(
        create_coded_store,
        codec=codec,
        class_names=src.class_names,
        rows_per_chunk=src.rows_per_chunk,
        provenance={"command": "compress"},
        source={
            "path": str(src.path.resolve()),
            "committed_rows": n,
            "created": src.created,
            "sample_rows": min(sample, n),
            "seed": seed,
            "niter": niter,
        },
    )
    started = time.perf_counter()
    with create_or_open(dst, create, exist_ok=False) as (store, _):
        totals = _write_codes(src, store, codec, n, progress)
    encode_seconds = time.perf_counter() - started

    sse, feature_sum, square_sum = totals
    total_variance = (square_sum - feature_sum @ feature_sum / n) / n
    relative_mse = (sse / n) / total_variance if total_variance > 0 else 0.0
    store.record_pq_statistics(mse=sse / n, relative_mse=relative_mse)
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


def _check_m(src: FeatureStore, m: int) -> None:
    """StoreError naming ``src`` unless ``m`` sub-quantizers divide its dimension."""
    try:
        check_m(src.dim, m)
    except ValueError as e:
        raise StoreError(f"store {src.path}: {e}") from e


def _write_codes(
    src: FeatureStore,
    store: FeatureStore,
    codec: PQCodec,
    n: int,
    progress: Callable[[int, int], None] | None,
) -> tuple[float, np.ndarray, float]:
    """Encode and write every chunk on the cluster, then commit all batches at once."""
    totals = [0.0, np.zeros(src.dim), 0.0]
    done = 0
    with (
        CopyWriter(store, src) as writer,
        _encoded_chunks(src, codec, writer) as results,
    ):
        writer.check_rows()  # reads the source's rows on the client while the workers encode
        for rows, sse, feature_sum, square_sum in results:
            totals[0] += sse
            totals[1] += feature_sum
            totals[2] += square_sum
            done += rows
            if progress is not None:
                progress(done, n)
    return totals[0], totals[1], totals[2]


def encode_and_write_chunk(
    X: np.ndarray, codec: PQCodec, path: Path, chunk_index: int
) -> tuple[int, float, np.ndarray, float]:
    """Encode one source chunk and write its codes as chunk ``chunk_index`` of the PQ store at
    ``path`` (on the worker); returns (rows, Σ‖x − x̂‖², Σx, Σ‖x‖²)."""
    codes, *sums = codec.encode_with_sums(X)
    write_row_chunk(path, chunk_index, codes)
    return (len(codes), *sums)


@contextlib.contextmanager
def _encoded_chunks(
    src: FeatureStore, codec: PQCodec, writer: CopyWriter
) -> Iterator[Iterator[tuple]]:
    """encode_and_write_chunk results of every source chunk as they finish on the cluster
    (`compute_as_completed`: all tasks submitted on entry, so the client's own work inside the
    block, such as its row checks, overlaps them; if the block raises, the tasks not started
    are cancelled and the exit waits until none still writes its chunk file into the store the
    caller is about to remove).

    Source and PQ store have the same rows per chunk, so source chunk i is the writer's chunk
    ``first_chunk + i``.
    """
    shared = dask.delayed(codec, pure=True)
    task = dask.delayed(encode_and_write_chunk, pure=True)
    blocks = src.features().to_delayed().ravel()
    path, first = writer.store.path, writer.first_chunk
    tasks = [task(block, shared, path, first + i) for i, block in enumerate(blocks)]
    # The last chunk, the only one that can be short, runs after the others (they run in no set
    # order), so the workers end within about half a task of each other, not up to a whole one.
    priority = [1] * (len(tasks) - 1) + [0]
    with compute_as_completed(tasks, priority=priority) as results:
        yield results
