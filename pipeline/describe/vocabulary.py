"""Vocabularies of local descriptors learned by streaming passes: PCA, k-means, diagonal GMM.

The local descriptors of a sample of images are never gathered in one place: they stay in
chunks (on the Dask workers that computed them, or in a list here), and every pass maps a pure
numpy kernel over the chunks and adds up what it returns — counts, sums and sums of squares of
the descriptors (assigned to their nearest centre for k-means, weighted by their
responsibilities for EM), and the log-likelihood — a few K × d arrays a chunk. One k-means
(Lloyd) iteration and one EM iteration is one pass; PCA is one pass (sum and Gram matrix).
Sums are accumulated in float64. An EM pass computes in float32 within a chunk (the descriptors
are float32): its two products and the exponential are most of a pass and run about twice as
fast, and the chunk's statistics differ from float64 ones by a few parts in a million.

A vocabulary of a hundred EM passes over millions of descriptors runs for many minutes:
`watch_passes` lets a caller (the jobs layer's progress line) see each `FitPass` as it ends.

`DescriptorChunks` is the door: ``chunks.map(kernel, *shared)`` returns ``[kernel(chunk,
*shared) for chunk in chunks]``, where a chunk maps a channel name ("sift", "color") to float32
local descriptors (m, d). `InMemoryChunks` is that list in this process; ``jobs.fit_vocabulary``
keeps the chunks on the cluster.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import numpy as np
from sklearn.cluster import kmeans_plusplus
from sklearn.utils import check_random_state

from imgscale.pipeline.watch import Watch

Chunk = dict[str, np.ndarray]
# A linear map applied to a chunk's descriptors before a kernel: (mean (d,), components (k, d)).
Projection = tuple[np.ndarray, np.ndarray] | None
# Descriptors per k-means centre drawn for the k-means++ seeding (a small sample, gathered).
SEED_ROWS_PER_CENTRE = 20
# Each dimension's variances are floored at this fraction of the descriptors' variance along it
# (an empty or collapsing Gaussian would otherwise drive the log-likelihood to infinity). Per
# dimension: after PCA the last axes' variance can be a thousandth of the mean one's, and a floor
# from the mean would hold every Gaussian wider than the data along them.
VARIANCE_FLOOR = 1e-3


class FitPass(NamedTuple):
    """One pass of a vocabulary fit, ended: the channel; the stage ("PCA", "k-means", "EM"); its
    iteration of at most ``max_iter`` (the stage may stop before); and the stage's measure of
    convergence (k-means: the squared centre moves summed over the centres, over the
    descriptors' mean variance, which stops it below ``tol``; EM: the mean log-likelihood of a
    descriptor; PCA: None)."""

    channel: str
    stage: str
    iteration: int
    max_iter: int
    figure: float | None


_passes: Watch[FitPass] = Watch("vocabulary passes")


def watch_passes(watcher: Callable[[FitPass], None]) -> AbstractContextManager[None]:
    """Call ``watcher`` with every `FitPass` a vocabulary fit ends in this context."""
    return _passes.watching(watcher)


class DescriptorChunks(Protocol):
    def map(self, kernel: Callable, *shared: object) -> list:
        """``[kernel(chunk, *shared) for chunk in self]``, wherever the chunks are."""


@dataclass
class InMemoryChunks:
    """Chunks held in this process (tests, `fit` on a numpy batch of images)."""

    chunks: list[Chunk]

    def map(self, kernel: Callable, *shared: object) -> list:
        return [kernel(chunk, *shared) for chunk in self.chunks]


def project(X: np.ndarray, projection: Projection) -> np.ndarray:
    """Descriptors (..., d) through ``projection`` (..., k), float32; as they are without one."""
    if projection is None:
        return X
    mean, components = projection
    return ((X - mean.astype(np.float32)) @ components.T.astype(np.float32)).astype(np.float32)


# --- per-chunk kernels: pure numpy, small results -------------------------------------------


def chunk_moments(chunk: Chunk, channel: str) -> tuple[int, np.ndarray, np.ndarray]:
    """(rows, Σx, ΣxxT) of a chunk's descriptors, float64."""
    X = chunk[channel].astype(np.float64)
    return len(X), X.sum(axis=0), X.T @ X


def chunk_sample(chunk: Chunk, channel: str, projection: Projection, fraction: float, seed: int):
    """A random ``fraction`` of a chunk's (projected) descriptors, at least one row. Every chunk
    draws with the same ``seed``: rows at random positions of each chunk, reproducible however
    the chunks are scheduled."""
    X = chunk[channel]
    rng = np.random.default_rng(seed)
    count = min(len(X), max(1, round(fraction * len(X))))
    return project(X[np.sort(rng.choice(len(X), count, replace=False))], projection)


def nearest(X: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """Index of the nearest centre (squared Euclidean distance) of each row of X."""
    X = np.asarray(X, np.float32)
    c = centres.astype(np.float32)
    # ‖x − c‖² = ‖x‖² − 2 x·c + ‖c‖²; ‖x‖² is the same for every centre.
    return np.argmin((c * c).sum(axis=1) - 2 * (X @ c.T), axis=1)


def chunk_kmeans_stats(
    chunk: Chunk, channel: str, projection: Projection, centres: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Counts (K,), sums (K, d) and sums of squares (K, d) of the descriptors assigned to each
    centre, float64."""
    X = project(chunk[channel], projection)
    labels = nearest(X, centres)
    K, d = centres.shape
    counts = np.bincount(labels, minlength=K).astype(np.float64)
    order = np.argsort(labels, kind="stable")
    starts = np.searchsorted(labels[order], np.arange(K))
    Xs = X[order].astype(np.float64)
    sums, squares = np.zeros((K, d)), np.zeros((K, d))
    filled = counts > 0
    if len(X):
        sums[filled] = np.add.reduceat(Xs, starts[filled], axis=0)
        squares[filled] = np.add.reduceat(Xs * Xs, starts[filled], axis=0)
    return counts, sums, squares


def moments(X: np.ndarray, dtype: type = np.float64) -> np.ndarray:
    """[x, x²] of every row of X (m, d): (m, 2d) in ``dtype``, what both EM steps multiply."""
    X = np.asarray(X, dtype)
    return np.hstack([X, X * X])


def log_joint(X: np.ndarray, weights, means, variances) -> np.ndarray:
    """log(w_k · N(x | μ_k, diag σ²_k)) of every row of X (m, d) and Gaussian k: (m, K), float64."""
    return _log_joint(moments(X), weights, means, variances)


def _log_joint(XX: np.ndarray, weights, means, variances) -> np.ndarray:
    """`log_joint` of rows given as their `moments` [x, x²]: one product.

    −½ Σ_d (x − μ)² / σ² = x · (μ/σ²) − ½ x² · (1/σ²) − ½ Σ_d μ² / σ²: the two row terms are one
    (m, 2d) × (2d, K) product, the rest a constant a Gaussian; in the moments' precision.
    """
    precision = 1 / variances
    coefficients = np.hstack([means * precision, -0.5 * precision]).T
    constant = np.log(weights) - 0.5 * (
        means.shape[1] * np.log(2 * np.pi)
        + np.log(variances).sum(axis=1)
        + (means * means * precision).sum(axis=1)
    )
    joint = XX @ coefficients.astype(XX.dtype)
    joint += constant.astype(XX.dtype)
    return joint


def responsibilities(X: np.ndarray, weights, means, variances) -> tuple[np.ndarray, np.ndarray]:
    """Posteriors γ (m, K) of the Gaussians for each row, and each row's log-likelihood (m,)."""
    return _responsibilities(moments(X), weights, means, variances)


def _responsibilities(XX: np.ndarray, weights, means, variances) -> tuple[np.ndarray, np.ndarray]:
    """`responsibilities` of rows given as their `moments`.

    One exp of the joint, shifted by its row maximum, gives both: γ = e / Σe and log p(x) =
    max + log Σe (``scipy.special.logsumexp`` then a second exp took longer than the product).
    """
    joint = _log_joint(XX, weights, means, variances)
    top = joint.max(axis=1, keepdims=True)
    joint -= top
    gamma = np.exp(joint, out=joint)
    total = gamma.sum(axis=1, keepdims=True)
    gamma /= total
    return gamma, (top + np.log(total))[:, 0]


def chunk_gmm_stats(chunk: Chunk, channel: str, projection: Projection, weights, means, variances):
    """Σγ (K,), Σγx (K, d), Σγx² (K, d) and the log-likelihood Σ log p(x), float64.

    The rows' [x, x²] are formed once, in float32: the E-step's product and the M-step's sums
    are one matrix product each; the chunk's sums are returned in float64.
    """
    XX = moments(project(chunk[channel], projection), np.float32)
    gamma, row_likelihood = _responsibilities(XX, weights, means, variances)
    # [x, x²]ᵀγ, not γᵀ[x, x²]: OpenBLAS runs the (K × m)(m × 2d) product far slower on
    # several threads.
    sums = (XX.T @ gamma).T.astype(np.float64)
    d = XX.shape[1] // 2
    return (
        gamma.sum(axis=0, dtype=np.float64),
        sums[:, :d],
        sums[:, d:],
        float(row_likelihood.sum(dtype=np.float64)),
    )


def _add(parts: list) -> tuple:
    """Element-wise sum of the kernels' result tuples."""
    return tuple(sum(values[1:], values[0]) for values in zip(*parts, strict=True))


# --- fits: one pass per statistic -------------------------------------------------------------


def fit_pca(chunks: DescriptorChunks, channel: str, n_components: int) -> tuple[np.ndarray, ...]:
    """Mean (d,) and the top ``n_components`` principal axes (k, d) of a channel, one pass.

    Paper 002 §5.1: local descriptors are projected to 64-D by PCA before the GMM (the diagonal
    covariances then fit the decorrelated dimensions better).
    """
    n, total, gram = _add(chunks.map(chunk_moments, channel))
    if n < 2:
        raise ValueError(f"{channel}: {n} local descriptors; expected at least 2 for a PCA")
    if n_components > len(total):
        raise ValueError(
            f"{channel}: {n_components} PCA components asked of {len(total)}-D descriptors"
        )
    _passes.report(FitPass(channel, "PCA", 1, 1, None))
    mean = total / n
    covariance = gram / n - np.outer(mean, mean)
    eigenvalues, vectors = np.linalg.eigh(covariance)
    top = np.argsort(eigenvalues)[::-1][:n_components]
    return mean, vectors[:, top].T.copy()


@dataclass
class KMeansResult:
    centres: np.ndarray
    counts: np.ndarray
    sums: np.ndarray
    squares: np.ndarray
    n_iter: int


def fit_kmeans(
    chunks: DescriptorChunks,
    channel: str,
    projection: Projection,
    n_clusters: int,
    *,
    n_descriptors: int,
    max_iter: int,
    tol: float,
    random_state,
) -> KMeansResult:
    """Lloyd's k-means over every chunk's (projected) descriptors, one pass an iteration, seeded
    by k-means++ on a sample of `SEED_ROWS_PER_CENTRE` descriptors a centre.

    Stops when the centres' squared moves, summed over the centres, are at most ``tol`` times
    the descriptors' mean variance: scikit-learn's ``KMeans`` criterion (its ``tol``), which
    holds every centre and not only the largest move to it. A centre left without descriptors is
    moved to a random seeding row. The statistics returned are those of the final centres.
    """
    rng = check_random_state(random_state)
    if n_descriptors < n_clusters:
        raise ValueError(
            f"{channel}: {n_descriptors} local descriptors for {n_clusters} centres; "
            "expected at least one a centre (sample more images)"
        )
    fraction = min(1.0, SEED_ROWS_PER_CENTRE * n_clusters / n_descriptors)
    seeds = rng.randint(2**31, size=1)[0]
    parts = chunks.map(chunk_sample, channel, projection, fraction, int(seeds))
    sample = np.concatenate(parts).astype(np.float64)
    centres, _ = kmeans_plusplus(sample, n_clusters, random_state=rng)
    spread = sample.var(axis=0).mean()
    n_iter = 0
    while n_iter < max_iter:
        n_iter += 1
        counts, sums, squares = _add(chunks.map(chunk_kmeans_stats, channel, projection, centres))
        filled = counts > 0
        moved = centres.copy()
        moved[filled] = sums[filled] / counts[filled, None]
        moved[~filled] = sample[rng.choice(len(sample), int((~filled).sum()), replace=False)]
        shift = ((moved - centres) ** 2).sum()
        centres = moved
        _passes.report(FitPass(channel, "k-means", n_iter, max_iter, float(shift / spread)))
        if shift <= tol * spread:
            break
    counts, sums, squares = _add(chunks.map(chunk_kmeans_stats, channel, projection, centres))
    return KMeansResult(centres, counts, sums, squares, n_iter)


@dataclass
class GaussianMixture:
    weights: np.ndarray
    means: np.ndarray
    variances: np.ndarray
    log_likelihood: float  # mean log p(x) per descriptor, at these parameters
    n_iter: int


def fit_gmm(
    chunks: DescriptorChunks,
    channel: str,
    projection: Projection,
    start: KMeansResult,
    *,
    max_iter: int,
    tol: float,
) -> GaussianMixture:
    """EM for a diagonal Gaussian mixture, initialised from k-means (weights from the cluster
    sizes, means at the centres, variances those of the clusters), one pass an iteration.

    Stops when the mean log-likelihood gains less than ``tol`` (scikit-learn's criterion), or
    after ``max_iter`` passes. Paper 002 §5.1; the design doc's finding: a GMM that has
    converged gains much over a few iterations.
    """
    n = start.counts.sum()
    mean = start.sums.sum(axis=0) / n
    spread = start.squares.sum(axis=0) / n - mean**2
    # A constant dimension (more PCA axes than the descriptors span) still gets a floor above 0.
    floor = VARIANCE_FLOOR * np.maximum(spread, 1e-6 * spread.mean())
    empty = (start.centres, np.broadcast_to(floor, start.centres.shape))
    weights, means, variances = _m_step(start.counts, start.sums, start.squares, floor, empty)
    previous = -np.inf
    for iteration in range(1, max_iter + 1):
        stats = _add(chunks.map(chunk_gmm_stats, channel, projection, weights, means, variances))
        likelihood = stats[3] / n
        _passes.report(FitPass(channel, "EM", iteration, max_iter, float(likelihood)))
        if likelihood - previous < tol:
            return GaussianMixture(weights, means, variances, likelihood, iteration - 1)
        previous = likelihood
        weights, means, variances = _m_step(*stats[:3], floor, (means, variances))
    stats = _add(chunks.map(chunk_gmm_stats, channel, projection, weights, means, variances))
    return GaussianMixture(weights, means, variances, stats[3] / n, max_iter)


def _m_step(s0, s1, s2, floor, previous) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Weights, means and variances from Σγ, Σγx, Σγx²; a Gaussian without mass keeps its
    previous mean and variance (at the floor's weight)."""
    old_means, old_variances = previous
    alive = s0 > 1e-10 * s0.sum()
    means, variances = old_means.astype(np.float64), old_variances.astype(np.float64)
    means[alive] = s1[alive] / s0[alive, None]
    variances[alive] = s2[alive] / s0[alive, None] - means[alive] ** 2
    weights = np.maximum(s0, 1e-10 * s0.sum())
    return weights / weights.sum(), means, np.maximum(variances, floor)
