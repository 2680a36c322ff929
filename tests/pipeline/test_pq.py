"""Class sums and ADC search on PQ codes, checked against decoding the rows with numpy."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import ortho_group

from imgscale.pipeline.classify import NearestClassMean
from imgscale.pipeline.pq import PQCodec, adc_search, chunk_code_stats, code_row_stats
from tests.pipeline.conftest import as_dask

M, DSUB, N, C = 6, 3, 400, 7
DIM = M * DSUB


def decode(codes, codebook, rotation=None):
    """Reference decoder: concatenate the chosen centroid of every sub-space."""
    out = np.concatenate([codebook[j][codes[:, j]] for j in range(codebook.shape[0])], axis=1)
    return out if rotation is None else out @ rotation.T


@pytest.fixture
def pq_data():
    rng = np.random.default_rng(0)
    codebook = rng.normal(size=(M, 256, DSUB)).astype(np.float32)
    # Few centroids used per sub-space, so codes repeat within classes as in real data.
    codes = rng.integers(0, 12, size=(N, M)).astype(np.uint8)
    codes[::5] = rng.integers(0, 256, size=codes[::5].shape)
    y = rng.integers(-1, C, size=N)
    return codes, y, codebook


def decoded_stats(codes, y, codebook, n_classes, rotation=None):
    """Reference: sums of the decoded rows with numpy, float64."""
    X = decode(codes, codebook, rotation).astype(np.float64)
    sums = np.stack([X[y == c].sum(axis=0) for c in range(n_classes)])
    return X.sum(axis=0), sums, np.bincount(y[y >= 0], minlength=n_classes)


def assert_stats_equal(stats, expected, rtol=1e-12, atol=1e-9):
    """Code stats against (feature_sum, class_sums, class_counts) of the decoded rows."""
    feature_sum, class_sums, class_counts = expected
    np.testing.assert_array_equal(stats.class_counts, class_counts)
    np.testing.assert_allclose(stats.class_sums, class_sums, rtol=rtol, atol=atol)
    np.testing.assert_allclose(stats.feature_sum, feature_sum, rtol=rtol, atol=atol)


@pytest.mark.parametrize("n_classes", [C, 5000], ids=["few", "many-mostly-empty"])
def test_code_stats_equal_sums_of_decoded_rows(pq_data, n_classes):
    codes, y, codebook = pq_data
    stats = chunk_code_stats(codes, y, codebook, n_classes)
    assert stats.n_rows == N
    assert_stats_equal(stats, decoded_stats(codes, y, codebook, n_classes))


def test_code_stats_of_unlabelled_rows_count_only_towards_the_feature_sum(pq_data):
    codes, _, codebook = pq_data
    stats = chunk_code_stats(codes, np.full(N, -1), codebook, C)
    assert stats.n_rows == N and stats.class_counts.sum() == 0 and not stats.class_sums.any()
    np.testing.assert_allclose(stats.feature_sum, decode(codes, codebook).sum(axis=0), rtol=1e-5)


def test_code_stats_into_adds_one_row_chunks_in_place(pq_data):
    codes, y, codebook = pq_data
    stats = chunk_code_stats(codes[:1], y[:1], codebook, C)
    for i in range(1, 30):
        stats = chunk_code_stats(codes[i : i + 1], y[i : i + 1], codebook, C, i, into=stats)
    assert_stats_equal(stats, decoded_stats(codes[:30], y[:30], codebook, C))


@pytest.mark.parametrize("rows", [1, 57, N], ids=["one-row-chunks", "uneven", "one-chunk"])
def test_code_row_stats_over_dask_chunks_equal_decoded_sums(pq_data, rows):
    codes, y, codebook = pq_data
    rotation = ortho_group.rvs(DIM, random_state=1).astype(np.float32)
    stats = code_row_stats(as_dask(codes, rows), as_dask(y, rows), codebook, C, rotation)
    assert stats.n_rows == N
    expected = decoded_stats(codes, y, codebook, C, rotation)
    assert_stats_equal(stats, expected, rtol=1e-5, atol=1e-4)  # float32 rotation


def test_code_stats_reject_class_indices_out_of_range(pq_data):
    codes, y, codebook = pq_data
    with pytest.raises(ValueError, match="outside"):
        chunk_code_stats(codes, np.where(y == 6, C, y), codebook, C)


@pytest.mark.parametrize("chunked", [False, True], ids=["numpy", "dask"])
def test_ncm_fit_codes_equals_fit_on_decoded_rows(pq_data, chunked):
    codes, y, codebook = pq_data
    X = decode(codes, codebook)
    reference = NearestClassMean().fit(X, y)
    wrap = as_dask if chunked else (lambda a: a)
    model = NearestClassMean().fit(wrap(codes), wrap(y), codec=PQCodec(codebook))
    np.testing.assert_array_equal(model.classes_, reference.classes_)
    np.testing.assert_array_equal(model.class_counts_, reference.class_counts_)
    np.testing.assert_allclose(model.means_, reference.means_, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(model.predict(X), reference.predict(X))


def test_ncm_fit_codes_with_rotation_equals_mean_of_decoded_rows(pq_data):
    codes, y, codebook = pq_data
    rotation = ortho_group.rvs(DIM, random_state=2).astype(np.float32)
    X = decode(codes, codebook, rotation)
    model = NearestClassMean().fit(codes, y, codec=PQCodec(codebook, rotation))
    expected = np.stack([X[y == c].mean(axis=0) for c in range(C)])
    np.testing.assert_allclose(model.means_, expected, rtol=1e-5, atol=1e-5)


def test_partial_fit_codes_adds_rows_and_classes_like_partial_fit(pq_data):
    codes, y, codebook = pq_data
    X = decode(codes, codebook)
    first, later = y < 4, y >= 4  # later rows bring classes 4.. 6
    reference = NearestClassMean().partial_fit(X[first], y[first]).partial_fit(X[later], y[later])
    model = NearestClassMean().partial_fit(codes[first], y[first], codec=PQCodec(codebook))
    model.partial_fit(codes[later], y[later], codec=PQCodec(codebook))
    np.testing.assert_array_equal(model.classes_, reference.classes_)
    np.testing.assert_allclose(model.means_, reference.means_, rtol=1e-5, atol=1e-5)


def test_fit_codes_refuses_codes_that_do_not_match_the_codebook(pq_data):
    codes, y, codebook = pq_data
    with pytest.raises(ValueError, match=r"expected \(n, 6\) uint8"):
        NearestClassMean().fit(codes[:, :4], y, codec=PQCodec(codebook))
    with pytest.raises(ValueError, match=r"expected \(n, 6\) uint8"):
        NearestClassMean().fit(codes.astype(np.int64), y, codec=PQCodec(codebook))
    with pytest.raises(ValueError, match=r"expected \(M, 256, D/M\)"):
        NearestClassMean().fit(codes, y, codec=PQCodec(codebook[:, :100]))


@pytest.mark.parametrize("chunked", [False, True], ids=["numpy", "dask"])
@pytest.mark.parametrize("rotated", [False, True], ids=["plain", "rotated"])
def test_adc_search_equals_brute_force_on_decoded_rows(pq_data, chunked, rotated):
    codes, _, codebook = pq_data
    rotation = ortho_group.rvs(DIM, random_state=3).astype(np.float32) if rotated else None
    X = decode(codes, codebook, rotation).astype(np.float64)
    queries = np.random.default_rng(4).normal(size=(9, DIM)).astype(np.float32)
    ids, distances = adc_search(
        queries, as_dask(codes) if chunked else codes, codebook, k=5, rotation=rotation
    )
    brute = ((queries[:, None, :].astype(np.float64) - X[None]) ** 2).sum(-1)
    expected = np.sort(brute, axis=1)[:, :5]
    assert ids.shape == distances.shape == (9, 5)
    np.testing.assert_allclose(distances, expected, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(
        np.take_along_axis(brute, ids, axis=1), expected, rtol=1e-4, atol=1e-3
    )


def test_adc_search_matches_faiss_index_pq(pq_data):
    faiss = pytest.importorskip("faiss")
    codes, _, codebook = pq_data
    index = faiss.IndexPQ(DIM, M, 8)
    faiss.copy_array_to_vector(codebook.ravel(), index.pq.centroids)
    index.is_trained = True
    faiss.copy_array_to_vector(codes.ravel(), index.codes)
    index.ntotal = N
    queries = np.random.default_rng(5).normal(size=(4, DIM)).astype(np.float32)
    expected_d, _ = index.search(queries, 3)
    _, distances = adc_search(queries, codes, codebook, k=3)
    np.testing.assert_allclose(distances, expected_d, rtol=1e-4, atol=1e-3)


def test_adc_chunks_shorter_than_k_merge_to_brute_force(pq_data):
    codes, _, codebook = pq_data
    X = decode(codes, codebook, None).astype(np.float64)
    queries = np.random.default_rng(6).normal(size=(3, DIM)).astype(np.float32)
    _, distances = adc_search(queries, as_dask(codes, rows=4), codebook, k=7)
    brute = np.sort(((queries[:, None, :].astype(np.float64) - X[None]) ** 2).sum(-1), axis=1)
    np.testing.assert_allclose(distances, brute[:, :7], rtol=1e-4, atol=1e-3)


def test_adc_k_larger_than_rows_returns_every_row(pq_data):
    codes, _, codebook = pq_data
    ids, _ = adc_search(np.zeros((2, DIM), np.float32), codes[:3], codebook, k=10)
    assert sorted(ids[0].tolist()) == [0, 1, 2]
