"""The machine's limits, measured at the start of a suite run: the anchors benchmarks compare to.

- float32 GEMM rate (GFLOP/s), one core and all cores: the ceiling of every compute-bound pass;
- memory bandwidth (GB/s of a large ``np.copyto``, bytes read + written): the ceiling of a pass
  over rows already in memory;
- the disk's cold sequential read rate: ``dd``-style reads of 16 MiB blocks into one buffer from
  a file whose pages were just dropped from the page cache: the ceiling of a cold store pass;
- the page cache's read rate: the same reads of the same file once it is cached: the ceiling of
  a warm store pass.
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

import numpy as np
import psutil
from threadpoolctl import threadpool_limits

from imgscale.bench.common import record

MIB = 2**20
READ_BLOCK = 16 * MIB


def describe() -> str:
    """One line naming the machine: cores, memory, CPU model."""
    cores = psutil.cpu_count(logical=True)
    memory = psutil.virtual_memory().total / 2**30
    return f"{cores} cores, {memory:.0f} GiB, {_cpu_model()}"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gemm_gflops(rows: int = 4096, dim: int = 512, out: int = 2048, repeats: int = 5) -> float:
    """Best-of float32 ``(rows × dim) @ (dim × out)`` GFLOP/s with the BLAS's current threads."""
    rng = np.random.default_rng(0)
    A = rng.standard_normal((rows, dim), dtype=np.float32)
    B = rng.standard_normal((dim, out), dtype=np.float32)
    C = np.empty((rows, out), dtype=np.float32)
    np.matmul(A, B, out=C)
    best = np.inf
    for _ in range(repeats):
        started = time.perf_counter()
        np.matmul(A, B, out=C)
        best = min(best, time.perf_counter() - started)
    return 2 * rows * dim * out / best / 1e9


def memory_bandwidth(nbytes: int, repeats: int = 3) -> float:
    """Best-of GB/s of copying ``nbytes`` between two arrays (bytes read plus bytes written)."""
    src = np.ones(nbytes // 8)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    best = np.inf
    for _ in range(repeats):
        started = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - started)
    return 2 * src.nbytes / best / 1e9


def drop_page_cache(path: Path) -> None:
    """Evict the file (or every file under the folder) ``path`` from the page cache.

    ``POSIX_FADV_DONTNEED`` after an ``fsync`` drops exactly these pages, with no privilege and
    without evicting the other processes' caches on a shared machine.
    """
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    for file in files:
        fd = os.open(file, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def sequential_read_rate(path: Path, *, cold: bool) -> float:
    """GB/s of reading ``path`` start to end in 16 MiB blocks into one buffer (``dd bs=16M``),
    after dropping its pages (cold) or after a read that cached them (warm, best of two)."""
    if cold:
        drop_page_cache(path)
        return path.stat().st_size / _read_through(path) / 1e9
    _read_through(path)
    return path.stat().st_size / min(_read_through(path) for _ in range(2)) / 1e9


def _read_through(path: Path) -> float:
    buffer = bytearray(READ_BLOCK)
    view = memoryview(buffer)
    started = time.perf_counter()
    with open(path, "rb", buffering=0) as file:
        while file.readinto(view):
            pass
    return time.perf_counter() - started


def write_file(path: Path, nbytes: int) -> None:
    """``nbytes`` of random bytes in 16 MiB writes, flushed to disk."""
    block = np.random.default_rng(0).integers(0, 256, READ_BLOCK, dtype=np.uint8).tobytes()
    with open(path, "wb") as file:
        for start in range(0, nbytes, READ_BLOCK):
            file.write(block[: min(READ_BLOCK, nbytes - start)])
        file.flush()
        os.fsync(file.fileno())


def limits(workdir: Path, disk_bytes: int, memory_bytes: int) -> list[dict]:
    """Records of the four limits; the disk's are read from a ``disk_bytes`` file in ``workdir``."""
    with threadpool_limits(1):
        one_core = gemm_gflops()
    all_cores = gemm_gflops()
    bandwidth = memory_bandwidth(memory_bytes)
    probe = workdir / "sequential-read.bin"
    write_file(probe, disk_bytes)
    try:
        cold = sequential_read_rate(probe, cold=True)
        warm = sequential_read_rate(probe, cold=False)
    finally:
        probe.unlink()
    size = {"bytes": disk_bytes}
    return [
        record("float32 GEMM, 1 core", one_core, "GFLOP/s"),
        record("float32 GEMM, all cores", all_cores, "GFLOP/s", cores=os.cpu_count()),
        record("memory bandwidth (copy)", bandwidth, "GB/s", bytes=memory_bytes),
        record("disk sequential read, cold", cold, "GB/s", **size),
        record("page-cache sequential read", warm, "GB/s", **size),
    ]
