"""Lloyd k-means of many small sub-spaces at once: the training of a PQ codec's sub-quantizers.

A PQ codebook of a 64K-D descriptor is 8,192 k-means of 256 centroids in 8 dimensions. Each is
tiny (an iteration over 4,096 rows is 4,096 × 256 × 8 multiply-adds), so a general k-means that
computes distances as a matrix product with an inner dimension of 8 spends its time outside the
arithmetic. `kmeans_sub_spaces` runs them all in one compiled loop, sub-space after sub-space,
on the calling thread: each row's 256 distances ‖c‖² − 2x·c (the row's own ‖x‖² does not change
which centroid is nearest) are one vectorised pass over a centroid-major copy of the codebook
(``ct[d, k]``), its arg-min two reductions (the smallest distance, then, vectorised, the first
centroid that has it).

Semantics, fixed so that a codebook does not depend on how its sub-spaces were split into
tasks:

- initialisation: the same ``k`` distinct sample rows, drawn by ``numpy.random.default_rng(seed)``,
  give every sub-space its first centroids (faiss also starts every sub-quantizer of a
  ``ProductQuantizer`` from the same seed);
- ``niter`` iterations, each an assignment of every row to its nearest centroid (lowest index on
  ties) then each centroid moved to the mean of its rows (summed in float64);
- empty clusters: each centroid left without rows, in index order, moves to the row farthest
  from the centroid it was assigned to in that iteration (squared distance computed directly;
  lowest row index on ties; each row taken once), as scikit-learn's k-means does. A row equal
  to its centroid is never taken, so the centroids that a sub-space's repeated values (all-zero
  pixels, say) would have held go where the error is; an empty centroid with no row at a
  positive distance left (fewer distinct sub-vectors than centroids) stays where it was.
  faiss instead splits a cluster drawn at random by size, scaling its coordinates by
  1 ± 1/1024: the copy of a zero centroid is the centroid itself, which on images with constant
  regions left centroids unused (reconstruction error 8–13% above this rule's on MNIST pixels).
"""

from __future__ import annotations

import numba
import numpy as np

# Sub-space dimensions up to this compile a kernel with the dimension loop fully unrolled (see
# `_unrolled`); wider sub-spaces share one kernel with a run-time dimension loop.
MAX_UNROLLED_DSUB = 64
# Flags for the distance kernel: no NaN/inf (the caller checks rows are finite), and min/max
# reductions and multiply-adds may be vectorised and fused; sums are not reassociated.
_FAST = {"nnan", "ninf", "nsz", "contract"}


def kmeans_sub_spaces(sub: np.ndarray, k: int, niter: int, seed: int) -> np.ndarray:
    """Centroids (M, k, dsub) float32 of the M sub-spaces of ``sub`` (M, n, dsub), by ``niter``
    Lloyd iterations each from the same ``k`` seeded sample rows (the module's semantics)."""
    sub = np.ascontiguousarray(sub, dtype=np.float32)
    if sub.ndim != 3:
        raise ValueError(f"k-means: sub-vectors of shape {sub.shape}; expected (M, n, dsub)")
    m, n, dsub = sub.shape
    if not 0 < k <= n:
        raise ValueError(f"k-means: k={k} centroids for {n} rows; expected 1 <= k <= {n}")
    if niter < 0:
        raise ValueError(f"k-means: niter={niter}; expected >= 0")
    init = initial_rows(n, k, seed)
    centroids = np.empty((m, k, dsub), np.float32)
    _lloyd(sub, init, niter, _unrolled(dsub), centroids)
    return centroids


def initial_rows(n: int, k: int, seed: int) -> np.ndarray:
    """The ``k`` distinct rows of ``n`` whose sub-vectors start every sub-space's k-means."""
    return np.random.default_rng(seed).choice(n, k, replace=False).astype(np.int64)


def _unrolled(dsub: int) -> tuple[int, ...]:
    """A tuple whose length the compiler knows: the kernels' dimension loop runs to its length,
    so each sub-space width up to `MAX_UNROLLED_DSUB` gets its own kernel with that loop
    unrolled and the loop over centroids vectorised; ``()`` (run-time ``dsub``) above."""
    return (0,) * dsub if dsub <= MAX_UNROLLED_DSUB else ()


@numba.njit(cache=True, nogil=True)
def _lloyd(sub, init, niter, unrolled, centroids):  # pragma: no cover
    m, n, dsub = sub.shape
    k = init.shape[0]
    ct = np.empty((dsub, k), np.float32)
    cnorm = np.empty(k, np.float32)
    codes = np.empty(n, np.int32)
    distances = np.empty(n, np.float32)
    residuals = np.empty(n, np.float64)
    sums = np.empty((k, dsub), np.float64)
    counts = np.empty(k, np.int64)
    for j in range(m):
        x = sub[j]
        c = centroids[j]
        for a in range(k):
            c[a] = x[init[a]]
        for _ in range(niter):
            _centroid_major(c, ct, cnorm)
            _search(x, ct, cnorm, unrolled, codes, distances)
            sums[:] = 0.0
            counts[:] = 0
            for i in range(n):
                a = codes[i]
                counts[a] += 1
                r = 0.0
                for d in range(dsub):
                    sums[a, d] += x[i, d]
                    r += (np.float64(x[i, d]) - c[a, d]) ** 2
                residuals[i] = r
            for a in range(k):
                if counts[a]:
                    for d in range(dsub):
                        c[a, d] = sums[a, d] / counts[a]
            _move_empty(x, c, counts, residuals)


@numba.njit(cache=True, nogil=True)
def _move_empty(x, c, counts, residuals):  # pragma: no cover
    """Move each empty cluster's centroid to the farthest row not yet taken (module docstring);
    ``residuals``: each row's squared distance to the centroid it was assigned to."""
    k = c.shape[0]
    for a in range(k):
        if counts[a]:
            continue
        far = 0
        for i in range(1, x.shape[0]):
            if residuals[i] > residuals[far]:
                far = i
        if residuals[far] <= 0.0:
            return
        c[a] = x[far]
        residuals[far] = -1.0


@numba.njit(cache=True, nogil=True)
def _centroid_major(c, ct, cnorm):  # pragma: no cover
    """``ct[d, k] = c[k, d]`` and ``cnorm[k] = ‖c[k]‖²`` (float32)."""
    k, dsub = c.shape
    for a in range(k):
        s = np.float32(0.0)
        for d in range(dsub):
            ct[d, a] = c[a, d]
            s += c[a, d] * c[a, d]
        cnorm[a] = s


@numba.njit(cache=True, nogil=True, fastmath=_FAST)
def _search(x, ct, cnorm, unrolled, nearest, best):  # pragma: no cover
    """For each row of ``x`` (n, dsub): the index of the centroid minimising ‖c‖² − 2x·c (the
    first on ties) into ``nearest`` and that value into ``best``."""
    n, dsub = x.shape
    k = ct.shape[1]
    width = len(unrolled) if len(unrolled) else dsub  # a constant where `unrolled` has a length
    xm = np.empty(width, np.float32)
    dist = np.empty(k, np.float32)
    for i in range(n):
        for d in range(width):
            xm[d] = np.float32(-2.0) * x[i, d]
        for a in range(k):
            s = cnorm[a]
            for d in range(width):
                s += xm[d] * ct[d, a]
            dist[a] = s
        low = dist[0]
        for a in range(1, k):
            low = dist[a] if dist[a] < low else low
        # The first centroid at the minimum, as a minimum of int32 candidates: a select and an
        # integer min that vectorise (a loop that stops at the first match does not).
        first = np.int32(k)
        for a in range(k):
            candidate = np.int32(a) if dist[a] == low else np.int32(k)
            first = candidate if candidate < first else first
        nearest[i] = first
        best[i] = low
