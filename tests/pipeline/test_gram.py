"""pipeline.gram.add_gram in both precisions against the float64 product XᵀX in numpy."""

import numpy as np
import pytest

from imgscale.pipeline import gram as gram_module
from imgscale.pipeline.gram import add_gram


def rows(offset=0.0, n=700, d=9, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, d)) + offset).astype(np.float32)


def exact_gram(X):
    X64 = X.astype(np.float64)
    return X64.T @ X64


def centred(gram, X):
    """G − n μμᵀ: the part of the Gram a centred ridge system keeps."""
    mean = X.astype(np.float64).mean(axis=0)
    return gram - len(X) * np.outer(mean, mean)


def gram_of(X, precision, start=None):
    gram = np.zeros((X.shape[1], X.shape[1])) if start is None else start.copy()
    add_gram(gram, X, precision)
    return gram


def test_float64_gram_equals_numpy():
    X = rows()
    np.testing.assert_allclose(gram_of(X, "float64"), exact_gram(X), rtol=1e-12)


@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_gram_is_added_to_what_is_there(precision):
    # A symmetric start, as every Gram sum is (the float32 path mirrors its lower triangle).
    X, start = rows(), np.arange(81.0).reshape(9, 9)
    start += start.T
    expected = start + exact_gram(X)
    tolerance = 1e-5 * np.abs(expected).max()
    np.testing.assert_allclose(gram_of(X, precision, start), expected, rtol=0, atol=tolerance)


def test_float32_gram_is_symmetric_and_within_float32_rounding_of_numpy():
    X = rows()
    gram = gram_of(X, "float32")
    np.testing.assert_array_equal(gram, gram.T)
    # A sum of ≤ 2048 float32 products: relative error far below 2048·2⁻²⁴ ≈ 1.2e-4.
    np.testing.assert_allclose(gram, exact_gram(X), rtol=0, atol=1e-5 * np.abs(exact_gram(X)).max())


def test_float32_error_is_relative_to_the_spread_not_the_offset_of_the_rows():
    # Offset 1000 × spread 1: without the shift, float32 products of the raw rows would carry
    # errors ~1e6 × 2⁻²⁴ per entry, the size of the centred Gram's entries themselves.
    X = rows(offset=1000.0)
    expected = centred(exact_gram(X), X)
    got = centred(gram_of(X, "float32"), X)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4 * np.abs(expected).max())


def test_float32_error_is_within_the_stated_bound():
    # One full sub-block of rows offset from 0: the error of each entry, relative to that entry
    # of Σ |x − c||x − c|ᵀ (c the rows' float32 mean), against the exact float64 product.
    X = rows(offset=5.0, n=gram_module._FLOAT32_SUB_ROWS, d=16, seed=4)
    c = X.mean(axis=0, dtype=np.float64).astype(np.float32).astype(np.float64)
    spread = np.abs(X.astype(np.float64) - c)
    scale = spread.T @ spread
    error = np.abs(gram_of(X, "float32") - exact_gram(X)) / scale
    assert error.max() <= gram_module.FLOAT32_RELATIVE_ERROR
    assert gram_module.FLOAT32_RELATIVE_ERROR == pytest.approx(1.2e-4, rel=0.03)


def test_float32_gram_does_not_depend_on_the_sub_block_or_band_size(monkeypatch):
    X = rows(offset=3.0)
    whole = gram_of(X, "float32")
    monkeypatch.setattr(gram_module, "_FLOAT32_SUB_ROWS", 7)
    monkeypatch.setattr(gram_module, "_BAND_ROWS", 2)
    np.testing.assert_allclose(gram_of(X, "float32"), whole, rtol=1e-6)


@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_no_rows_add_nothing(precision):
    start = np.eye(4)
    np.testing.assert_array_equal(gram_of(np.empty((0, 4), np.float32), precision, start), start)


def test_unknown_precision_is_rejected():
    with pytest.raises(ValueError, match="float16"):
        add_gram(np.zeros((9, 9)), rows(), "float16")


def test_float32_gram_with_the_callers_row_sums_equals_its_own():
    """chunk_row_stats passes the row sums it has already taken; the shift is undone with them."""
    X = rows(offset=5.0)
    given = np.zeros((9, 9))
    add_gram(given, X, "float32", row_sum=X.sum(axis=0, dtype=np.float64))
    np.testing.assert_array_equal(given, gram_of(X, "float32"))
    np.testing.assert_allclose(centred(given, X), centred(exact_gram(X), X), rtol=1e-5, atol=1e-3)
