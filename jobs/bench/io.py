"""``imgscale bench io``: how fast row chunks leave a store, and whether each pass keeps up.

Part 1 writes one synthetic float32 array in every layout of the matrix (codec × chunk size ×
sharding) and reads it back chunk by chunk through every engine (zarr-python's default codec
pipeline, the zarrs Rust pipeline and tensorstore when installed, and imgscale's direct reader
for uncompressed chunks), warm and, where the page cache can be dropped, cold; ``np.fromfile`` of
the same bytes is the local ceiling. Part 2 builds an imgscale store with the default layout and
times, through a LocalCluster of 1 and 2 workers, a read-only pass and each streaming reduction
(class sums, Gram), reporting each as a fraction of the read-only rate of the same run.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import zarr
from threadpoolctl import threadpool_limits
from zarr.codecs import BloscCodec, Crc32cCodec, ZstdCodec

from jobs.bench.common import mixture_blocks, record
from jobs.cluster import connect
from pipeline._compute import compute
from pipeline.reductions import reduce_rows, row_stats
from storage import create_store
from storage.chunk_io import direct_checksum, read_chunk_file

MIB = 2**20
CODEC_CHAINS = {
    "none": (),
    "none+crc32c": (Crc32cCodec(),),
    "blosc-lz4-shuffle+crc32c": (
        BloscCodec(cname="lz4", clevel=5, shuffle="shuffle"),
        Crc32cCodec(),
    ),
    "zstd-1+crc32c": (ZstdCodec(level=1), Crc32cCodec()),
    "zstd-3+crc32c": (ZstdCodec(level=3), Crc32cCodec()),
}
CHUNK_MIB = (16, 64, 128)
# Sharded layouts: (inner chunk MiB, shard MiB) — many small chunks in one file per task.
SHARDED = ((16, 128), (64, 512))
DEFAULT_PIPELINE = "zarr.core.codec_pipeline.BatchedCodecPipeline"
CLASSES = 1000


def run(size_gib: float = 2.0, dim: int = 512, workdir: str | None = None) -> list[dict]:
    """Measure the whole matrix; return benchmark records (GB/s, rows/s, fractions)."""
    root = Path(workdir or tempfile.mkdtemp(prefix="imgscale-bench-io-"))
    root.mkdir(parents=True, exist_ok=True)
    rows = int(size_gib * 2**30) // (4 * dim)
    X = np.concatenate([block for block, _ in mixture_blocks(rows, dim, CLASSES)])
    records = _ceiling(X, root)
    for layout, (chunk_rows, shard_rows, codecs) in _layouts(dim).items():
        path = root / "matrix.zarr"
        shutil.rmtree(path, ignore_errors=True)
        written = _write(path, X, chunk_rows, shard_rows, codecs)
        size = _bytes_on_disk(path)
        records.append(
            record(
                f"write {layout}",
                X.nbytes / written / 1e9,
                "GB/s",
                layout=layout,
                size_ratio=size / X.nbytes,
            )
        )
        for engine, reader in _engines(path, shard_rows or chunk_rows, X.shape).items():
            for cache in ("warm", "cold"):
                seconds = _timed_read(reader, path, cold=cache == "cold")
                records.append(
                    record(
                        f"read {layout} {engine} {cache}",
                        X.nbytes / seconds / 1e9,
                        "GB/s",
                        layout=layout,
                        engine=engine,
                        cache=cache,
                    )
                )
        shutil.rmtree(path)
    records += _passes(X, root)
    return records


def _layouts(dim: int) -> dict[str, tuple[int, int | None, tuple]]:
    layouts = {}
    for name, codecs in CODEC_CHAINS.items():
        for mib in CHUNK_MIB:
            layouts[f"{name} chunk {mib} MiB"] = (mib * MIB // (4 * dim), None, codecs)
        if name in ("none+crc32c", "zstd-1+crc32c"):
            for inner, shard in SHARDED:
                layouts[f"{name} shard {shard} MiB of {inner} MiB"] = (
                    inner * MIB // (4 * dim),
                    shard * MIB // (4 * dim),
                    codecs,
                )
    return layouts


def _ceiling(X: np.ndarray, root: Path) -> list[dict]:
    """``np.fromfile`` of the same bytes, warm and cold: the local read ceiling."""
    raw = root / "ceiling.bin"
    X.tofile(raw)
    out = []
    for cache in ("warm", "cold"):
        seconds = _timed_read(lambda: np.fromfile(raw, dtype=np.float32), raw, cold=cache == "cold")
        out.append(
            record(
                f"read np.fromfile {cache}",
                X.nbytes / seconds / 1e9,
                "GB/s",
                engine="np.fromfile",
                cache=cache,
            )
        )
    raw.unlink()
    return out


def _write(path: Path, X: np.ndarray, chunk_rows: int, shard_rows: int | None, codecs) -> float:
    array = zarr.create_array(
        store=str(path),
        shape=X.shape,
        dtype="float32",
        chunks=(chunk_rows, X.shape[1]),
        shards=None if shard_rows is None else (shard_rows, X.shape[1]),
        compressors=codecs,
        fill_value=0.0,
    )
    started = time.perf_counter()
    step = shard_rows or chunk_rows
    for start in range(0, len(X), step):
        array[start : start + step] = X[start : start + step]
    return time.perf_counter() - started


def _engines(path: Path, step: int, shape: tuple[int, int]) -> dict[str, Callable[[], None]]:
    """One callable per engine that reads the whole array, one chunk (or shard) per call."""
    starts = range(0, shape[0], step)
    engines = {}

    def with_pipeline(pipeline: str) -> Callable[[], None]:
        def read() -> None:
            with zarr.config.set({"codec_pipeline.path": pipeline}):
                array = zarr.open_array(str(path), mode="r")
                for start in starts:
                    _touch(array[start : start + step])

        return read

    engines["zarr-python"] = with_pipeline(DEFAULT_PIPELINE)
    if find_spec("zarrs"):
        engines["zarrs"] = with_pipeline("zarrs.ZarrsCodecPipeline")
    if find_spec("tensorstore"):

        def read_tensorstore() -> None:
            import tensorstore

            spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}
            array = tensorstore.open(spec, read=True).result()
            for start in starts:
                _touch(array[start : min(start + step, shape[0])].read().result())

        engines["tensorstore"] = read_tensorstore
    array = zarr.open_array(str(path), mode="r")
    checksum = direct_checksum(array)
    if checksum is not None and array.metadata.chunks == (step, shape[1]):

        def read_direct() -> None:
            for index in range(len(starts)):
                chunk_file = path / "c" / str(index) / "0"
                _touch(read_chunk_file(chunk_file, (step, shape[1]), "f4", checksum))

        engines["imgscale direct"] = read_direct
    return engines


def _touch(chunk: np.ndarray) -> float:
    """Sum one column: reads every page of a row-major chunk, so a lazily mapped one counts too."""
    return float(chunk[:, 0].sum())


def _timed_read(read: Callable[[], object], path: Path, *, cold: bool) -> float:
    """Seconds for one read: warm = best of two after a warm-up, cold = after dropping the cache."""
    if cold:
        _drop_page_cache(path)
        started = time.perf_counter()
        read()
        return time.perf_counter() - started
    read()
    best = float("inf")
    for _ in range(2):
        started = time.perf_counter()
        read()
        best = min(best, time.perf_counter() - started)
    return best


def _drop_page_cache(path: Path) -> None:
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    for file in files:
        fd = os.open(file, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _bytes_on_disk(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _rows_read(block: np.ndarray, row_start: int = 0) -> int:
    return len(block)


def _passes(X: np.ndarray, root: Path) -> list[dict]:
    """Each streaming pass over a default-layout store, as a fraction of the read-only pass."""
    path = root / "store.zarr"
    shutil.rmtree(path, ignore_errors=True)
    store = create_store(path, X.shape[1])
    labels = np.concatenate([y for _, y in mixture_blocks(len(X), X.shape[1], CLASSES)])
    with store.writer("bench") as writer:
        for start in range(0, len(X), store.rows_per_chunk):
            stop = start + store.rows_per_chunk
            writer.write(X[start:stop], labels[start:stop])
    features = store.features()
    passes = {
        "read only": lambda: compute(reduce_rows(_rows_read, [features])),
        "class sums (row_stats, gram=False)": lambda: row_stats(
            features, labels, CLASSES, gram=False
        ),
        "Gram + class sums (row_stats, gram=True)": lambda: row_stats(
            features, labels, CLASSES, gram=True
        ),
    }
    out, read_rate = [], {}
    for workers in (1, 2):
        with connect(quiet=True, n_workers=workers) as client:
            for name, run_pass in passes.items():
                run_pass()  # warm the page cache and the workers
                # Until the scheduler has released the warm-up's results, an identical graph
                # would be answered from worker memory instead of being recomputed.
                while any(client.has_what().values()):
                    time.sleep(0.05)
                started = time.perf_counter()
                run_pass()
                rate = len(X) / (time.perf_counter() - started)
                read_rate.setdefault(workers, rate)
                out.append(
                    record(
                        f"pass {name}, {workers} worker(s)",
                        rate,
                        "rows/s",
                        read_rate[workers],
                        workers=workers,
                        gb_per_s=rate * X.shape[1] * 4 / 1e9,
                    )
                )
    out.append(record("read-only pass speed-up 1 → 2 workers", read_rate[2] / read_rate[1], "x"))
    out.append(record("float64 Gram ceiling, 2 cores", 2 * _syrk_rows_per_second(X), "rows/s"))
    shutil.rmtree(path)
    return out


def _syrk_rows_per_second(X: np.ndarray) -> float:
    """Rows/s of one core's float64 XᵀX: the compute ceiling of the Gram pass."""
    block = X[:32_768].astype(np.float64)
    with threadpool_limits(1):
        block.T @ block
        started = time.perf_counter()
        block.T @ block
        return len(block) / (time.perf_counter() - started)
