"""Separable Laplacian eigenfunctions from 1-D marginal histograms (Fergus, Weiss & Torralba 2009).

The shared machinery of `PCALap`, `RPLap` (paper 000 Table 1) and `ALE` (paper 001 §2): rotate the
rows (s = (x − μ)R), estimate each projected dimension's marginal density by a B-bin histogram,
solve the 1-D generalised eigenproblem of paper 001 eq. 1 on the bin centres,

    (D̃ − P W̃ P) g = σ P D̂ g,   W̃ᵢⱼ = exp(−(bᵢ − bⱼ)² / 2ω²),
    D̃ = diag(colsum(P W̃ P)),  D̂ = diag(colsum(P W̃)),

keep the d eigenfunctions with the smallest σ over all dimensions (never the constant one each
dimension has, σ = 0), and embed a row by linear interpolation of each kept g at the row's
projected value (paper 000 Table 1 step 6).

Fitting is a few streaming passes, each a `pipeline.reductions.reduce_rows` tree sum: the rotation
(PCA's one pass, or none for random projections), the range of every projected dimension (min/max),
then the B-bin counts of every projected dimension. `partial_fit` adds further rows' counts with the
bin edges and rotation of the first call and re-solves the B × B problems, which take milliseconds.
The embedding of a row depends only on the fitted state, never on the other rows it comes with.

Per-chunk kernels (`chunk_projected_range`, `chunk_bin_counts`) project a sub-block with one
float32 GEMM and fold it into the range or the counts in one compiled sweep; they are tested alone
against numpy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numba
import numpy as np
import scipy.linalg
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted
from threadpoolctl import threadpool_limits

from imgscale.pipeline.compute import compute
from imgscale.pipeline.embed._base import RowTransformerMixin
from imgscale.pipeline.fitted import Shape
from imgscale.pipeline.params import Interval
from imgscale.pipeline.reductions import reduce_rows

# Rows projected at a time inside a chunk: bounds the rows × k float32 and index temporaries.
_SUB_ROWS = 4096
# Rows `_project_rows` accumulates together: 16 × k float32 stays in L1 while each row of the
# projection is applied to all of them (fewer rows reload the projection more often, more spill
# out of L1).
_TILE_ROWS = 16
# Rows projected at a time by the fit passes' sweeps: S (rows × k float32, 200 KB at k = 50)
# stays in L2 between the GEMM and the sweep, so the binning reads it from cache.
_SWEEP_ROWS = 1024

# Fergus et al.'s reference code clips each dimension's lowest and highest 2.5% of rows to the
# 2.5th/97.5th percentile before interpolating: "important for the stability of the
# semi-supervised solution" (extreme rows would otherwise get extreme eigenfunction values).
CLIP_PERCENT = 2.5


@dataclass
class ProjectedRange:
    """Row count and per-dimension min and max of projected rows; ``+`` merges two sets."""

    n_rows: int
    low: np.ndarray
    high: np.ndarray

    def __add__(self, other: ProjectedRange) -> ProjectedRange:
        return ProjectedRange(
            self.n_rows + other.n_rows,
            np.minimum(self.low, other.low),
            np.maximum(self.high, other.high),
        )


def _raise_if_not_finite(S: np.ndarray, row_start: int) -> None:
    """ValueError naming (up to 10 of) the rows of `S`, numbered from `row_start`, with a
    non-finite value."""
    if not np.isfinite(S).all():
        bad = np.flatnonzero(~np.isfinite(S).all(axis=1))[:10] + row_start
        raise ValueError(f"non-finite feature values in rows {bad.tolist()}")


@numba.njit(cache=True, nogil=True)
def _project_rows(X, projection, offset, out):  # pragma: no cover
    """``out = X @ projection − offset`` with each row's sums in one fixed order: out[i, m] adds
    X[i, j]·projection[j, m] for j = 0, 1, … in float32 (IEEE multiply, then add), then
    subtracts offset[m].

    A row's embedding must not depend on the rows it arrives with (paper 001 §3: incremental
    embedding gives what a full transform gives), and a BLAS GEMM's summation order depends on
    the shape of the call: OpenBLAS 0.3.31 returns other last bits for a row when it comes with
    1, 4 or 100 rows rather than 1,200. Here the order is fixed by construction; rows are
    swept `_TILE_ROWS` at a time so each row of `projection` is loaded once per tile.
    """
    k = projection.shape[1]
    for start in range(0, X.shape[0], _TILE_ROWS):
        stop = min(start + _TILE_ROWS, X.shape[0])
        tile = out[start:stop]
        tile[:] = 0
        for j in range(X.shape[1]):
            weights = projection[j]
            for r in range(stop - start):
                x = X[start + r, j]
                row = tile[r]
                for m in range(k):
                    row[m] += x * weights[m]
        for r in range(stop - start):
            row = tile[r]
            for m in range(k):
                row[m] -= offset[m]
    return out


def _project(X: np.ndarray, projection: np.ndarray, offset: np.ndarray, row_start: int):
    """``X @ projection − offset`` (float32), row by row (`_project_rows`); non-finite rows are
    refused by number."""
    S = _project_rows(X, projection, offset, np.empty((len(X), projection.shape[1]), np.float32))
    _raise_if_not_finite(S, row_start)
    return S


@numba.njit(cache=True, nogil=True)
def _add_range(S, offset, low, high):  # pragma: no cover
    """Fold the rows of ``S − offset`` into the running per-column `low` and `high` (float64).

    Returns the first row with a non-finite value, or −1.
    """
    for i in range(S.shape[0]):
        finite = True
        for m in range(S.shape[1]):
            v = S[i, m] - offset[m]
            finite &= np.abs(v) < np.inf
            low[m] = min(low[m], v)
            high[m] = max(high[m], v)
        if not finite:
            return i
    return -1


@numba.njit(cache=True, nogil=True)
def _add_bin_counts(S, offset, low, inverse_width, counts):  # pragma: no cover
    """Add each row of ``S − offset`` to `counts` (k, B): column m's value v in bin
    ⌊(v − low_m) · inverse_width_m⌋ clipped to [0, B − 1], all in float32 as the numpy steps
    it replaced (subtract, scale, clip, truncate) so a value on an edge lands in the same bin.

    Returns the first row with a non-finite value (nothing of it counted), or −1. The bins of a
    row are computed before any is counted, so that loop has no stores to `counts` and
    vectorises, unlike the numpy steps and one `np.bincount` it replaced.
    """
    top = np.float32(counts.shape[1] - 1)
    index = np.empty(S.shape[1], dtype=np.int64)
    for i in range(S.shape[0]):
        finite = True
        for m in range(S.shape[1]):
            v = S[i, m] - offset[m]
            finite &= np.abs(v) < np.inf
            index[m] = np.int32(min(max((v - low[m]) * inverse_width[m], np.float32(0)), top))
        if not finite:
            return i
        for m in range(S.shape[1]):
            counts[m, index[m]] += 1
    return -1


def _sweep_projections(X, projection, offset, row_start, sweep, *state) -> None:
    """``sweep(S, offset, *state)`` on each sub-block S = X @ projection of a chunk.

    The sweep subtracts `offset`, accumulates into `state` and checks finiteness in one pass over
    S while it is in cache; a non-finite row raises the error `_project` raises.
    """
    offset = np.asarray(offset, dtype=np.float32)
    for start in range(0, len(X), _SWEEP_ROWS):
        S = X[start : start + _SWEEP_ROWS] @ projection
        if sweep(S, offset, *state) >= 0:
            _raise_if_not_finite(S - offset, row_start + start)


def chunk_projected_range(
    X: np.ndarray, projection: np.ndarray, offset: np.ndarray, row_start: int = 0
) -> ProjectedRange:
    """Min and max of every column of ``X @ projection − offset`` over one chunk."""
    k = projection.shape[1]
    low, high = np.full(k, np.inf), np.full(k, -np.inf)
    _sweep_projections(X, projection, offset, row_start, _add_range, low, high)
    return ProjectedRange(len(X), low, high)


def chunk_bin_counts(
    X: np.ndarray,
    projection: np.ndarray,
    offset: np.ndarray,
    low: np.ndarray,
    inverse_width: np.ndarray,
    n_bins: int,
    row_start: int = 0,
) -> np.ndarray:
    """(k, n_bins) int64 counts of ``X @ projection − offset`` in each dimension's bins.

    Bin j of dimension m is [low_m + j·w_m, low_m + (j + 1)·w_m); values beyond the first or last
    edge count in the first or last bin (rows arriving after the edges were fixed).
    """
    counts = np.zeros((projection.shape[1], n_bins), dtype=np.int64)
    _sweep_projections(
        X,
        projection,
        offset,
        row_start,
        _add_bin_counts,
        np.asarray(low, dtype=np.float32),
        np.asarray(inverse_width, dtype=np.float32),
        counts,
    )
    return counts


def gaussian_affinity(centres: np.ndarray, bandwidth: float) -> np.ndarray:
    """W̃ᵢⱼ = exp(−(bᵢ − bⱼ)² / 2ω²) between 1-D bin centres."""
    diff = centres[:, None] - centres[None, :]
    return np.exp(-0.5 * (diff / bandwidth) ** 2)


def solve_1d(
    centres: np.ndarray, density: np.ndarray, bandwidth: float
) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues σ (ascending) and eigenfunctions g (columns) of paper 001 eq. 1 on one dimension.

    `density` is P's diagonal (the marginal at the bin centres, positive). The problem is symmetric
    definite (D̃ − PW̃P is a graph Laplacian, PD̂ positive diagonal), so `scipy.linalg.eigh(A, B)`
    solves it; the columns come B-orthonormal (gᵀ P D̂ g = I) and the first is the constant, σ = 0.
    """
    W = gaussian_affinity(np.asarray(centres, dtype=np.float64), bandwidth)
    p = np.asarray(density, dtype=np.float64)
    PWP = p[:, None] * W * p[None, :]
    degree_tilde = PWP.sum(axis=0)
    degree_hat = (p[:, None] * W).sum(axis=0)
    laplacian = np.diag(degree_tilde) - PWP
    return scipy.linalg.eigh(laplacian, np.diag(p * degree_hat))


def _solve_occupied(
    centres: np.ndarray, density: np.ndarray, bandwidth: float
) -> tuple[np.ndarray, np.ndarray]:
    """`solve_1d` on the bins of positive density, g linearly interpolated across the others.

    A bin of zero density (possible with epsilon = 0) has zero rows in both matrices, so its g
    is undetermined; with fewer than two such bins there is no non-constant eigenfunction and
    the dimension offers σ = +inf (never kept).
    """
    n_bins = len(centres)
    occupied = density > 0
    if occupied.sum() < 2:
        sigma = np.full(n_bins, np.inf)
        sigma[0] = 0.0
        return sigma, np.ones((n_bins, n_bins))
    if occupied.all():
        return solve_1d(centres, density, bandwidth)
    sigma_in, g_in = solve_1d(centres[occupied], density[occupied], bandwidth)
    sigma = np.full(n_bins, np.inf)
    sigma[: len(sigma_in)] = sigma_in
    g = np.zeros((n_bins, n_bins))
    for j in range(len(sigma_in)):
        g[:, j] = np.interp(centres, centres[occupied], g_in[:, j])
    return sigma, g


def quantile_from_counts(counts: np.ndarray, edges: np.ndarray, q: float) -> float:
    """The q-quantile (0 ≤ q ≤ 1) of a histogram, linear within the bin that holds it."""
    cdf = np.concatenate([[0.0], np.cumsum(counts, dtype=np.float64)])
    if cdf[-1] == 0:
        return float(edges[0])
    return float(np.interp(q * cdf[-1], cdf, edges))


class SeparableEigenfunctions(RowTransformerMixin, BaseEstimator):
    """Base of PCALap, RPLap and ALE: subclasses choose the rotation, P and the bandwidth.

    Subclasses define ``_fit_rotation(X) -> (projection (D, k), offset (k,))`` (float32),
    ``_uses_density`` (P = the histogram, else P = I) and ``_bandwidths(centres, counts)``.
    """

    _uses_density = True

    # -- fitting ------------------------------------------------------------------------------

    # The fitted arrays and their shapes (`pipeline.fitted`): P directions, B bins a direction,
    # K eigenfunctions.
    _fitted_shapes: ClassVar[dict[str, Shape]] = {
        "components_": ("P", "D"),
        "offset_": ("P",),
        "bin_low_": ("P",),
        "bin_width_": ("P",),
        "bin_counts_": ("P", "B"),
        "clip_low_": ("P",),
        "clip_high_": ("P",),
        "bandwidths_": ("P",),
        "eigenvalues_": ("K",),
        "dims_": ("K",),
        "eigenfunctions_": ("K", "B"),
    }

    # What each parameter may be (`pipeline.params`), checked when fit reads its rows.
    _parameter_rules: ClassVar[dict[str, tuple]] = {
        "n_bins": (Interval(int, 3, None),),
        "n_components": (Interval(int, 1, None), None),
        "epsilon": (Interval(float, 0, None),),
        "bandwidth": (Interval(float, 0, None, closed="neither"),),
    }

    def fit(self, X: Any, y: Any = None):
        """Rotation, bin ranges and histograms from all rows of X, then the 1-D eigenproblems."""
        for name in ("bin_counts_", "components_"):
            self.__dict__.pop(name, None)
        return self.partial_fit(X)

    def partial_fit(self, X: Any, y: Any = None):
        """Add the rows of X to the histograms and re-solve.

        The first call also fits the rotation and fixes the bin edges from X's range; later rows
        outside that range count in the end bins.
        """
        first = not hasattr(self, "bin_counts_")
        X = self._check_rows(X, reset=first)
        if first:
            projection, offset = self._fit_rotation(X)
            self.components_ = np.ascontiguousarray(projection.T, dtype=np.float32)
            self.offset_ = np.asarray(offset, dtype=np.float32)
            lazy_range = reduce_rows(
                chunk_projected_range, [X], projection, offset, blocks_per_task="auto"
            )
            value_range = compute(lazy_range)[0]
            low, high = value_range.low, value_range.high
            span = high - low
            # A constant dimension gets a unit span: one occupied bin, harmless eigenfunctions.
            span = np.where(span > 0, span, 1.0)
            self.bin_low_ = low.astype(np.float64)
            self.bin_width_ = span / self.n_bins
            self.bin_counts_ = np.zeros((len(low), self.n_bins), dtype=np.int64)
            self.n_rows_ = 0
        projection = np.ascontiguousarray(self.components_.T)
        counts = reduce_rows(
            chunk_bin_counts,
            [X],
            projection,
            self.offset_,
            self.bin_low_,
            1.0 / self.bin_width_,
            int(self.n_bins),
            blocks_per_task="auto",
        )
        self.bin_counts_ = self.bin_counts_ + compute(counts)[0]
        self.n_rows_ = int(self.bin_counts_[0].sum())
        self._solve()
        return self

    def bin_centres(self) -> np.ndarray:
        """(k, B) centres of every projected dimension's bins."""
        check_is_fitted(self)
        j = np.arange(self.n_bins) + 0.5
        return self.bin_low_[:, None] + j[None, :] * self.bin_width_[:, None]

    def _solve(self) -> None:
        counts = self.bin_counts_.astype(np.float64)
        k, n_bins = counts.shape
        if self.n_rows_ < 2:
            raise ValueError(
                f"{type(self).__name__} needs at least 2 rows, got n_samples = {self.n_rows_}"
            )
        centres = self.bin_centres()
        empirical = counts / counts.sum(axis=1, keepdims=True)
        if self._uses_density:
            # Fergus et al. add a constant to the normalised histogram so no bin has zero density.
            density = (empirical + self.epsilon) / (1 + n_bins * self.epsilon)
        else:
            density = np.ones_like(empirical)  # RPLap: uniform marginals (paper 000 §3.2.1)
        bandwidths = self._bandwidths(centres, empirical)
        eigenvalues = np.empty((k, n_bins - 1))
        functions = np.empty((k, n_bins - 1, n_bins))
        # B × B problems: too small for BLAS threads to pay for their synchronisation.
        with threadpool_limits(1):
            for m in range(k):
                sigma, g = _solve_occupied(centres[m], density[m], bandwidths[m])
                g = g[:, 1:].T  # drop the constant eigenfunction (σ = 0)
                # Unit mean square over the rows seen (Σ_b p̂_b g_b² = 1), so every kept column of
                # the embedding has comparable scale whatever the bin occupancy; sign: largest > 0.
                g /= np.sqrt(np.maximum(g**2 @ empirical[m], 1e-300))[:, None]
                biggest = np.abs(g).argmax(axis=1)
                g *= np.sign(g[np.arange(len(g)), biggest])[:, None]
                eigenvalues[m], functions[m] = sigma[1:], g
        d = self._n_eigenfunctions(k, n_bins)
        # Stable sort: ties keep dimension order, then eigenfunction order.
        order = np.argsort(eigenvalues.ravel(), kind="stable")[:d]
        dims, which = np.divmod(order, n_bins - 1)
        edges = self.bin_low_[:, None] + np.arange(n_bins + 1)[None, :] * self.bin_width_[:, None]
        low_q, high_q = CLIP_PERCENT / 100, 1 - CLIP_PERCENT / 100
        pairs = list(zip(counts, edges, strict=True))
        clip_low = np.array([quantile_from_counts(c, e, low_q) for c, e in pairs])
        clip_high = np.array([quantile_from_counts(c, e, high_q) for c, e in pairs])
        # Interpolation is between bin centres: beyond the outer centres g is held constant.
        self.clip_low_ = np.maximum(clip_low, centres[:, 0])
        self.clip_high_ = np.minimum(clip_high, centres[:, -1])
        self.bandwidths_ = np.asarray(bandwidths, dtype=np.float64)
        self.eigenvalues_ = eigenvalues.ravel()[order]
        self.dims_ = dims.astype(np.int64)
        self.eigenfunctions_ = np.ascontiguousarray(functions[dims, which], dtype=np.float32)
        self.n_components_ = int(d)

    def _fit_rotation(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def _bandwidths(self, centres: np.ndarray, empirical: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _n_eigenfunctions(self, k: int, n_bins: int) -> int:
        wanted = 2 * k if self.n_components is None else int(self.n_components)
        return min(wanted, k * (n_bins - 1))

    # -- embedding ----------------------------------------------------------------------------

    def _transform_params(self) -> tuple:
        used, column = np.unique(self.dims_, return_inverse=True)
        projection = np.ascontiguousarray(self.components_[used].T)
        first_centre = self.bin_low_[used] + 0.5 * self.bin_width_[used]
        table = self.eigenfunctions_.astype(np.float32)
        slope = np.diff(table, axis=1)
        return (
            projection,
            # Projected values measured from the first bin centre: s − b₀ = xR − (μR + b₀).
            (self.offset_[used] + first_centre).astype(np.float32),
            (self.clip_low_[used] - first_centre).astype(np.float32),
            (self.clip_high_[used] - first_centre).astype(np.float32),
            (1.0 / self.bin_width_[used]).astype(np.float32),
            column.astype(np.int64),
            table,
            np.ascontiguousarray(slope),
        )

    @staticmethod
    def _transform_block(
        X: np.ndarray,
        projection: np.ndarray,
        offset: np.ndarray,
        clip_low: np.ndarray,
        clip_high: np.ndarray,
        inverse_width: np.ndarray,
        column: np.ndarray,
        table: np.ndarray,
        slope: np.ndarray,
        row_start: int = 0,
    ) -> np.ndarray:
        """Linear interpolation of each kept eigenfunction at the row's projected value."""
        d, n_bins = table.shape
        out = np.empty((len(X), d), dtype=np.float32)
        # Output j reads table row j: its segment index is offset by j·B in the flat table.
        flat_offset = np.arange(d) * n_bins
        flat_slope_offset = np.arange(d) * (n_bins - 1)
        for start in range(0, len(X), _SUB_ROWS):
            S = _project(X[start : start + _SUB_ROWS], projection, offset, row_start + start)
            np.clip(S, clip_low, clip_high, out=S)
            S *= inverse_width  # position in bin-centre units from the first centre
            segment = np.minimum(S.astype(np.int64), n_bins - 2)
            S -= segment
            segment, fraction = segment[:, column], S[:, column]
            value = table.ravel()[segment + flat_offset]
            value += fraction * slope.ravel()[segment + flat_slope_offset]
            out[start : start + len(S)] = value
        return out

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        return tags
