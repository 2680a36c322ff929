"""Product quantization: the codec (training, encoding, decoding) and its checks.

A vector of dimension D is cut into M sub-vectors of D/M dimensions; each is replaced by the
index of its nearest of 256 centroids learned by k-means on that sub-space, so a row costs M bytes
instead of 4·D (paper 002 §4.1: 8-dim sub-vectors, 256 centroids, one byte per code; Jégou,
Douze & Schmid, "Product quantization for nearest neighbor search", PAMI 2011). An optional random
orthogonal rotation applied first spreads variance evenly over the sub-spaces.

Training and encoding use faiss (``ProductQuantizer`` k-means; ``knn`` per sub-space to
encode): C++ with BLAS and SIMD distance kernels, and faiss is already a dependency. Decoding is a
numpy gather, so readers of a PQ store need neither faiss nor its threads. PQ stores (the codec
kept beside the codes) are `storage.pq_store`.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from imgscale.storage.errors import StoreError

KSUB = 256  # centroids per sub-quantizer: one uint8 per code
# faiss warns below 39 training points per centroid; fewer leaves centroids poorly placed.
MIN_TRAIN_PER_CENTROID = 39
DEFAULT_SAMPLE = 65_536


@dataclass
class PQCodec:
    """M sub-quantizers of 256 centroids, optionally after an orthogonal rotation.

    Attributes
    ----------
    codebook : ndarray (M, 256, D/M) float32
    rotation : ndarray (D, D) float32 or None; codes quantize ``x @ rotation``.
    """

    codebook: np.ndarray
    rotation: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.codebook = np.ascontiguousarray(self.codebook, dtype=np.float32)
        if self.rotation is not None:
            self.rotation = np.ascontiguousarray(self.rotation, dtype=np.float32)

    @property
    def m(self) -> int:
        return self.codebook.shape[0]

    @property
    def dsub(self) -> int:
        return self.codebook.shape[2]

    @property
    def dim(self) -> int:
        return self.m * self.dsub

    # -- training -------------------------------------------------------------------------

    @classmethod
    def train(
        cls, sample: np.ndarray, m: int, *, rotate: bool = False, seed: int = 0, niter: int = 25
    ) -> PQCodec:
        """k-means (faiss, ``niter`` Lloyd iterations) of each of the M sub-spaces of ``sample``."""
        import faiss

        sample = np.ascontiguousarray(sample, dtype=np.float32)
        n, dim = sample.shape
        check_m(dim, m)
        if n < KSUB:
            raise StoreError(
                f"PQ training: {n} rows; expected at least {KSUB} (one per centroid), "
                f"ideally {MIN_TRAIN_PER_CENTROID * KSUB}"
            )
        if n < MIN_TRAIN_PER_CENTROID * KSUB:
            warnings.warn(
                f"PQ training on {n} rows: fewer than {MIN_TRAIN_PER_CENTROID}×{KSUB} = "
                f"{MIN_TRAIN_PER_CENTROID * KSUB}; centroids will be poorly placed",
                stacklevel=2,
            )
        if not np.isfinite(sample).all():
            raise StoreError("PQ training: sample has NaN/inf values; expected finite rows")
        rotation = random_rotation(dim, seed) if rotate else None
        if rotation is not None:
            sample = sample @ rotation
        pq = faiss.ProductQuantizer(dim, m, 8)
        pq.cp.niter = niter
        pq.cp.seed = seed
        # We warned above with our threshold; faiss would print its own per sub-quantizer.
        pq.cp.min_points_per_centroid = 1
        pq.train(sample)
        codebook = faiss.vector_to_array(pq.centroids).reshape(m, KSUB, dim // m)
        return cls(codebook, rotation)

    # -- encode / decode ------------------------------------------------------------------

    def encode(self, X: np.ndarray) -> np.ndarray:
        """uint8 codes (n, M): nearest centroid of each sub-vector (faiss, one thread)."""
        return self.encode_with_errors(X)[0]

    def encode_with_errors(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """uint8 codes (n, M) and each row's squared reconstruction error ‖x − x̂‖² (float32).

        Each sub-space is one exhaustive k=1 search of its n sub-vectors against 256 centroids
        (faiss ``knn``: a BLAS product ‖x‖² − 2x·c + ‖c‖², then a SIMD arg-min; settings in
        `_one_thread_blas_search`). Same codes as ``ProductQuantizer.compute_codes``, which
        computes each sub-vector's 256 distances directly and is slower on one thread, so two
        single-threaded workers outrun its two threads (``imgscale bench pq``). The search's
        distances sum to the error (rotation preserves it) without decoding the rows.
        """
        import faiss

        X = np.ascontiguousarray(X, dtype=np.float32)
        if X.ndim != 2 or X.shape[1] != self.dim:
            raise StoreError(f"PQ encode: rows of shape {X.shape}; expected (n, {self.dim})")
        if self.rotation is not None:
            X = X @ self.rotation
        n = len(X)
        sub = _sub_vectors_by_space(X, self.m)
        codes = np.empty((n, self.m), np.uint8)
        errors = np.zeros(n, np.float32)
        with _one_thread_blas_search():
            for j in range(self.m):
                distances, nearest = faiss.knn(sub[j], self.codebook[j], 1)
                codes[:, j] = nearest[:, 0]
                errors += distances[:, 0]
        return codes, errors

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """float32 rows (n, D): the concatenated centroids, rotated back."""
        codes = np.asarray(codes)
        n = codes.shape[0]
        # One gather from the (M·256, D/M) table: code k of sub-quantizer j is row 256·j + k.
        index = codes.astype(np.intp)
        index += np.arange(self.m, dtype=np.intp) * KSUB
        out = np.take(self.codebook.reshape(-1, self.dsub), index, axis=0).reshape(n, self.dim)
        if self.rotation is not None:
            out = out @ self.rotation.T
        return out


def _sub_vectors_by_space(X: np.ndarray, m: int) -> np.ndarray:
    """(M, n, D/M) copy of ``X`` (n, D): each sub-space's sub-vectors contiguous, as faiss's
    search wants them. Copied ~2 MB of rows at a time so the strided reads stay in cache, which
    a ``transpose`` copy of a whole chunk does not."""
    n, dim = X.shape
    block = max(1, 2**19 // dim)
    sub = np.empty((m, n, dim // m), X.dtype)
    for start in range(0, n, block):
        rows = X[start : start + block]
        sub[:, start : start + len(rows)] = rows.reshape(len(rows), m, -1).transpose(1, 0, 2)
    return sub


# faiss's search settings are process globals: the first of concurrent encodes (threads of a
# local Dask scheduler) sets them and the last restores them, so none runs with another's restore.
_search_lock = threading.Lock()
_search_users = 0
_search_saved: tuple[int, int] = (0, 0)


@contextlib.contextmanager
def _one_thread_blas_search() -> Iterator[None]:
    """faiss searches on one thread, by BLAS products in blocks of 1,024 queries, restored after.

    One thread: encode tasks run one per single-threaded Dask worker (jobs/cluster.py), and
    OpenMP threads on top of that would oversubscribe the cores (a per-thread setting). BLAS from
    the first query: below faiss's ``distance_compute_blas_threshold`` a search scans each query
    directly, several times slower than by BLAS, which made short chunks slower than
    ``compute_codes``; and the two paths round differently, so near-tied centroids must always
    see the same one. 1,024 queries a block keep the 1,024 × 256 distance block in L2 cache
    (faiss's default of 4,096 does not).
    """
    import faiss

    global _search_users, _search_saved
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    with _search_lock:
        if _search_users == 0:
            _search_saved = (
                faiss.cvar.distance_compute_blas_threshold,
                faiss.cvar.distance_compute_blas_query_bs,
            )
            faiss.cvar.distance_compute_blas_threshold = 1
            faiss.cvar.distance_compute_blas_query_bs = 1024
        _search_users += 1
    try:
        yield
    finally:
        faiss.omp_set_num_threads(threads)
        with _search_lock:
            _search_users -= 1
            if _search_users == 0:
                (
                    faiss.cvar.distance_compute_blas_threshold,
                    faiss.cvar.distance_compute_blas_query_bs,
                ) = _search_saved


def check_m(dim: int, m: int) -> None:
    if not isinstance(m, int | np.integer) or m < 1 or dim % m:
        raise StoreError(
            f"PQ: M={m} sub-quantizers do not divide D={dim}; expected a divisor of {dim} "
            f"(e.g. {', '.join(str(d) for d in _divisors_near(dim, 8))} for ~8-dim sub-vectors)"
        )


def _divisors_near(dim: int, dsub: int) -> list[int]:
    ms = [m for m in range(1, dim + 1) if dim % m == 0]
    return sorted(ms, key=lambda m: abs(dim / m - dsub))[:3]


def random_rotation(dim: int, seed: int) -> np.ndarray:
    """A Haar-random orthogonal D x D matrix (QR of a Gaussian, signs fixed)."""
    rng = np.random.default_rng(seed)
    q, r = np.linalg.qr(rng.standard_normal((dim, dim)))
    q *= np.sign(np.diag(r))
    return q.astype(np.float32)


def sample_indices(n: int, size: int, seed: int) -> np.ndarray:
    """Sorted distinct row indices of a uniform sample (all rows if ``size >= n``)."""
    if size >= n:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size, replace=False))


def check_codec(codec: PQCodec, dim: int, where: str, m: int | None = None) -> None:
    """Codebook (M, 256, D/M) float32 finite, rotation (D, D) float32, both matching ``dim``."""
    cb = codec.codebook
    good = (
        cb.dtype == np.float32
        and cb.ndim == 3
        and cb.shape[1] == KSUB
        and cb.shape[0] * cb.shape[2] == dim
        and (m is None or cb.shape[0] == m)
    )
    if not good:
        expected = f"({m}, {KSUB}, {dim // m})" if m else f"(M, {KSUB}, {dim}/M)"
        raise StoreError(
            f"{where}: codebook of shape {cb.shape} {cb.dtype}; expected {expected} float32 "
            f"for D={dim}"
        )
    if not np.isfinite(cb).all():
        raise StoreError(f"{where}: codebook has NaN/inf values; expected finite centroids")
    rot = codec.rotation
    if rot is not None and (rot.dtype != np.float32 or rot.shape != (dim, dim)):
        raise StoreError(
            f"{where}: rotation of shape {rot.shape} {rot.dtype}; expected ({dim}, {dim}) float32"
        )
