"""Separable Laplacian eigenfunctions (PCALap, RPLap, ALE) against dense references.

References: scipy's general eigensolver for the 1-D problem, the exact eigenvectors of the
discretised 1-D graph, the exact Laplacian eigenvectors of small data drawn from a product of 1-D
densities (agreement measured by principal angles between subspaces), numpy's histogram for the
streamed bin counts, the all-at-once embedding for batch-wise embedding, and a sequential
elementwise float32 sum for the projection of a row.
"""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import scipy.linalg
from sklearn.base import clone
from sklearn.utils.estimator_checks import parametrize_with_checks

from imgscale.pipeline.embed import ALE, PCALap, RPLap
from imgscale.pipeline.embed.eigenfunctions import (
    _SWEEP_ROWS,
    _project,
    chunk_bin_counts,
    chunk_projected_range,
    gaussian_affinity,
    solve_1d,
)


def _product_density_rows(n: int, seed: int) -> np.ndarray:
    """Rows whose rotated coordinates are independent: uniform on [−2, 2] and N(0, 0.6²)."""
    rng = np.random.default_rng(seed)
    independent = np.column_stack([rng.uniform(-2, 2, n), 0.6 * rng.standard_normal(n)])
    rotation = np.linalg.qr(rng.standard_normal((2, 2)))[0]
    return (independent @ rotation).astype(np.float32)


@pytest.fixture
def rows() -> np.ndarray:
    rng = np.random.default_rng(0)
    X = rng.standard_normal((900, 6)).astype(np.float32)
    X[:, 0] += np.where(rng.random(900) < 0.5, -2.0, 2.0)
    return X


def test_1d_eigenproblem_matches_scipy_general_eigensolver_on_dense_matrices():
    rng = np.random.default_rng(1)
    centres = np.linspace(-1, 1, 20)
    density = rng.random(20) + 0.05
    sigma, g = solve_1d(centres, density, bandwidth=0.3)

    W = gaussian_affinity(centres, 0.3)
    P = np.diag(density)
    A = np.diag((P @ W @ P).sum(axis=0)) - P @ W @ P  # D̃ − PW̃P
    B = P @ np.diag((P @ W).sum(axis=0))  # P D̂
    reference = np.sort(scipy.linalg.eigvals(np.linalg.solve(B, A)).real)
    np.testing.assert_allclose(sigma, reference, rtol=1e-7, atol=1e-11)
    np.testing.assert_allclose(A @ g, B @ g * sigma, atol=1e-9)
    assert sigma[0] == pytest.approx(0, abs=1e-12)
    np.testing.assert_allclose(g[:, 0] / g[0, 0], 1, rtol=1e-8)  # the trivial, constant one


def test_1d_eigenfunctions_are_the_exact_eigenvectors_of_the_discretised_graph():
    # Rows on a fine grid, each grid value repeated in proportion to a bimodal density: the exact
    # n × n random-walk problem (D − W)f = σDf has the 1-D problem's eigenpairs (σ < 1) with f
    # constant on repeated values, P being the grid values' frequencies.
    centres = np.linspace(-2, 2, 40)
    density = np.exp(-((centres - 1) ** 2) / 0.3) + np.exp(-((centres + 1) ** 2) / 0.3) + 0.05
    counts = np.maximum(np.round(density / density.sum() * 400), 1).astype(int)
    points = np.repeat(centres, counts)
    bin_of_point = np.repeat(np.arange(40), counts)

    sigma, g = solve_1d(centres, counts / counts.sum(), bandwidth=0.25)
    W = gaussian_affinity(points, 0.25)
    D = np.diag(W.sum(axis=1))
    exact_sigma, exact_f = scipy.linalg.eigh(D - W, D, subset_by_index=(0, 5))

    np.testing.assert_allclose(sigma[:6], exact_sigma, rtol=1e-6, atol=1e-9)
    for j in range(1, 6):
        correlation = np.corrcoef(g[bin_of_point, j], exact_f[:, j])[0, 1]
        assert abs(correlation) == pytest.approx(1, abs=1e-8)


def _exact_random_walk_eigenvectors(X: np.ndarray, bandwidth: float, k: int):
    """The k smallest eigenpairs of (D − W)f = σDf, W the Gaussian kernel of the rows."""
    X = X.astype(np.float64)
    squared = ((X[:, None, :] - X[None, :, :]) ** 2).sum(axis=2)
    W = np.exp(-0.5 * squared / bandwidth**2)
    D = np.diag(W.sum(axis=1))
    return scipy.linalg.eigh(D - W, D, subset_by_index=(0, k - 1))


def test_separable_approximation_spans_the_exact_laplacian_eigenvectors_of_product_data():
    # Agreement measure: principal angles between the span of the first k approximate
    # eigenvectors (interpolated eigenfunctions) and the span of the first k exact non-constant
    # eigenvectors of the n × n random-walk Laplacian of the rows (Gaussian kernel with the
    # model's ω, the same in every direction). Random k-dim subspaces sit at ≈ 89°.
    # Measured (seeds 0–2): first eigenvector 1.4–2.1°; k = 3 largest angle 11–20°, the rest ≤ 4°;
    # eigenvalues within 5% of the exact ones.
    X = _product_density_rows(1200, seed=0)
    model = ALE(n_components=3, n_bins=50, epsilon=0.0).fit(X)
    exact_sigma, exact = _exact_random_walk_eigenvectors(X, model.bandwidths_[0], 4)
    U = model.transform(X).astype(np.float64)

    angles = [
        np.degrees(scipy.linalg.subspace_angles(U[:, :k], exact[:, 1 : k + 1])) for k in (1, 3)
    ]
    assert angles[0].max() < 5
    assert angles[1].max() < 30 and np.median(angles[1]) < 10
    np.testing.assert_allclose(model.eigenvalues_, exact_sigma[1:], rtol=0.1)
    assert list(model.dims_) == [0, 0, 1]  # two along the uniform direction, one along the other


def test_a_narrow_direction_offers_no_eigenfunction_before_the_exact_laplacian_has_one():
    # Uniform on [−2, 2] × N(0, 0.3²), rotated: the exact random-walk Laplacian's four smallest
    # non-constant eigenvectors all vary along the wide direction only, so one ω shared by both
    # directions must keep four eigenfunctions of it. Measured (seeds 0–2): eigenvalues within
    # 2.7% of the exact ones, principal angles ≤ 11°. A bandwidth relative to each direction's
    # own range made both look alike: the narrow direction's first eigenfunction came third
    # (87–89° from the exact span) and the eigenvalues were 35–61% low.
    rng = np.random.default_rng(0)
    independent = np.column_stack([rng.uniform(-2, 2, 1200), 0.3 * rng.standard_normal(1200)])
    X = (independent @ np.linalg.qr(rng.standard_normal((2, 2)))[0]).astype(np.float32)
    model = ALE(n_components=4, epsilon=0.0).fit(X)
    exact_sigma, exact = _exact_random_walk_eigenvectors(X, model.bandwidths_[0], 5)

    assert list(model.dims_) == [0, 0, 0, 0]
    np.testing.assert_allclose(model.eigenvalues_, exact_sigma[1:], rtol=0.05)
    angles = scipy.linalg.subspace_angles(model.transform(X).astype(np.float64), exact[:, 1:])
    assert np.degrees(angles).max() < 15


def test_the_bandwidth_is_one_omega_in_units_of_the_rows_rms_radius(rows):
    model = ALE(n_components=4).fit(rows)
    radius = np.sqrt(np.var(rows.astype(np.float64), axis=0, ddof=1).sum())
    np.testing.assert_allclose(model.rms_radius_, radius, rtol=1e-6)
    np.testing.assert_allclose(model.bandwidths_, np.sqrt(2) * 0.2 * radius, rtol=1e-6)
    scaled = ALE(n_components=4).fit(100 * rows)  # the same eigenvalues at any scale of the rows
    np.testing.assert_allclose(scaled.eigenvalues_, model.eigenvalues_, rtol=1e-4)


def test_streamed_bin_counts_equal_numpy_histograms_of_the_projections(rows):
    projection = np.random.default_rng(2).standard_normal((6, 3)).astype(np.float32)
    offset = np.array([0.5, -1, 0], dtype=np.float32)
    S = rows @ projection - offset
    low, high = S.min(axis=0), S.max(axis=0)
    counts = chunk_bin_counts(rows, projection, offset, low, 10 / (high - low), 10)
    for m in range(3):
        reference, _ = np.histogram(S[:, m], bins=10, range=(low[m], high[m]))
        np.testing.assert_array_equal(counts[m], reference)


def _rows_on_a_grid(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows on a 1/8 grid, an integer projection and an offset on the grid: every projected value
    is exact in float32, and a quarter of them fall on the 1/2-spaced bin edges used below."""
    rng = np.random.default_rng(seed)
    X = (rng.integers(-24, 25, size=(n, 3)) / 8).astype(np.float32)
    projection = np.array([[1, 0], [0, 1], [1, -1]], dtype=np.float32)
    return X, projection, np.array([0.5, -0.25], dtype=np.float32)


def test_bin_counts_clip_to_the_end_bins_and_count_edge_values_as_numpy_histogram():
    # Over several sub-blocks; edges span [−2, 2] and [−3, 1] while projections reach ±6, so
    # about half the values lie beyond an edge and count in the first or last bin.
    X, projection, offset = _rows_on_a_grid(2 * _SWEEP_ROWS + 123, seed=3)
    low, width, n_bins = np.array([-2.0, -3.0]), 0.5, 8
    counts = chunk_bin_counts(X, projection, offset, low, np.full(2, 1 / width), n_bins)
    S = X.astype(np.float64) @ projection - offset
    assert counts.dtype == np.int64 and counts.shape == (2, n_bins)
    for m in range(2):
        edges = low[m] + width * np.arange(n_bins + 1)
        on_edge = np.isin(S[:, m], edges)
        beyond = (S[:, m] < edges[0]) | (S[:, m] > edges[-1])
        assert on_edge.mean() > 0.1 and beyond.mean() > 0.3
        # numpy's last bin is closed: values clipped to the last edge count in it.
        reference, _ = np.histogram(np.clip(S[:, m], edges[0], edges[-1]), bins=edges)
        np.testing.assert_array_equal(counts[m], reference)


def test_projected_range_is_the_numpy_min_and_max_of_the_projections():
    X, projection, offset = _rows_on_a_grid(2 * _SWEEP_ROWS + 123, seed=4)
    value_range = chunk_projected_range(X, projection, offset)
    S = X.astype(np.float64) @ projection - offset
    assert value_range.n_rows == len(X)
    np.testing.assert_array_equal(value_range.low, S.min(axis=0))
    np.testing.assert_array_equal(value_range.high, S.max(axis=0))


@pytest.mark.parametrize("kernel", ["range", "bin counts"])
def test_chunk_kernels_name_the_rows_with_non_finite_values(kernel):
    X, projection, offset = _rows_on_a_grid(2 * _SWEEP_ROWS + 123, seed=5)
    bad = [7, 9, _SWEEP_ROWS + 5]  # two in the first sub-block, one in the second
    X[7, 0], X[9, 2], X[_SWEEP_ROWS + 5, 1] = np.nan, np.inf, -np.inf
    run = {
        "range": lambda start: chunk_projected_range(X, projection, offset, row_start=start),
        "bin counts": lambda start: chunk_bin_counts(
            X, projection, offset, np.zeros(2), np.ones(2), 5, row_start=start
        ),
    }[kernel]
    # The first sub-block with a non-finite value is reported, every such row of it.
    with pytest.raises(ValueError, match=rf"rows \[{1000 + bad[0]}, {1000 + bad[1]}\]"):
        run(1000)
    X[7, 0] = X[9, 2] = 0
    with pytest.raises(ValueError, match=rf"rows \[{bad[2]}\]"):
        run(0)


@pytest.mark.parametrize(
    "estimator", [ALE(n_components=8), PCALap(n_directions=4), RPLap(12, random_state=0)]
)
def test_dask_fit_and_transform_equal_numpy(estimator, rows):
    expected = clone(estimator).fit(rows).transform(rows)
    lazy = (
        clone(estimator)
        .fit(da.from_array(rows, chunks=250))
        .transform(da.from_array(rows, chunks=170))
    )
    assert isinstance(lazy, da.Array) and lazy.dtype == np.float32
    np.testing.assert_allclose(lazy.compute(), expected, rtol=1e-5, atol=1e-5)


def test_embedding_in_batches_equals_embedding_all_at_once(rows):
    model = ALE(n_components=10).fit(rows)
    at_once = model.transform(rows)
    batches = np.concatenate([model.transform(rows[a : a + 100]) for a in range(0, 900, 100)])
    one_by_one = np.concatenate([model.transform(rows[i : i + 1]) for i in range(0, 900, 97)])
    np.testing.assert_array_equal(batches, at_once)
    np.testing.assert_array_equal(one_by_one, at_once[::97])


def test_a_row_is_projected_by_its_own_float32_sum_in_column_order_whatever_its_batch():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((70, 33)).astype(np.float32)
    projection = rng.standard_normal((33, 9)).astype(np.float32)
    offset = rng.standard_normal(9).astype(np.float32)
    # The order the kernel promises, one elementwise IEEE multiply and add at a time.
    reference = np.zeros((70, 9), dtype=np.float32)
    for j in range(33):
        reference = reference + X[:, j : j + 1] * projection[j]
    reference = reference - offset
    np.testing.assert_array_equal(_project(X, projection, offset, 0), reference)
    for batch in (1, 5, 16, 17):
        pieces = [_project(X[a : a + batch], projection, offset, a) for a in range(0, 70, batch)]
        np.testing.assert_array_equal(np.concatenate(pieces), reference)
    np.testing.assert_allclose(
        reference, X.astype(np.float64) @ projection - offset, rtol=1e-5, atol=1e-5
    )


def test_partial_fit_accumulates_the_histograms_of_all_rows_with_the_first_edges(rows):
    model = ALE(n_components=10).partial_fit(rows[:500]).partial_fit(rows[500:])
    assert model.n_rows_ == 900
    S = rows @ model.components_.T - model.offset_
    for m in range(6):
        edges = model.bin_low_[m] + np.arange(51) * model.bin_width_[m]
        # Rows beyond the first call's range fall in the end bins.
        clipped = np.clip(S[:, m], edges[0], np.nextafter(edges[-1], -np.inf, dtype=np.float32))
        reference, _ = np.histogram(clipped, bins=edges)
        assert abs(model.bin_counts_[m] - reference).sum() <= 2  # float32 rounding at edges
    refit = clone(model).fit(rows[:500])
    np.testing.assert_array_equal(model.components_, refit.components_)


def test_fitted_eigenfunctions_solve_the_1d_problem_of_the_fitted_histograms(rows):
    model = PCALap(n_directions=3, n_components=6, epsilon=0.1).fit(rows)
    centres = model.bin_centres()
    for j, m in enumerate(model.dims_):
        p = model.bin_counts_[m] / model.n_rows_
        sigma, _ = solve_1d(centres[m], (p + 0.1) / (1 + 50 * 0.1), model.bandwidths_[m])
        assert np.isclose(sigma[1:], model.eigenvalues_[j], rtol=1e-9).any()
    assert np.all(np.diff(model.eigenvalues_) >= 0) and model.eigenvalues_[0] > 0


def test_transform_interpolates_linearly_between_bin_centres(rows):
    model = ALE(n_directions=1, n_components=3).fit(rows)
    centres = model.bin_centres()[0]
    # Rows whose projection is a chosen value: x = μ + t·r along the unit direction r.
    mean = model.offset_[0] * model.components_[0] / (model.components_[0] @ model.components_[0])
    inside = (model.clip_low_[0] < centres) & (centres < model.clip_high_[0])
    j = np.flatnonzero(inside)[len(np.flatnonzero(inside)) // 2]
    t = np.array([centres[j], 0.25 * centres[j] + 0.75 * centres[j + 1]])
    X = mean[None, :] + t[:, None] * model.components_[0][None, :]
    U = model.transform(X.astype(np.float32))
    g = model.eigenfunctions_
    np.testing.assert_allclose(U[0], g[:, j], rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(U[1], 0.25 * g[:, j] + 0.75 * g[:, j + 1], rtol=1e-3, atol=1e-3)


def test_embedding_columns_have_unit_mean_square_and_extreme_rows_are_clipped(rows):
    model = ALE(n_components=10).fit(rows)
    U = model.transform(rows)
    np.testing.assert_allclose((U**2).mean(axis=0), 1, atol=0.15)
    far = rows[:1] + 1e4
    assert np.isfinite(model.transform(far)).all() and np.abs(model.transform(far)).max() < 10


def test_non_finite_rows_are_named_in_the_error(rows):
    bad = rows.copy()
    bad[123, 2] = np.nan
    with pytest.raises(ValueError, match=r"NaN|non-finite"):
        ALE(n_components=4).fit(bad)
    model = ALE(n_components=4).fit(rows)
    with pytest.raises(ValueError, match="123"):
        model.transform(da.from_array(bad, chunks=100)).compute()


@parametrize_with_checks(
    [
        ALE(n_components=4, n_bins=10),
        PCALap(n_directions=2, n_bins=10),
        RPLap(n_directions=6, n_bins=10, random_state=0),
    ]
)
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)
