"""``imgscale bench pq``: PQ compress, class means from codes and ADC search vs faiss, same run.

On the synthetic Gaussian mixture (``imgscale.bench.common``), one store of ``rows × dim``:

- encode throughput: ``imgscale compress`` on the cluster (read, encode, write, commit) vs faiss
  ``ProductQuantizer.compute_codes`` in this process on the same rows in memory (all threads),
  in turn, with the codec trained by a first, untimed compress;
- reconstruction MSE: ours vs faiss trained on the same number of sampled rows at equal M;
- class means for ``mean_classes`` classes: ``NearestClassMean.fit`` of codes (centroids gathered
  into class sums, no decoded rows) vs ``fit`` on the decoded float rows, both on the cluster,
  in turn after an untimed round;
- ADC scan rate: ``pipeline.pq.adc_search`` vs faiss ``IndexPQ.search`` on the same codes in
  memory, one thread each, in turn after an untimed round;
- bytes on disk, raw vs PQ;
- codec training per sub-space: `PQCodec.train` (faiss's k-means searching by BLAS from the
  first query) vs faiss ``ProductQuantizer.train`` with faiss's default search settings, both
  on one thread, on the same 4,096 mixture rows of ``train_m`` 8-D sub-spaces (the sample size
  of a 64K-D codebook), 256 centroids, 25 iterations, in turn; with both codecs'
  reconstruction MSE on those rows.

Every timed comparison runs as many rounds as the scale's repetitions; each figure is the median
of its rounds, each ratio the median of the rounds'.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import warnings
from functools import partial
from pathlib import Path

import dask
import numpy as np

from imgscale.bench.common import (
    PeakRSS,
    interleaved,
    mixture_blocks,
    mixture_store,
    record,
    repetitions,
)
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
    repeats: int = 3,
) -> list[dict]:
    """Ours and faiss in turn, ``repeats`` rounds of each timed comparison on the store built
    once; return benchmark records."""
    import faiss

    workdir = Path(workdir or tempfile.mkdtemp(prefix="imgscale-bench-pq-"))
    raw = mixture_store(workdir / f"mixture-{rows}x{dim}-{CLUSTERS}.zarr", rows, dim, CLUSTERS)
    pq_path = workdir / f"mixture-{rows}x{dim}-pq{m}.zarr"
    shutil.rmtree(pq_path, ignore_errors=True)
    config = {"rows": rows, "dim": dim, "m": m}

    with connect(scheduler, quiet=True):
        with PeakRSS() as rss:
            # The first compress trains the codec; every timed one reuses it (training is
            # measured once, below).
            summary = compress(raw, pq_path, m)
            store = open_store(pq_path)
            # Class means: labels of `mean_classes` classes, 10 per mixture cluster if possible.
            labels = _mean_labels(raw.labels(), mean_classes)
            codec = store.codec
            codes, features = store.codes(), store.features()
            means = {}

            def ours_means() -> float:
                started = time.perf_counter()
                means["ours"] = NearestClassMean().fit(codes, labels, codec=codec)
                return time.perf_counter() - started

            def decoded_means() -> float:
                started = time.perf_counter()
                means["decoded"] = NearestClassMean().fit(features, labels)
                return time.perf_counter() - started

            # An untimed round first, so that loading numba's compiled kernels on the workers
            # and the page cache favour neither path.
            means_seconds, decoded_seconds = (
                each[1:] for each in interleaved(ours_means, decoded_means, repeats=repeats + 1)
            )
        means_error = float(np.abs(means["ours"].means_ - means["decoded"].means_).max())

        # In-memory peers: the rows the store holds, regenerated deterministically.
        X = np.concatenate([b[0] for b in mixture_blocks(rows, dim, CLUSTERS)])
        sample = X[sample_indices(rows, DEFAULT_SAMPLE, 0)]
        faiss_pq = faiss.ProductQuantizer(dim, m, 8)
        faiss_pq.cp.min_points_per_centroid = 1
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            faiss_pq.train(sample)
        del sample

        def ours_encode() -> float:
            shutil.rmtree(pq_path)
            return compress(raw, pq_path, m, codec=codec)["encode_rows_per_second"]

        encode_rates, faiss_encode_rates = interleaved(
            ours_encode, partial(_faiss_encode_rate, faiss_pq, X), repeats=repeats
        )
    faiss_mse = _mse(X, faiss_pq.decode(faiss_pq.compute_codes(X)))
    store = open_store(pq_path)

    # ADC: both on the same codes in memory, one thread each.
    codes = store.codes().compute(scheduler="synchronous")
    rng = np.random.default_rng(1)
    Q = X[rng.choice(rows, queries, replace=False)]
    Q += rng.standard_normal((queries, dim), np.float32)
    del X
    index = index_pq(codec.codebook, codes)
    found = {}

    def ours_adc() -> float:
        with dask.config.set(scheduler="synchronous"):
            started = time.perf_counter()
            found["ours"], _ = adc_search(Q, codes, codec.codebook, k=10, rotation=codec.rotation)
            return rows * queries / (time.perf_counter() - started)

    def faiss_adc() -> float:
        started = time.perf_counter()
        _, found["faiss"] = index.search(Q, 10)
        return rows * queries / (time.perf_counter() - started)

    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)  # ours scans with faiss too: one thread for both
    try:
        # An untimed round first: the first scan of the codes pays for cold caches.
        adc_rates, faiss_adc_rates = interleaved(ours_adc, faiss_adc, repeats=repeats + 1)
    finally:
        faiss.omp_set_num_threads(threads)
    pairs = zip(found["ours"], found["faiss"], strict=True)
    agreement = float(np.mean([len(set(a) & set(b)) / 10 for a, b in pairs]))

    raw_bytes = raw.info()["bytes_on_disk"]
    pq_bytes = store.info()["bytes_on_disk"]
    records = [
        record(
            "encode throughput (read+encode+write, cluster)",
            encode_rates,
            "vectors/s",
            faiss_encode_rates,
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
            max_abs_difference=means_error,
            **config,
        ),
        record(
            "ADC scan rate, 1 thread",
            adc_rates[1:],
            "codes/s",
            faiss_adc_rates[1:],
            peer="faiss IndexPQ.search, 1 thread",
            queries=queries,
            top10_agreement=agreement,
            **config,
        ),
        record("bytes on disk", pq_bytes, "bytes", raw_bytes, peer="raw float32 store", **config),
        record(
            "codec training",
            summary["train_seconds"],
            "s",
            why_once="the codec is trained once; every timed encode reuses it",
            **config,
        ),
        record(
            "peak RSS (client + workers)",
            rss.peak / 2**30,
            "GiB",
            why_once="the peak of the training compress and every class-means round",
            **config,
        ),
    ]
    if not keep:
        shutil.rmtree(pq_path, ignore_errors=True)
    return records


def train_speed(m: int, rows: int = 4096, niter: int = 25, repeats: int = 3) -> list[dict]:
    """Training seconds per sub-space and reconstruction MSE, `PQCodec.train` vs faiss
    ``ProductQuantizer.train`` with faiss's default search settings, both on one thread, on
    ``rows`` mixture rows of ``m`` 8-D sub-spaces; ``repeats`` alternating runs each."""
    import faiss

    dim = 8 * m
    X = next(mixture_blocks(rows, dim, CLUSTERS, block_rows=rows))[0]
    trained = {}

    def ours_train() -> float:
        started = time.perf_counter()
        trained["ours"] = PQCodec.train(X, m, niter=niter)
        return time.perf_counter() - started

    def faiss_train() -> float:
        peer = faiss.ProductQuantizer(dim, m, 8)
        peer.cp.niter = niter
        peer.cp.min_points_per_centroid = 1
        started = time.perf_counter()
        peer.train(X)
        trained["faiss"] = peer
        return time.perf_counter() - started

    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # 4,096 rows: fewer than 39 a centroid
            ours_seconds, faiss_seconds = interleaved(ours_train, faiss_train, repeats=repeats)
    finally:
        faiss.omp_set_num_threads(threads)
    ours, peer = trained["ours"], trained["faiss"]
    config = {"rows": rows, "dsub": 8, "centroids": KSUB, "niter": niter, "train_m": m}
    return [
        record(
            "codec training per sub-space, 1 thread",
            [seconds / m for seconds in ours_seconds],
            "s",
            [seconds / m for seconds in faiss_seconds],
            peer="faiss ProductQuantizer.train, default search settings, 1 thread",
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


def _faiss_encode_rate(faiss_pq, X: np.ndarray) -> float:
    """Rows a second of faiss encoding ``X`` in memory."""
    started = time.perf_counter()
    faiss_pq.compute_codes(X)
    return len(X) / (time.perf_counter() - started)


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
            scheduler=ctx.scheduler, repeats=repetitions(ctx),
        )  # fmt: skip
        prefix = f"D={dim}, M={m}: " if i else ""
        records += [{**r, "name": prefix + r["name"]} for r in found]
    return records + train_speed(train_m, repeats=repetitions(ctx))
