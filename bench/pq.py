"""``imgscale bench pq``: PQ compress, class means from codes and ADC search vs faiss, same run.

On the synthetic Gaussian mixture (``imgscale.bench.common``), one store of ``rows × dim``:

- encode throughput: ``imgscale compress`` on the cluster (read, encode, write, commit) vs faiss
  ``ProductQuantizer.compute_codes`` in this process on the same rows in memory (all threads),
  best of two each;
- reconstruction MSE: ours vs faiss trained on the same number of sampled rows at equal M;
- class means for ``mean_classes`` classes: ``NearestClassMean.fit`` of codes (centroids gathered
  into class sums, no decoded rows) vs ``fit`` on the decoded float rows, both on the cluster,
  best of two runs after a warm-up run each;
- ADC scan rate: ``pipeline.pq.adc_search`` vs faiss ``IndexPQ.search`` on the same codes in
  memory, one thread each;
- bytes on disk, raw vs PQ;
- codec training per sub-space: `PQCodec.train` (faiss's k-means searching by BLAS from the
  first query) vs faiss ``ProductQuantizer.train`` with faiss's default search settings, both
  on one thread, on the same 4,096 mixture rows of ``train_m`` 8-D sub-spaces (the sample size
  of a 64K-D codebook), 256 centroids, 25 iterations, best of two each; with both codecs'
  reconstruction MSE on those rows.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import warnings
from pathlib import Path

import dask
import numpy as np

from imgscale.bench.common import PeakRSS, mixture_blocks, mixture_store, record
from imgscale.bench.registry import Context, benchmark
from imgscale.jobs.cluster import connect
from imgscale.jobs.compress import compress
from imgscale.pipeline.classify import NearestClassMean
from imgscale.pipeline.pq import (
    DEFAULT_SAMPLE,
    KSUB,
    PQCodec,
    adc_search,
    index_pq,
    sample_indices,
)
from imgscale.storage import open_store

CLUSTERS = 1000


def run(
    rows: int,
    dim: int,
    m: int,
    *,
    mean_classes: int = 10_000,
    queries: int = 16,
    workdir: str | None = None,
    scheduler: str | None = None,
    keep: bool = False,
) -> list[dict]:
    import faiss

    workdir = Path(workdir or tempfile.mkdtemp(prefix="imgscale-bench-pq-"))
    raw = mixture_store(workdir / f"mixture-{rows}x{dim}-{CLUSTERS}.zarr", rows, dim, CLUSTERS)
    pq_path = workdir / f"mixture-{rows}x{dim}-pq{m}.zarr"
    shutil.rmtree(pq_path, ignore_errors=True)
    config = {"rows": rows, "dim": dim, "m": m}

    with connect(scheduler, quiet=True), PeakRSS() as rss:
        summary = compress(raw, pq_path, m)
        # Encode best of 2 (the second with the first's codec: training is not timed), like
        # faiss below: a single run of each is at the mercy of other load on the machine.
        codec = open_store(pq_path).codec
        shutil.rmtree(pq_path)
        again = compress(raw, pq_path, m, codec=codec)
        encode_rate = max(summary["encode_rows_per_second"], again["encode_rows_per_second"])
        store = open_store(pq_path)
        # Class means: labels of `mean_classes` classes, 10 per mixture cluster where possible.
        labels = _mean_labels(raw.labels(), mean_classes)
        codec = store.codec
        codes, features = store.codes(), store.features()
        ours_means, means_seconds = _best_of(
            lambda: NearestClassMean().fit(codes, labels, codec=codec)
        )
        peer_means, decoded_seconds = _best_of(lambda: NearestClassMean().fit(features, labels))
    means_error = float(np.abs(ours_means.means_ - peer_means.means_).max())

    # In-memory peers: the rows the store holds, regenerated deterministically.
    X = np.concatenate([b[0] for b in mixture_blocks(rows, dim, CLUSTERS)])
    sample = X[sample_indices(rows, DEFAULT_SAMPLE, 0)]
    faiss_pq = faiss.ProductQuantizer(dim, m, 8)
    faiss_pq.cp.min_points_per_centroid = 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        faiss_pq.train(sample)
    del sample
    ours_pq = faiss.ProductQuantizer(dim, m, 8)
    faiss.copy_array_to_vector(codec.codebook.ravel(), ours_pq.centroids)
    faiss_encode_seconds = np.inf
    for _ in range(2):
        started = time.perf_counter()
        faiss_codes = faiss_pq.compute_codes(X)
        faiss_encode_seconds = min(faiss_encode_seconds, time.perf_counter() - started)
    faiss_mse = _mse(X, faiss_pq.decode(faiss_codes))
    del faiss_codes

    # ADC: both on the same codes in memory, one thread each.
    codes = store.codes().compute(scheduler="synchronous")
    rng = np.random.default_rng(1)
    Q = X[rng.choice(rows, queries, replace=False)]
    Q += rng.standard_normal((queries, dim), np.float32)
    del X
    index = index_pq(codec.codebook, codes)
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)  # ours scans with faiss too: one thread for both
    adc_seconds = faiss_adc_seconds = np.inf
    try:
        # Alternating, best of 2 each: the first scan of the codes pays for cold caches.
        for _ in range(2):
            with dask.config.set(scheduler="synchronous"):
                started = time.perf_counter()
                ours_ids, _ = adc_search(Q, codes, codec.codebook, k=10, rotation=codec.rotation)
                adc_seconds = min(adc_seconds, time.perf_counter() - started)
            started = time.perf_counter()
            _, faiss_ids = index.search(Q, 10)
            faiss_adc_seconds = min(faiss_adc_seconds, time.perf_counter() - started)
    finally:
        faiss.omp_set_num_threads(threads)
    pairs = zip(ours_ids, faiss_ids, strict=True)
    agreement = float(np.mean([len(set(a) & set(b)) / 10 for a, b in pairs]))

    raw_bytes = raw.info()["bytes_on_disk"]
    pq_bytes = store.info()["bytes_on_disk"]
    records = [
        record(
            "encode throughput (read+encode+write, cluster)",
            encode_rate,
            "vectors/s",
            rows / faiss_encode_seconds,
            peer="faiss ProductQuantizer.compute_codes in memory, one process",
            **config,
        ),
        record(
            "reconstruction MSE",
            summary["mse"],
            "sq. distance",
            faiss_mse,
            peer="faiss ProductQuantizer trained on the same sample size",
            relative_mse=summary["relative_mse"],
            **config,
        ),
        record(
            f"class means, {mean_classes} classes, from codes",
            means_seconds,
            "s",
            decoded_seconds,
            peer="NearestClassMean.fit on decoded float rows (same cluster)",
            speedup=decoded_seconds / means_seconds,
            max_abs_difference=means_error,
            **config,
        ),
        record(
            "ADC scan rate, 1 thread",
            rows * queries / adc_seconds,
            "codes/s",
            rows * queries / faiss_adc_seconds,
            peer="faiss IndexPQ.search, 1 thread",
            queries=queries,
            top10_agreement=agreement,
            **config,
        ),
        record("bytes on disk", pq_bytes, "bytes", raw_bytes, peer="raw float32 store", **config),
        record("codec training", summary["train_seconds"], "s", **config),
        record("peak RSS (client + workers)", rss.peak / 2**30, "GiB", **config),
    ]
    if not keep:
        shutil.rmtree(pq_path, ignore_errors=True)
    return records


def train_speed(m: int, rows: int = 4096, niter: int = 25) -> list[dict]:
    """Training seconds per sub-space and reconstruction MSE, `PQCodec.train` vs faiss
    ``ProductQuantizer.train`` with faiss's default search settings, both on one thread, on
    ``rows`` mixture rows of ``m`` 8-D sub-spaces; best of two alternating runs each."""
    import faiss

    dim = 8 * m
    X = next(mixture_blocks(rows, dim, CLUSTERS, block_rows=rows))[0]
    ours_seconds = faiss_seconds = np.inf
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # 4,096 rows: fewer than 39 a centroid
            for _ in range(2):
                started = time.perf_counter()
                ours = PQCodec.train(X, m, niter=niter)
                ours_seconds = min(ours_seconds, time.perf_counter() - started)
                peer = faiss.ProductQuantizer(dim, m, 8)
                peer.cp.niter = niter
                peer.cp.min_points_per_centroid = 1
                started = time.perf_counter()
                peer.train(X)
                faiss_seconds = min(faiss_seconds, time.perf_counter() - started)
    finally:
        faiss.omp_set_num_threads(threads)
    config = {"rows": rows, "dsub": 8, "centroids": KSUB, "niter": niter, "train_m": m}
    return [
        record(
            "codec training per sub-space, 1 thread",
            ours_seconds / m,
            "s",
            faiss_seconds / m,
            peer="faiss ProductQuantizer.train, default search settings, 1 thread",
            speedup=faiss_seconds / ours_seconds,
            **config,
        ),
        record(
            "codec training: reconstruction MSE of the training rows",
            _mse(X, ours.decode(ours.encode(X))),
            "sq. distance",
            _mse(X, peer.decode(peer.compute_codes(X))),
            peer="faiss ProductQuantizer.train, default search settings, on the same rows",
            **config,
        ),
    ]


def _best_of(fit, repeats: int = 2) -> tuple[NearestClassMean, float]:
    """The fitted model and the best wall time of `repeats` runs after an untimed one, so that
    loading numba's compiled kernels on the workers and the page cache favour neither path."""
    model = fit()
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        model = fit()
        seconds.append(time.perf_counter() - started)
    return model, min(seconds)


def _mean_labels(cluster_labels: np.ndarray, classes: int) -> np.ndarray:
    rng = np.random.default_rng(2)
    per_cluster = max(1, classes // CLUSTERS)
    labels = cluster_labels.astype(np.int64) * per_cluster + rng.integers(
        0, per_cluster, len(cluster_labels)
    )
    return (labels % classes).astype(np.int32)


def _mse(X: np.ndarray, Xhat: np.ndarray, block: int = 65_536) -> float:
    total = 0.0
    for start in range(0, len(X), block):
        d = X[start : start + block] - Xhat[start : start + block]
        total += float(np.einsum("nd,nd->", d, d, dtype=np.float64))
    return total / len(X)


@benchmark(
    "pq",
    "PQ encode, MSE, class means from codes, ADC scan and codec training vs faiss; bytes raw vs "
    "PQ (medium and large add D=4096, M=512)",
)
def suite(ctx: Context) -> list[dict]:
    # (rows, D, M); figures of a configuration after the first are named "D=…, M=…: figure".
    wide = (200_000, 4096, 512)
    configs, mean_classes = ctx.pick(
        tiny=([(8_000, 32, 8)], 20),
        small=([(200_000, 512, 64)], 1000),
        medium=([(1_000_000, 512, 64), wide], 10_000),
        large=([(1_000_000, 512, 64), wide], 10_000),
    )
    # Sub-spaces of the training-speed comparison (faiss spends ~0.14 s on each).
    train_m = ctx.pick(tiny=2, small=32, medium=64, large=64)
    records = []
    for i, (rows, dim, m) in enumerate(configs):
        found = run(
            rows, dim, m, mean_classes=mean_classes, workdir=ctx.scratch("pq"),
            scheduler=ctx.scheduler,
        )  # fmt: skip
        prefix = f"D={dim}, M={m}: " if i else ""
        records += [{**r, "name": prefix + r["name"]} for r in found]
    return records + train_speed(train_m)
