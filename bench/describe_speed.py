"""``imgscale bench describe-speed``: the local-descriptor pipeline against the libraries it
stands beside, in the same run: dense SIFT on the cluster vs OpenCV in a plain loop, one EM pass
of the Fisher vectors' Gaussian mixture vs scikit-learn's ``GaussianMixture``, Fisher vector
encoding vs ``skimage.feature.fisher_vector``, each on 1 and 2 single-threaded workers where
the cluster runs it.

The images are 64×64 crops of scikit-learn's two sample photos (no data folder), the grid of
``imgscale bench cifar10-bow-fisher`` (16-pixel patches every 8: 49 a crop):

- **dense SIFT**: `DenseSift` (OpenCV's ``compute`` on the grid's keypoints) over the crops held
  on the workers, the descriptors kept there as ``fit-features`` keeps them, in as many tasks a
  worker as ``ingest`` gives each thread (`TASKS_PER_THREAD_AT_LEAST`), vs
  ``cv2.SIFT_create().compute`` called on each crop in a loop in this process (OpenCV's own
  threads as it sets them, recorded); descriptors a second. Target: ≥ 1.8× on 2 workers. The
  same loop on one OpenCV thread is a second peer: OpenCV spreads one image's keypoints over
  its threads, so its default loop already uses both cores. The machine's limit is a third:
  that one-thread loop in 2 plain processes at once, each over half the crops, which is what
  the cores give this call with no scheduler and nothing held on workers; target ≥ 0.9 of it
  on 2 workers.
- **EM pass**: the crops' RootSIFT projected to 64-D by PCA; `fit_gmm` (one pass over the
  descriptors on the workers an iteration, ``fit-features``'s path) vs scikit-learn's E and M
  steps (what ``GaussianMixture.fit`` runs an iteration) on the same descriptors in this
  process with its BLAS threads (recorded), both for the same iterations from the same k-means
  start; seconds an iteration, and the mean log-likelihood each ends at. Target: ≥ 3× on 2
  workers.
- **GIST against its FFTs**: ``--features gist`` (LMgist's 32 filters at 128×128) on 128×128
  crops in this process on one thread, beside the floor measured in the same run: the same
  FFTs alone (one forward transform of each padded image, then per filter the inverse along
  its 192 rows and its 128 kept columns), complex64, nothing else. Target: ≥ 0.5 of the floor.
- **Fisher vector encoding**: improved Fisher vectors of each crop's 49 projected descriptors,
  `fisher_vectors` (32 images a call, as ``FisherVector.transform``) vs ``fisher_vector``
  called per image, both in this process; images a second. Target: ≥ 2×.

Each measurement runs as many times as the scale's repetitions, in turn with its peers (the
OpenCV loops and scikit-learn's EM steps in the rounds of each cluster arm); each figure is the
median of its rounds, each ratio the median of the rounds' ratios. Every timed record carries
the 1-minute load average as it started: on the shared 2-core
machine a figure taken above 2.5 includes others' work. Tiny is a toy for CI: a few seconds, the
cluster arms on the suite's cluster only.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.fft
from distributed import Client
from threadpoolctl import threadpool_limits

from imgscale.bench import opencv_peer
from imgscale.bench.common import interleaved, record, repetitions
from imgscale.bench.registry import Context, benchmark
from imgscale.jobs.cluster import ClusterChunks, connect
from imgscale.jobs.ingest import TASKS_PER_THREAD_AT_LEAST
from imgscale.pipeline.describe import DenseSift
from imgscale.pipeline.describe.dense_sift import grid_keypoints, patch_grid
from imgscale.pipeline.describe.fisher_vector import fisher_vectors
from imgscale.pipeline.describe.vocabulary import (
    InMemoryChunks,
    fit_gmm,
    fit_kmeans,
    fit_pca,
    project,
)

SIZE, PATCH, STEP = 64, 16, 8
# The working size of ``--features gist`` (LMgist's defaults at 128×128).
GIST_SIZE = 128
# Images a `fisher_vectors` call encodes (FisherVector.transform's slice).
FV_SLICE = 32
COMPONENTS = 64
TARGETS = {"sift": 1.8, "sift-limit": 0.9, "em": 3.0, "fv": 2.0}


@benchmark(
    "describe-speed",
    "dense SIFT on the cluster vs OpenCV in a loop, one EM pass vs scikit-learn's "
    "GaussianMixture, Fisher vector encoding vs scikit-image, 1 -> 2 workers",
    needs=("scikit-image, scikit-learn, OpenCV (no data files)",),
)
def suite(ctx: Context) -> list[dict]:
    n_images, gaussians, iterations, fv_images, gist_images = ctx.pick(
        tiny=(128, 8, 2, 64, 32),
        small=(4_096, 64, 5, 1_024, 512),
        medium=(16_384, 256, 5, 4_096, 2_048),
        large=(65_536, 256, 5, 4_096, 2_048),
    )
    images = crops(n_images)
    repeats = repetitions(ctx)
    config = {"images": n_images, "image_size": SIZE, "patch": PATCH, "step": STEP}
    loops = _opencv_loops(images)
    load = _load()
    loop_rate, single_rate, limit_rate = interleaved(*loops, repeats=repeats)
    out = [
        record("dense SIFT, OpenCV loop (1 process)", loop_rate, "descriptors/s",
               opencv_threads=_opencv_threads(), **config, **load),
        record("dense SIFT, OpenCV loop on 1 thread (1 process)", single_rate, "descriptors/s",
               opencv_threads=1, **config, **load),
        record("dense SIFT, OpenCV loop on 1 thread in 2 processes vs 1 process", limit_rate,
               "descriptors/s", loop_rate, peer="cv2 SIFT compute in a loop, 1 process",
               processes=2, opencv_threads=1, **config, **load),
    ]  # fmt: skip

    descriptors = DenseSift((PATCH,), STEP, root=True).fit().transform(images).reshape(-1, 128)
    chunks = [{"sift": c} for c in np.array_split(descriptors, max(2, n_images // 256))]
    mean, components = fit_pca(InMemoryChunks(chunks), "sift", COMPONENTS)
    projection = (mean, components)
    start = fit_kmeans(InMemoryChunks(chunks), "sift", projection, gaussians,
                       n_descriptors=len(descriptors), max_iter=10, tol=1e-4,
                       random_state=0)  # fmt: skip
    X = project(descriptors, projection).astype(np.float64)
    initial = fit_gmm(InMemoryChunks(chunks), "sift", projection, start, max_iter=0, tol=0.0)
    em_config = {"descriptors": len(X), "dim": COMPONENTS, "gaussians": gaussians,
                 "iterations": iterations}  # fmt: skip
    load = _load()
    sk_runs = [sklearn_em(X, initial, iterations) for _ in range(repeats)]
    sk_likelihood = sk_runs[-1][1]
    out.append(
        record("EM iteration, scikit-learn GaussianMixture (1 process)",
               [seconds for seconds, _ in sk_runs], "s", log_likelihood=sk_likelihood,
               blas_threads=_blas_threads(), **em_config, **load),
    )  # fmt: skip
    peers = (*loops, lambda: sklearn_em(X, initial, iterations)[0])

    if ctx.external_cluster:
        ctx.log("describe-speed: the cluster arms start LocalClusters of their own; left out")
    elif ctx.scale == "tiny":
        # The toy run: the cluster arms once, on the suite's own LocalCluster (no cluster of
        # their own to start and grow), as many workers as it has.
        with Client(ctx.scheduler) as client:
            workers = len(client.scheduler_info(n_workers=-1)["workers"])
            out += _on_workers(client, workers, images, chunks, projection, start, iterations,
                               peers, sk_likelihood, repeats, config, em_config)  # fmt: skip
    else:
        # One LocalCluster, grown from 1 worker to 2 (one start less at tiny scale).
        with connect(quiet=True, n_workers=1) as client:
            for workers in (1, 2):
                client.cluster.scale(workers)
                client.wait_for_workers(workers)
                out += _on_workers(client, workers, images, chunks, projection, start,
                                   iterations, peers, sk_likelihood, repeats, config,
                                   em_config)  # fmt: skip

    out += gist_against_its_ffts(crops(gist_images, size=GIST_SIZE), repeats)

    local = project(descriptors, projection).reshape(n_images, -1, COMPONENTS)[:fv_images]
    ours, theirs = fv_rates(local, initial, repeats)
    out.append(
        record("Fisher vector encoding vs skimage fisher_vector (1 process)", ours,
               "images/s", theirs, peer="skimage.feature.fisher_vector, per image",
               target=TARGETS["fv"], images=len(local), gaussians=gaussians, dim=COMPONENTS,
               **_load()),
    )  # fmt: skip
    return out


def gist_against_its_ffts(images: np.ndarray, repeats: int) -> list[dict]:
    """``gist`` (`DESCRIPTORS`: 32 filters at 128×128, padded to 192) in this process on one
    thread, beside the floor: the same FFTs alone in the same run — one forward 2-D transform of
    each padded image, then per filter the inverse along its 192 rows and along the 128 columns
    kept — on complex64 slices of the descriptor's size, with nothing else computed; the two in
    turn, ``repeats`` rounds."""
    from imgscale.pipeline.describe import DESCRIPTORS

    gist = DESCRIPTORS["gist"]().fit()
    bank = gist._bank()
    with threadpool_limits(limits=1):
        gist.transform(images[:2])  # the filter bank is built once, before the clock
        load = _load()
        ours, floor = interleaved(
            lambda: _timed(lambda: len(gist.transform(images)))[0],
            lambda: _timed(lambda: _ffts_only(images, bank.n_filters, bank.boundary_extension,
                                              bank.slice_rows))[0],
            repeats=repeats,
        )  # fmt: skip
    return [
        record("GIST-512 (128×128) vs its FFTs alone (1 process, 1 thread)", ours, "images/s",
               floor, peer="the same transforms alone, complex64, scipy.fft, same run (target "
               "ratio ≥ 0.5)", images=len(images),
               floor_gflops=statistics.median(floor) * _fft_flops(bank) / 1e9, **load),
    ]  # fmt: skip


def _fft_flops(bank: Any) -> float:
    """The floor's FFTs of one image in the usual count, 5 n log2 n a length-n complex
    transform: the forward 2-D one (2n lines) and each filter's n + size inverse lines."""
    size = bank.size
    n = size + 2 * bank.boundary_extension
    return float((2 * n + bank.n_filters * (n + size)) * 5 * n * np.log2(n))


def _ffts_only(images: np.ndarray, n_filters: int, pad: int, slice_rows: int) -> int:
    size = images.shape[1]
    crop = slice(pad, pad + size)
    for start in range(0, len(images), slice_rows):
        x = np.pad(images[start : start + slice_rows].astype(np.float32), ((0, 0), (pad, pad),
                   (pad, pad)), mode="symmetric")  # fmt: skip
        spectrum = scipy.fft.fft2(x, workers=1)
        for _ in range(n_filters):
            rows = scipy.fft.ifft(spectrum, axis=-1, workers=1)[..., crop]
            scipy.fft.ifft(rows, axis=-2, workers=1, overwrite_x=True)
    return len(images)


def crops(n: int, seed: int = 0, size: int = SIZE) -> np.ndarray:
    """``n`` grey ``size`` × ``size`` crops of scikit-learn's two sample photos (uint8)."""
    from PIL import Image
    from sklearn.datasets import load_sample_images

    photos = [np.asarray(Image.fromarray(p).convert("L")) for p in load_sample_images().images]
    rng = np.random.default_rng(seed)
    out = np.empty((n, size, size), np.uint8)
    for i in range(n):
        photo = photos[i % 2]
        y, x = rng.integers(0, np.array(photo.shape) - size)
        out[i] = photo[y : y + size, x : x + size]
    return out


def opencv_loop(images: np.ndarray, threads: int | None = None) -> int:
    """Dense SIFT of every image by OpenCV called once an image, on ``threads`` OpenCV threads
    (default: as OpenCV sets them): descriptors computed."""
    return opencv_peer.opencv_loop(images, _grid_keypoints(), threads)


def _opencv_loops(images: np.ndarray) -> tuple[Callable[[], float], ...]:
    """The dense-SIFT peers, each a measure of its descriptors a second: the OpenCV loop as
    OpenCV sets its threads, on one thread, and on one thread in 2 processes at once."""
    return (
        lambda: _timed(lambda: opencv_loop(images))[0],
        lambda: _timed(lambda: opencv_loop(images, threads=1))[0],
        lambda: opencv_processes(images, 2)[0],
    )


def opencv_processes(images: np.ndarray, processes: int) -> tuple[float, float]:
    """(descriptors a second, seconds) of ``processes`` plain processes running the one-thread
    OpenCV loop at once, each over its share of ``images``: the cores' limit for this call."""
    count, seconds = opencv_peer.in_processes(images, _grid_keypoints(), processes)
    return count / seconds, seconds


def _grid_keypoints() -> np.ndarray:
    """The grid's patches as the OpenCV keypoints `DenseSift` describes."""
    return grid_keypoints(patch_grid(SIZE, SIZE, (PATCH,), STEP))


def _describe_sift(images: np.ndarray) -> np.ndarray:
    """RootSIFT of a task's images, kept on the worker (runs there)."""
    return DenseSift((PATCH,), STEP, root=True).fit().transform(images)


def _on_workers(
    client: Any,
    workers: int,
    images: np.ndarray,
    chunks: list[dict],
    projection: tuple[np.ndarray, np.ndarray],
    start: Any,
    iterations: int,
    peers: tuple[Callable[[], float], ...],
    sk_likelihood: float,
    repeats: int,
    config: dict,
    em_config: dict,
) -> list[dict]:
    """Dense SIFT and the EM iterations on ``client``'s ``workers`` workers, in turn with their
    peers (``peers``: the three OpenCV loops' descriptors a second, scikit-learn's seconds an
    EM iteration), ``repeats`` rounds."""
    from distributed import wait

    targets = {"sift": {}, "sift-limit": {}, "em": {}}
    if workers == 2:  # the targets are for 2 workers
        targets = {name: {"target": TARGETS[name]} for name in targets}

    # As ingest shares work out: a few tasks a thread, the last ones short beside the whole, and
    # each long beside the scheduler's and the client's work for it, which share the cores.
    parts = client.scatter(np.array_split(images, TASKS_PER_THREAD_AT_LEAST * workers))
    # Untimed: imports and OpenCV's first call on each worker.
    wait(client.map(_describe_sift, parts[:workers], pure=False))

    def sift() -> int:
        futures = client.map(_describe_sift, parts, pure=False)
        wait(futures)  # the descriptors stay on the workers
        for future in futures:
            if future.status == "error":
                future.result()  # raises the task's error
        return len(images) * len(_grid_keypoints())

    held = ClusterChunks(client, client.scatter(chunks))
    fit_gmm(held, "sift", projection, start, max_iter=1, tol=-np.inf)  # untimed warm-up
    fitted = {}

    def em() -> float:
        began = time.perf_counter()
        fitted["gmm"] = fit_gmm(held, "sift", projection, start, max_iter=iterations, tol=-np.inf)
        # `iterations` E+M passes and the final pass that scores the last parameters.
        return (time.perf_counter() - began) / (iterations + 1)

    load = _load()
    *loop_rates, sk_seconds, rate, per_iteration = interleaved(
        *peers, lambda: _timed(sift)[0], em, repeats=repeats
    )
    gmm = fitted["gmm"]
    return [
        record(f"dense SIFT, {workers} worker(s) vs OpenCV loop", rate, "descriptors/s",
               loop_rates[0], peer="cv2 SIFT compute in a loop, 1 process", workers=workers,
               **targets["sift"], **config, **load),
        record(f"dense SIFT, {workers} worker(s) vs OpenCV loop on 1 thread", rate,
               "descriptors/s", loop_rates[1],
               peer="cv2 SIFT compute in a loop, 1 process, 1 OpenCV thread", workers=workers,
               **config, **load),
        record(f"dense SIFT, {workers} worker(s) vs OpenCV loop in 2 processes", rate,
               "descriptors/s", loop_rates[2],
               peer="cv2 SIFT compute in a loop on 1 thread, 2 processes at once (the cores' "
               "limit)", workers=workers, **targets["sift-limit"], **config, **load),
        record(f"EM iteration, {workers} worker(s) vs scikit-learn",
               [1 / seconds for seconds in per_iteration], "iterations/s",
               [1 / seconds for seconds in sk_seconds], peer="sklearn GaussianMixture E+M step",
               seconds_per_iteration=statistics.median(per_iteration),
               log_likelihood=float(gmm.log_likelihood), peer_log_likelihood=sk_likelihood,
               workers=workers, **targets["em"], **em_config, **load),
    ]  # fmt: skip


def sklearn_em(X: np.ndarray, initial: Any, iterations: int) -> tuple[float, float]:
    """Seconds an iteration of scikit-learn's diagonal GaussianMixture on X from ``initial``'s
    parameters (its E and M steps, as ``fit`` runs them), and the mean log-likelihood after."""
    from sklearn.mixture import GaussianMixture

    gm = GaussianMixture(
        len(initial.weights), covariance_type="diag", reg_covar=1e-9, max_iter=iterations,
        weights_init=initial.weights, means_init=initial.means,
        precisions_init=1 / initial.variances,
    )  # fmt: skip
    gm._initialize(X, None)  # the given parameters, as fit starts from them
    began = time.perf_counter()
    for _ in range(iterations):
        _, log_resp = gm._e_step(X)
        gm._m_step(X, log_resp)
    seconds = (time.perf_counter() - began) / iterations
    return seconds, float(gm.score(X))


def fv_rates(local: np.ndarray, gmm: Any, repeats: int) -> tuple[list[float], list[float]]:
    """Images a second of `fisher_vectors` (FV_SLICE images a call) and of skimage's
    ``fisher_vector`` (one image a call), improved Fisher vectors of the same descriptors; the
    two in turn, ``repeats`` rounds."""
    from skimage.feature import fisher_vector
    from sklearn.mixture import GaussianMixture

    sk = GaussianMixture(len(gmm.weights), covariance_type="diag")
    sk.weights_, sk.means_, sk.covariances_ = gmm.weights, gmm.means, gmm.variances
    sk.precisions_cholesky_ = 1 / np.sqrt(gmm.variances)

    def ours() -> int:
        for start in range(0, len(local), FV_SLICE):
            fisher_vectors(local[start : start + FV_SLICE], gmm.weights, gmm.means, gmm.variances)
        return len(local)

    def theirs() -> int:
        for descriptors in local:
            fisher_vector(descriptors, sk, improved=True)
        return len(local)

    fisher_vectors(local[:FV_SLICE], gmm.weights, gmm.means, gmm.variances)  # compiles (numba)
    fisher_vector(local[0], sk, improved=True)
    return interleaved(lambda: _timed(ours)[0], lambda: _timed(theirs)[0], repeats=repeats)


def _timed(run: Callable[[], int]) -> tuple[float, float]:
    """(items a second, seconds) of ``run()``, which returns the items it processed."""
    began = time.perf_counter()
    items = run()
    seconds = time.perf_counter() - began
    return items / seconds, seconds


def _load() -> dict[str, float]:
    return {"load_1min": os.getloadavg()[0]}


def _blas_threads() -> int:
    """Threads the BLAS behind numpy (and scikit-learn's products) runs in this process."""
    from threadpoolctl import threadpool_info

    return max((pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"),
               default=1)  # fmt: skip


def _opencv_threads() -> int:
    import cv2

    return cv2.getNumThreads()
