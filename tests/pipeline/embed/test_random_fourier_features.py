import numpy as np
import pytest
from dask.task_spec import Task
from sklearn.neighbors import NearestNeighbors

from imgscale.pipeline.compute import compute
from imgscale.pipeline.embed import RandomFourierFeatures
from imgscale.pipeline.embed import _base as embed_base
from imgscale.pipeline.embed._bandwidth import knn_bandwidth
from imgscale.pipeline.reductions import reduce_rows
from imgscale.pipeline.rows import sample_rows
from tests.pipeline.embed.conftest import as_dask


def _gaussian(X, gamma):
    d2 = ((X[:, None, :] - X[None, :, :]) ** 2).sum(axis=2)
    return np.exp(-gamma * d2 / 2)


def test_kernel_approximation_error_falls_like_one_over_sqrt_d():
    X = np.random.default_rng(1).normal(size=(60, 5)).astype(np.float32)
    exact = _gaussian(X.astype(np.float64), gamma=0.3)
    dims = np.array([64, 256, 1024, 4096])
    errors = []
    for d in dims:
        trials = []
        for seed in range(6):
            Z = RandomFourierFeatures(d, gamma=0.3, random_state=seed).fit_transform(X)
            trials.append(np.sqrt(((Z.astype(np.float64) @ Z.T - exact) ** 2).mean()))
        errors.append(np.mean(trials))
    slope = np.polyfit(np.log(dims), np.log(errors), 1)[0]
    assert slope == pytest.approx(-0.5, abs=0.08)


def test_bandwidth_is_mean_distance_to_50th_neighbour_among_all_rows():
    X = np.random.default_rng(2).normal(size=(300, 4)).astype(np.float32)
    # 51 neighbours: the row itself comes first at distance 0.
    distances, _ = NearestNeighbors(n_neighbors=51).fit(X).kneighbors(X)
    expected = distances[:, 50].mean()
    assert knn_bandwidth(X, 50, 300, 0) == pytest.approx(expected, rel=1e-4)
    assert knn_bandwidth(as_dask(X), 50, 300, 0) == pytest.approx(expected, rel=1e-4)


def test_gamma_defaults_to_inverse_squared_bandwidth():
    X = np.random.default_rng(3).normal(size=(300, 4)).astype(np.float32)
    rff = RandomFourierFeatures(50, bandwidth_sample=300, random_state=0).fit(X)
    assert rff.gamma_ == pytest.approx(1 / knn_bandwidth(X, 50, 300, 0) ** 2, rel=1e-6)


def test_matches_sklearn_rbf_sampler_convention_gamma_over_two():
    from sklearn.kernel_approximation import RBFSampler

    X = np.random.default_rng(4).normal(size=(40, 3)).astype(np.float32)
    ours = RandomFourierFeatures(8000, gamma=0.5, random_state=0).fit_transform(X)
    theirs = RBFSampler(gamma=0.25, n_components=8000, random_state=0).fit_transform(X)
    assert np.abs(ours @ ours.T - theirs @ theirs.T).mean() < 0.02


def test_transform_equals_the_float64_formula_in_float32():
    X = np.random.default_rng(5).normal(size=(50, 7)).astype(np.float32)
    rff = RandomFourierFeatures(30, gamma=0.4, random_state=0).fit(X)
    W, b = rff.random_weights_.astype(np.float64), rff.random_offset_.astype(np.float64)
    expected = np.sqrt(2 / 30) * np.cos(X.astype(np.float64) @ W + b)
    Z = rff.transform(X)
    assert Z.dtype == np.float32
    np.testing.assert_allclose(Z, expected, rtol=0, atol=1e-5)


def test_wide_output_chunks_are_cut_to_the_byte_limit_and_equal_numpy(monkeypatch):
    X = np.random.default_rng(6).normal(size=(200, 5)).astype(np.float32)
    rff = RandomFourierFeatures(64, gamma=0.2, random_state=0).fit(X)
    # 10 rows × 64 float32 columns per chunk at most: input chunks of 37, …, 37, 15 rows are cut
    # into the fewest pieces, 4 and 2, each within one input chunk.
    monkeypatch.setattr(embed_base, "_MAX_OUTPUT_CHUNK_BYTES", 10 * 64 * 4)
    lazy = rff.transform(as_dask(X))
    assert lazy.chunks[0] == (10, 9, 9, 9) * 5 + (8, 7)
    np.testing.assert_allclose(lazy.compute(), rff.transform(X), rtol=1e-5, atol=1e-6)


def test_sampled_rows_of_dask_input_equal_the_numpy_sample():
    X = np.random.default_rng(7).normal(size=(200, 3)).astype(np.float32)
    expected = sample_rows(X, 25, 0)
    np.testing.assert_array_equal(sample_rows(as_dask(X), 25, 0), expected)
    assert len(np.unique(expected, axis=0)) == 25


def test_a_reduction_reads_embeds_and_reduces_each_piece_in_one_task(monkeypatch):
    # Pieces are sliced from the input on their own: a consumer that inlines its blocks
    # (reduce_rows) absorbs read, slice and embedding, so no input chunk or piece is a task of its
    # own (one would wait in worker memory); the sums equal the numpy embedding's.
    X = np.random.default_rng(8).normal(size=(200, 5)).astype(np.float32)
    rff = RandomFourierFeatures(64, gamma=0.2, random_state=0).fit(X)
    monkeypatch.setattr(embed_base, "_MAX_OUTPUT_CHUNK_BYTES", 10 * 64 * 4)
    embedded = rff.transform(as_dask(X))
    assert embedded.numblocks[0] > as_dask(X).numblocks[0]

    def column_sums(block, row_start):
        return block.sum(axis=0, dtype=np.float64)

    lazy = reduce_rows(column_sums, [embedded])
    tasks = [key for key, node in lazy.__dask_graph__().items() if isinstance(node, Task)]
    assert all(key[0].startswith("reduce-column_sums-") for key in tasks)
    np.testing.assert_allclose(
        compute(lazy)[0], rff.transform(X).sum(axis=0, dtype=np.float64), rtol=1e-5
    )
