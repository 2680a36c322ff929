"""``imgscale bench io``: how fast row chunks leave a store, and whether each pass keeps up.

Part 1 (the matrix) writes one synthetic float32 array in every layout (codec × chunk size ×
sharding) and reads it back chunk by chunk through every engine (zarr-python's default codec
pipeline, the zarrs Rust pipeline and tensorstore when installed, and imgscale's direct reader
for uncompressed chunks), warm and, where the page cache can be dropped, cold; ``np.fromfile`` of
the same bytes is the local ceiling. Part 2 builds an imgscale store with the default layout and
times, through a LocalCluster of 1 and 2 workers, a read-only pass and each streaming reduction
(class sums, Gram, histograms), each as a fraction of the read-only rate of the same run; the
read-only work done by plain processes without Dask is the ceiling of the 1 → 2 worker speed-up.
Part 3 does the same for a uint8 PQ-code store (M codes a row) of the same rows at a few chunk
sizes: codec and chunk size matrix for the codes, their read rate through the store, and the
class-sums-from-codes pass against the codes' read-only pass.

Every measurement is repeated as many times as the scale's repetitions (the passes of one
worker count in turn, round after round, as are the 1- and 2-process plain reads), and each
figure is the median of its repetitions, each ratio the median of the rounds' ratios. Other
processes on the machine compete for the same cores, so every pass record carries the
cores' worth of CPU used while it was timed by the client (and a LocalCluster's scheduler), by
the workers and by every other process (``client_cores``, ``child_cores``, ``other_cores``).
"""

from __future__ import annotations

import multiprocessing
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import psutil
import zarr
from threadpoolctl import threadpool_limits
from zarr.codecs import BloscCodec, Crc32cCodec, ZstdCodec

from imgscale.bench.common import interleaved, mixture_blocks, record, repetitions
from imgscale.bench.machine import drop_page_cache
from imgscale.bench.registry import Context, Skipped, benchmark
from imgscale.jobs.cluster import connect
from imgscale.pipeline.classify import NearestClassMean
from imgscale.pipeline.compute import compute
from imgscale.pipeline.embed.eigenfunctions import chunk_bin_counts
from imgscale.pipeline.pq import PQCodec
from imgscale.pipeline.reductions import reduce_rows, row_stats
from imgscale.storage import FeatureStore, create_coded_store, create_store, default_rows_per_chunk
from imgscale.storage.chunk_io import direct_checksum, read_chunk_file
from imgscale.storage.chunks import ChunkReader
from imgscale.storage.layout import read_record
from imgscale.storage.row_codecs import CodesChunkReader, rows_codec

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
# Timed repeats of each measurement (the median kept): other processes may share the cores.
REPEATS = 3
# The histogram pass is PCALap's (pipeline/embed/pcalap.py defaults): 50 directions, 50 bins.
HISTOGRAM_DIRECTIONS = 50
HISTOGRAM_BINS = 50
PQ_M = 64
# PQ code stores measured: rows per chunk as multiples of the raw store's (the PQ default).
PQ_CHUNK_FACTORS = (1, 4, 16)
PQ_CODECS = ("none+crc32c", "blosc-lz4-shuffle+crc32c", "zstd-1+crc32c")
PQ_TRAIN_ROWS = 65_536
# Rows per GEMM when measuring the machine's arithmetic rate: one Gram sub-block's worth.
GEMM_ROWS = 8192
# The histogram pass's GEMM: rows projected onto its directions (thinner, slower than XᵀX).
PROJECTION = "float32 projection"


@dataclass(frozen=True)
class Pass:
    """One streaming pass: what it computes and the GEMM flops a row costs it (0: none)."""

    run: Callable[[], object]
    gemm_flops_per_row: float = 0.0
    gemm_dtype: str = "float64"


def run(
    size_gib: float = 2.0,
    dim: int = 512,
    workdir: str | None = None,
    *,
    matrix: bool = True,
    repeats: int = REPEATS,
    pq_m: int = PQ_M,
) -> list[dict]:
    """Measure the matrix (unless ``matrix`` is False), the passes and the PQ code store; return
    benchmark records (GB/s, rows/s, fractions)."""
    root = Path(workdir or tempfile.mkdtemp(prefix="imgscale-bench-io-"))
    root.mkdir(parents=True, exist_ok=True)
    rows = int(size_gib * 2**30) // (4 * dim)
    blocks = list(mixture_blocks(rows, dim, CLASSES))
    X = np.concatenate([block for block, _ in blocks])
    labels = np.concatenate([y for _, y in blocks])
    del blocks
    records = _ceiling(X, root, repeats)
    if matrix:
        records += _matrix(X, root / "matrix.zarr", _layouts(dim), "", repeats)
    rates = {dtype: _gemm_gflops(X, dtype, repeats) for dtype in ("float32", "float64")}
    rates[PROJECTION] = _projection_gflops(X, HISTOGRAM_DIRECTIONS, repeats)
    records += [record(f"{dtype} GEMM, 1 core", each, "GFLOP/s") for dtype, each in rates.items()]
    gemm = {dtype: statistics.median(each) for dtype, each in rates.items()}
    records += _raw_passes(X, labels, root, repeats, gemm)
    if pq_m:
        records += _pq(X, labels, root, pq_m, repeats)
    return records


# -- part 1: codec × chunk × engine matrix -------------------------------------------------


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


def _matrix(
    X: np.ndarray,
    path: Path,
    layouts: dict[str, tuple[int, int | None, tuple]],
    prefix: str,
    repeats: int,
) -> list[dict]:
    """Write ``X`` in each layout and read it back through every engine, warm and cold,
    ``repeats`` times each."""
    records = []
    for layout, (chunk_rows, shard_rows, codecs) in layouts.items():
        written = []
        for _ in range(repeats):
            shutil.rmtree(path, ignore_errors=True)
            written.append(_write(path, X, chunk_rows, shard_rows, codecs))
        size = _bytes_on_disk(path)
        records.append(
            record(
                f"{prefix}write {layout}",
                [X.nbytes / seconds / 1e9 for seconds in written],
                "GB/s",
                layout=layout,
                size_ratio=size / X.nbytes,
            )
        )
        for engine, reader in _engines(path, shard_rows or chunk_rows, X).items():
            for cache in ("warm", "cold"):
                seconds = _timed_reads(reader, path, repeats, cold=cache == "cold")
                records.append(
                    record(
                        f"{prefix}read {layout} {engine} {cache}",
                        [X.nbytes / each / 1e9 for each in seconds],
                        "GB/s",
                        layout=layout,
                        engine=engine,
                        cache=cache,
                    )
                )
        shutil.rmtree(path)
    return records


def _ceiling(X: np.ndarray, root: Path, repeats: int) -> list[dict]:
    """``np.fromfile`` of the same bytes, warm and cold: the local read ceiling."""
    raw = root / "ceiling.bin"
    X.tofile(raw)
    out = []
    for cache in ("warm", "cold"):
        read = partial(np.fromfile, raw, dtype=X.dtype)
        seconds = _timed_reads(read, raw, repeats, cold=cache == "cold")
        out.append(
            record(
                f"read np.fromfile {cache}",
                [X.nbytes / each / 1e9 for each in seconds],
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
        dtype=X.dtype,
        chunks=(chunk_rows, X.shape[1]),
        shards=None if shard_rows is None else (shard_rows, X.shape[1]),
        compressors=codecs,
        fill_value=0,
    )
    started = time.perf_counter()
    step = shard_rows or chunk_rows
    for start in range(0, len(X), step):
        array[start : start + step] = X[start : start + step]
    return time.perf_counter() - started


def _engines(path: Path, step: int, X: np.ndarray) -> dict[str, Callable[[], None]]:
    """One callable per engine that reads the whole array, one chunk (or shard) per call."""
    starts = range(0, X.shape[0], step)
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
                _touch(array[start : min(start + step, X.shape[0])].read().result())

        engines["tensorstore"] = read_tensorstore
    array = zarr.open_array(str(path), mode="r")
    checksum = direct_checksum(array)
    if checksum is not None and array.metadata.chunks == (step, X.shape[1]):

        def read_direct() -> None:
            for index in range(len(starts)):
                chunk_file = path / "c" / str(index) / "0"
                _touch(read_chunk_file(chunk_file, (step, X.shape[1]), X.dtype, checksum))

        engines["imgscale direct"] = read_direct
    return engines


def _touch(chunk: np.ndarray) -> float:
    """Sum one column: reads every page of a row-major chunk, so a lazily mapped one counts too."""
    return float(chunk[:, 0].sum())


def _timed_reads(
    read: Callable[[], object], path: Path, repeats: int, *, cold: bool
) -> list[float]:
    """Seconds of ``repeats`` reads: warm after an untimed one, cold each after dropping the
    cache."""
    if not cold:
        read()
    seconds = []
    for _ in range(repeats):
        if cold:
            drop_page_cache(path)
        started = time.perf_counter()
        read()
        seconds.append(time.perf_counter() - started)
    return seconds


def _bytes_on_disk(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# -- part 2: streaming passes over the default raw store -----------------------------------


def _rows_read(block: np.ndarray, row_start: int = 0) -> int:
    return len(block)


def _raw_passes(
    X: np.ndarray, labels: np.ndarray, root: Path, repeats: int, gemm: dict[str, float]
) -> list[dict]:
    """Each streaming pass over a default-layout store, as a fraction of the read-only pass."""
    path = root / "store.zarr"
    shutil.rmtree(path, ignore_errors=True)
    store = create_store(path, X.shape[1])
    with store.writer("bench") as writer:
        for start in range(0, len(X), store.rows_per_chunk):
            stop = start + store.rows_per_chunk
            writer.write(X[start:stop], labels[start:stop])
    features = store.features()
    dim = X.shape[1]
    rng = np.random.default_rng(0)
    projection = np.linalg.qr(rng.standard_normal((dim, HISTOGRAM_DIRECTIONS)))[0]
    projection = projection.astype(np.float32)
    histogram_args = (
        projection,
        np.zeros(HISTOGRAM_DIRECTIONS, np.float32),
        np.full(HISTOGRAM_DIRECTIONS, -4.0),
        np.full(HISTOGRAM_DIRECTIONS, HISTOGRAM_BINS / 8.0),
        HISTOGRAM_BINS,
    )
    passes = {
        "read only": Pass(
            lambda: compute(reduce_rows(_rows_read, [features], blocks_per_task="auto"))
        ),
        f"class sums, {CLASSES} classes (row_stats, gram=False)": Pass(
            lambda: row_stats(features, labels, CLASSES, gram=False)
        ),
        "Gram XᵀX + class sums XᵀY (row_stats, gram=True)": Pass(
            lambda: row_stats(features, labels, CLASSES, gram=True), dim * (dim + 1), "float64"
        ),
        f"histograms, {HISTOGRAM_DIRECTIONS} directions × {HISTOGRAM_BINS} bins "
        "(eigenfunctions chunk_bin_counts)": Pass(
            lambda: compute(
                reduce_rows(chunk_bin_counts, [features], *histogram_args, blocks_per_task="auto")
            ),
            2 * dim * HISTOGRAM_DIRECTIONS,
            PROJECTION,
        ),
    }
    reader = ChunkReader(store.path, len(X), dim, store.rows_per_chunk)
    out = _timed_passes(passes, reader, len(X), dim * X.itemsize, repeats, gemm, "")
    shutil.rmtree(path)
    return out


def _timed_passes(
    passes: dict[str, Pass],
    reader: ChunkReader | CodesChunkReader,
    n_rows: int,
    row_bytes: int,
    repeats: int,
    gemm: dict[str, float],
    prefix: str,
) -> list[dict]:
    """Every pass through 1 and 2 workers, as a fraction of the first (read-only) pass of the
    same round (the passes run in turn, ``repeats`` rounds); the read-only work in 1 and 2 plain
    processes is the ceiling of the 1 → 2 speed-up."""
    out, read_rates = [], {}
    for workers in (1, 2):
        with connect(quiet=True, n_workers=workers) as client:

            def released() -> None:
                # Until the scheduler has released the last run's results, an identical graph
                # would be answered from worker memory instead of being recomputed.
                while any(client.has_what().values()):
                    time.sleep(0.01)

            timings = _rounds([one_pass.run for one_pass in passes.values()], repeats, released)
            read_rates[workers] = [n_rows / seconds for seconds in timings[0].seconds]
            for (name, one_pass), timing in zip(passes.items(), timings, strict=True):
                rates = [n_rows / seconds for seconds in timing.seconds]
                extra = {}
                if one_pass.gemm_flops_per_row:
                    ceiling = workers * gemm[one_pass.gemm_dtype] * 1e9
                    extra["gemm_ceiling_rows_per_s"] = ceiling / one_pass.gemm_flops_per_row
                    extra["gemm_flops_per_row"] = one_pass.gemm_flops_per_row
                out.append(
                    record(
                        f"{prefix}pass {name}, {workers} worker(s)",
                        rates,
                        "rows/s",
                        read_rates[workers],
                        workers=workers,
                        gb_per_s=statistics.median(rates) * row_bytes / 1e9,
                        **timing.extra(),
                        **extra,
                    )
                )
                if "gemm_ceiling_rows_per_s" in extra:
                    out.append(
                        record(
                            f"{prefix}pass {name}, {workers} worker(s), vs {one_pass.gemm_dtype} "
                            f"GEMM ceiling ({one_pass.gemm_flops_per_row / 1e3:.0f} kflop a row)",
                            rates,
                            "rows/s",
                            extra["gemm_ceiling_rows_per_s"],
                        )
                    )
    plain = _plain_read_rates(reader, repeats)
    for procs, (rates, timing) in plain.items():
        out.append(
            record(
                f"{prefix}read only, {procs} plain process(es), no Dask",
                rates,
                "rows/s",
                gb_per_s=statistics.median(rates) * row_bytes / 1e9,
                **timing.extra(),
            )
        )
    out.append(
        record(
            f"{prefix}read-only speed-up 1 → 2 workers (peer: 1 → 2 plain processes)",
            _speed_ups(read_rates[1], read_rates[2]),
            "x",
            _speed_ups(plain[1][0], plain[2][0]),
        )
    )
    return out


def _speed_ups(one: list[float], two: list[float]) -> list[float]:
    """The i-th rate on two over the i-th on one."""
    return [b / a for a, b in zip(one, two, strict=True)]


@dataclass(frozen=True)
class Timing:
    """Wall seconds of each of ``repeats`` runs, and the cores' worth of CPU used during the runs
    (mean) by this process (the client and a LocalCluster's scheduler), by its child processes
    (workers) and by every other process on the machine."""

    seconds: list[float]
    client_cores: float
    child_cores: float
    other_cores: float

    def extra(self) -> dict[str, float]:
        return {
            "client_cores": self.client_cores,
            "child_cores": self.child_cores,
            "other_cores": self.other_cores,
        }


def _rounds(
    runs: list[Callable[[], object]], repeats: int, before: Callable[[], None] = lambda: None
) -> list[Timing]:
    """Timing of each of ``runs``, run in turn ``repeats`` rounds after an untimed one; ``before``
    runs untimed before each run."""
    for run_once in runs:
        before()
        run_once()
    used = [[] for _ in runs]

    def timed(index: int) -> Callable[[], float]:
        def measure() -> float:
            before()
            start_cpu = _cpu_seconds()
            started = time.perf_counter()
            runs[index]()
            seconds = time.perf_counter() - started
            client, children, busy = _cpu_seconds() - start_cpu
            used[index].append((client, children, max(0.0, busy - client - children)))
            return seconds

        return measure

    seconds = interleaved(*(timed(i) for i in range(len(runs))), repeats=repeats)
    return [
        Timing(each, *(np.sum(cores, axis=0) / sum(each)))
        for each, cores in zip(seconds, used, strict=True)
    ]


def _cpu_seconds() -> np.ndarray:
    """CPU seconds so far of (this process, its descendants, the whole machine); the machine's
    count includes steal time: cores the hypervisor gave to someone else are not ours either."""
    t = psutil.cpu_times()
    busy = t.user + t.nice + t.system + t.irq + t.softirq + getattr(t, "steal", 0.0)
    me = psutil.Process()
    children = 0.0
    for process in me.children(recursive=True):
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        children += times.user + times.system
    mine = me.cpu_times()
    return np.array([mine.user + mine.system, children, busy])


def _plain_read_rates(
    reader: ChunkReader | CodesChunkReader, repeats: int
) -> dict[int, tuple[list[float], Timing]]:
    """By processes (1, 2): (rows/s of each run, timing) of reading every chunk through
    ``reader`` in that many plain processes, chunk i in process i mod procs, the two run in turn:
    the same work as the read-only pass, no Dask."""
    n_chunks = -(-reader.shape[0] // reader.rows_per_chunk)
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as one, context.Pool(2) as two:
        pools = {1: one, 2: two}
        runs = [
            partial(
                pool.starmap,
                _read_chunks,
                [(reader, list(range(p, n_chunks, procs))) for p in range(procs)],
            )
            for procs, pool in pools.items()
        ]
        timings = _rounds(runs, repeats)
    return {
        procs: ([reader.shape[0] / seconds for seconds in timing.seconds], timing)
        for procs, timing in zip(pools, timings, strict=True)
    }


def _read_chunks(reader: ChunkReader | CodesChunkReader, indices: list[int]) -> int:
    return sum(len(reader.read_chunk(i)) for i in indices)


def _gemm_gflops(X: np.ndarray, dtype: str, repeats: int) -> list[float]:
    """GFLOP/s of one core's XᵀX on a Gram sub-block of ``X``, ``repeats`` times after an untimed
    one: the machine's arithmetic rate."""
    block = np.ascontiguousarray(X[:GEMM_ROWS], dtype=dtype)
    rates = []
    with threadpool_limits(1):
        block.T @ block
        for _ in range(repeats):
            started = time.perf_counter()
            block.T @ block
            seconds = time.perf_counter() - started
            rates.append(len(block) * X.shape[1] * (X.shape[1] + 1) / seconds / 1e9)
    return rates


def _projection_gflops(X: np.ndarray, directions: int, repeats: int) -> list[float]:
    """GFLOP/s of one core's float32 ``X @ P`` onto `directions` columns, in the histogram pass's
    1,024-row sub-blocks, ``repeats`` times after an untimed one: a thin GEMM runs well below the
    XᵀX rate, so it is that pass's ceiling."""
    block = np.ascontiguousarray(X[:1024], dtype=np.float32)
    projection = np.ones((X.shape[1], directions), np.float32)
    rates = []
    with threadpool_limits(1):
        block @ projection
        for _ in range(repeats):
            started = time.perf_counter()
            for _sub_block in range(GEMM_ROWS // len(block)):
                block @ projection
            seconds = time.perf_counter() - started
            rates.append(2 * GEMM_ROWS * X.shape[1] * directions / seconds / 1e9)
    return rates


# -- part 3: a PQ code store of the same rows ----------------------------------------------


def _pq(X: np.ndarray, labels: np.ndarray, root: Path, m: int, repeats: int) -> list[dict]:
    """Codes of ``X`` (M = ``m``): codec × chunk matrix, reads through the store, and the
    class-sums-from-codes pass against the codes' read-only pass, per chunk size."""
    sample = X[np.random.default_rng(0).choice(len(X), min(PQ_TRAIN_ROWS, len(X)), replace=False)]
    codec = PQCodec.train(sample, m, niter=10)
    base_rows = default_rows_per_chunk(X.shape[1])
    codes = np.concatenate(
        [codec.encode(X[start : start + base_rows]) for start in range(0, len(X), base_rows)]
    )
    prefix = f"codes M={m}: "
    layouts = {
        f"{name} chunk {factor * base_rows} rows ({factor * base_rows * m / MIB:g} MiB)": (
            factor * base_rows,
            None,
            CODEC_CHAINS[name],
        )
        for name in PQ_CODECS
        for factor in PQ_CHUNK_FACTORS
    }
    out = _matrix(codes, root / "codes-matrix.zarr", layouts, prefix, repeats)
    for factor in PQ_CHUNK_FACTORS:
        rows_per_chunk = factor * base_rows
        if len(X) < 2 * rows_per_chunk:
            continue  # fewer than one chunk per worker: no 1 → 2 worker figure
        path = root / "pq.zarr"
        shutil.rmtree(path, ignore_errors=True)
        store = create_coded_store(path, codec, rows_per_chunk=rows_per_chunk)
        with store.writer("bench") as writer:
            for start in range(0, len(X), rows_per_chunk):
                stop = start + rows_per_chunk
                writer.write(codes[start:stop], labels[start:stop])
        out += _pq_store_passes(
            store, codec, labels, repeats, f"{prefix}{rows_per_chunk} rows a chunk: "
        )
        shutil.rmtree(path)
    return out


def _pq_store_passes(
    store: FeatureStore, codec: PQCodec, labels: np.ndarray, repeats: int, prefix: str
) -> list[dict]:
    """The codes read through the store's API in one process, then the read-only and the
    class-sums-from-codes passes through Dask."""
    committed = read_record(store.path)
    n = committed["committed_rows"]
    reader = rows_codec(store.path, committed).codes_reader(n)
    n_chunks = -(-n // store.rows_per_chunk)
    seconds = _timed_reads(
        lambda: _read_chunks(reader, list(range(n_chunks))), store.path, repeats, cold=False
    )
    out = [
        record(
            f"{prefix}read through the store (CodesChunkReader), 1 process",
            [n * codec.m / each / 1e9 for each in seconds],
            "GB/s",
            rows_per_s=n / statistics.median(seconds),
        )
    ]
    codes = store.codes()
    passes = {
        "read only": Pass(
            lambda: compute(reduce_rows(_rows_read, [codes], blocks_per_task="auto"))
        ),
        f"class sums from codes, {CLASSES} classes (NearestClassMean.fit_codes)": Pass(
            lambda: NearestClassMean().fit(codes, labels, codec=codec)
        ),
    }
    return out + _timed_passes(passes, reader, n, codec.m, repeats, {}, prefix)


@benchmark(
    "io",
    "store read rates through the store's API and Dask (1 and 2 workers) vs np.fromfile and "
    "plain processes; each streaming pass vs the read-only pass; PQ code store; at medium and "
    "large, the layout matrix (codec x chunk size x engine) that chose the store's layout",
    needs=("optional: imgscale[peers] adds the zarrs and tensorstore engines to the matrix",),
)
def suite(ctx: Context) -> list[dict]:
    if ctx.external_cluster:
        raise Skipped(
            "it compares LocalClusters of 1 and 2 workers of its own; run it without --scheduler"
        )
    size_gib, pq_m, matrix = ctx.pick(
        tiny=(0.02, 0, False),
        small=(1.0, 64, False),
        medium=(4.0, 64, True),
        large=(4.0, 64, True),
    )
    repeats = repetitions(ctx)
    return run(size_gib, 512, ctx.scratch("io"), matrix=matrix, repeats=repeats, pq_m=pq_m)
