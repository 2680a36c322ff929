"""Product quantization, the codec: train on a sample, encode and decode chunks, row statistics.

A vector of dimension D is cut into M sub-vectors of D/M dimensions; each is replaced by the
index of its nearest of 256 centroids learned by k-means on that sub-space, so a row costs M bytes
instead of 4·D (paper 002 §4.1: 8-dim sub-vectors, 256 centroids, one byte per code; Jégou,
Douze & Schmid, "Product quantization for nearest neighbor search", PAMI 2011). An optional random
orthogonal rotation applied first spreads variance evenly over the sub-spaces.

Training and encoding use faiss (``ProductQuantizer`` k-means; ``knn`` per sub-space to encode):
C++ with BLAS and SIMD distance kernels. Decoding is a numpy gather. The kernels on codes that
never decode them (class sums, ADC search) are `pipeline.pq.on_codes`.

A PQ store keeps the codes and this codec's arrays. The storage layer, which imports no pipeline
module, finds this class by the ``imgscale.codecs`` entry point ``pq`` (pyproject.toml) and uses
it through its `RowCodec` protocol (storage/row_codecs.py): `encoding`, `code_width`, `dim`,
`stored`, `stored_arrays`, `stored_layout`, `describe`, `from_stored`, `check`, `encode` and
`decode`. Classifiers ask it for `row_stats`, the class sums of the rows its codes decode to
(`pipeline.coded_rows.RowStatsOnCodes`).
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

if TYPE_CHECKING:
    from imgscale.pipeline.reductions import RowStats

# Centroids per sub-quantizer: one for every value of a uint8 code.
KSUB = np.iinfo(np.uint8).max + 1
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

    # The name a store records for rows kept as this codec's codes.
    encoding: ClassVar[str] = "pq"

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

    @property
    def code_width(self) -> int:
        """Codes per row: one byte per sub-quantizer."""
        return self.m

    # -- training -------------------------------------------------------------------------

    @classmethod
    def train(
        cls, sample: np.ndarray, m: int, *, rotate: bool = False, seed: int = 0, niter: int = 25
    ) -> PQCodec:
        """k-means (faiss, ``niter`` Lloyd iterations) of each of the M sub-spaces of ``sample``.

        Its nearest-centroid searches run by BLAS products from the first query (`_blas_search`):
        with faiss's default settings the k-means of a few thousand rows (the sample of a 64K-D
        codebook's 8,192 sub-quantizers) searches without BLAS and is many times slower
        (``imgscale bench pq``: codec training per sub-space).
        """
        import faiss

        sample = np.ascontiguousarray(sample, dtype=np.float32)
        n, dim = sample.shape
        check_m(dim, m)
        check_training_rows(n, stacklevel=3)
        if not np.isfinite(sample).all():
            raise ValueError("PQ training: sample has NaN/inf values; expected finite rows")
        rotation = random_rotation(dim, seed) if rotate else None
        if rotation is not None:
            sample = sample @ rotation
        pq = faiss.ProductQuantizer(dim, m, 8)
        pq.cp.niter = niter
        pq.cp.seed = seed
        # We warned above with our threshold; faiss would print its own per sub-quantizer.
        pq.cp.min_points_per_centroid = 1
        with _blas_search():
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
        `_one_thread_blas_search`): the same codes as ``ProductQuantizer.compute_codes``, which
        computes each sub-vector's 256 distances directly and is slower on one thread
        (``imgscale bench pq``). The search's distances sum to the error (rotation preserves it)
        without decoding the rows.
        """
        import faiss

        X = np.ascontiguousarray(X, dtype=np.float32)
        if X.ndim != 2 or X.shape[1] != self.dim:
            raise ValueError(f"PQ encode: rows of shape {X.shape}; expected (n, {self.dim})")
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

    def encode_with_sums(self, X: np.ndarray) -> tuple[np.ndarray, float, np.ndarray, float]:
        """(codes, Σ‖x − x̂‖², Σx, Σ‖x‖²) of one chunk; the sums give MSE relative to variance.

        The errors are the encoder's nearest-centroid distances (no decoded copy of the chunk);
        row norms are in float32 (D terms each) and summed over rows in float64; Σx is summed in
        float32 over blocks of 1,024 rows, then in float64: within a few float32 ulps of a
        float64 sum over all rows.
        """
        codes, errors = self.encode_with_errors(X)
        return (
            codes,
            float(errors.sum(dtype=np.float64)),
            _column_sums(X),
            float(np.einsum("nd,nd->n", X, X).sum(dtype=np.float64)),
        )

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

    def row_stats(self, codes: Any, y_index: Any, n_classes: int) -> RowStats:
        """RowStats (class sums and counts, feature sum) of the rows numpy or row-chunked dask
        ``codes`` decode to, in one pass that decodes none (`pipeline.pq.on_codes`)."""
        # Imported here: a store opened to read or describe its rows needs neither numba nor dask.
        from imgscale.pipeline.pq.on_codes import code_row_stats

        return code_row_stats(codes, y_index, self.codebook, n_classes, self.rotation)

    # -- what a store keeps ---------------------------------------------------------------

    def stored(self) -> dict[str, Any]:
        """The parameters a store records beside the codes (JSON)."""
        return {"m": self.m, "ksub": KSUB, "dsub": self.dsub, "rotation": self.rotation is not None}

    def stored_arrays(self) -> dict[str, np.ndarray]:
        """The arrays a store keeps beside the codes: codebook, and rotation if any."""
        arrays = {"codebook": self.codebook}
        if self.rotation is not None:
            arrays["rotation"] = self.rotation
        return arrays

    @staticmethod
    def stored_layout(params: Any, dim: int) -> tuple[int, dict[str, tuple[int, ...]]]:
        """(codes per row, shape of each array) of a store of ``params`` (as `stored` wrote
        them); ValueError if the parameters do not describe a codec of dimension ``dim``."""
        ok = (
            isinstance(params, dict)
            and isinstance(params.get("m"), int)
            and params.get("ksub") == KSUB
            and isinstance(params.get("dsub"), int)
            and params["m"] * params["dsub"] == dim
        )
        if not ok:
            raise ValueError(
                f"encoding 'pq' with pq parameters {params!r}; expected "
                f"{{'m': M, 'ksub': {KSUB}, 'dsub': D/M}} with M·dsub = dim {dim}"
            )
        shapes = {"codebook": (params["m"], KSUB, params["dsub"])}
        if params.get("rotation"):
            shapes["rotation"] = (dim, dim)
        return params["m"], shapes

    @staticmethod
    def describe(params: dict[str, Any]) -> dict[str, Any]:
        """`imgscale info` keys of a store of ``params``."""
        return {
            "pq_m": params["m"],
            "pq_dsub": params["dsub"],
            "pq_rotation": bool(params.get("rotation")),
        }

    @classmethod
    def from_stored(cls, params: dict[str, Any], arrays: dict[str, np.ndarray]) -> PQCodec:
        """The codec a store kept (`stored`, `stored_arrays`), checked."""
        codec = cls.__new__(cls)
        codec.codebook = arrays["codebook"]
        codec.rotation = arrays.get("rotation")
        codec.check(codec.dim, m=params["m"])
        return codec

    def check(self, dim: int, m: int | None = None) -> None:
        """ValueError unless the codebook is (M, 256, D/M) float32 and finite and the rotation
        (D, D) float32, both matching ``dim``."""
        cb = self.codebook
        good = (
            cb.dtype == np.float32
            and cb.ndim == 3
            and cb.shape[1] == KSUB
            and cb.shape[0] * cb.shape[2] == dim
            and (m is None or cb.shape[0] == m)
        )
        if not good:
            expected = f"({m}, {KSUB}, {dim // m})" if m else f"(M, {KSUB}, {dim}/M)"
            raise ValueError(
                f"codebook of shape {cb.shape} {cb.dtype}; expected {expected} float32 for D={dim}"
            )
        if not np.isfinite(cb).all():
            raise ValueError("codebook has NaN/inf values; expected finite centroids")
        rot = self.rotation
        if rot is not None and (rot.dtype != np.float32 or rot.shape != (dim, dim)):
            raise ValueError(
                f"rotation of shape {rot.shape} {rot.dtype}; expected ({dim}, {dim}) float32"
            )


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
    """faiss searches on one thread, by BLAS products (`_blas_search`), restored after.

    One thread: encode tasks run one per single-threaded Dask worker (jobs/cluster/), and
    OpenMP threads on top of that would oversubscribe the cores (a per-thread setting).
    """
    import faiss

    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        with _blas_search():
            yield
    finally:
        faiss.omp_set_num_threads(threads)


@contextlib.contextmanager
def _blas_search() -> Iterator[None]:
    """faiss searches by BLAS products from the first query, in blocks of 1,024 queries,
    restored after.

    BLAS from the first query: below faiss's ``distance_compute_blas_threshold`` a search scans
    each query directly, several times slower than by BLAS: short chunks encoded slower than
    ``compute_codes``, and the k-means of a few thousand rows trained many times slower. The
    two paths also round differently, so near-tied centroids must always see the same one.
    1,024 queries a block keep the 1,024 × 256 distance block in L2 cache (faiss's default of
    4,096 does not).
    """
    import faiss

    global _search_users, _search_saved
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
        with _search_lock:
            _search_users -= 1
            if _search_users == 0:
                (
                    faiss.cvar.distance_compute_blas_threshold,
                    faiss.cvar.distance_compute_blas_query_bs,
                ) = _search_saved


def check_training_rows(n: int, stacklevel: int = 2) -> None:
    """ValueError below one training row a centroid; a warning below `MIN_TRAIN_PER_CENTROID`."""
    if n < KSUB:
        raise ValueError(
            f"PQ training: {n} rows; expected at least {KSUB} (one per centroid), "
            f"ideally {MIN_TRAIN_PER_CENTROID * KSUB}"
        )
    if n < MIN_TRAIN_PER_CENTROID * KSUB:
        warnings.warn(
            f"PQ training on {n} rows: fewer than {MIN_TRAIN_PER_CENTROID}×{KSUB} = "
            f"{MIN_TRAIN_PER_CENTROID * KSUB}; centroids will be poorly placed",
            stacklevel=stacklevel,
        )


def check_m(dim: int, m: int) -> None:
    if not isinstance(m, int | np.integer) or m < 1 or dim % m:
        raise ValueError(
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


def _column_sums(X: np.ndarray, block: int = 1024) -> np.ndarray:
    whole = len(X) // block * block
    sums = X[:whole].reshape(-1, block, X.shape[1]).sum(axis=1).sum(axis=0, dtype=np.float64)
    return sums + X[whole:].sum(axis=0, dtype=np.float64)
