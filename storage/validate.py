"""Checks on one block of rows before anything is written, so bad input never reaches disk.

Each function takes ``where`` (store, batch and row range) and ``first_row`` (the block's first
row in store coordinates) so messages point at the offending rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from imgscale.storage.errors import StoreError
from imgscale.storage.layout import FULL_DIGEST_BYTES, ROW_DIGEST_BYTES

FLOAT32_MAX = float(np.finfo(np.float32).max)


def as_features(X: Any, dim: int, where: str, first_row: int) -> np.ndarray:
    """``X`` as a C-contiguous float32 (n, dim) array of finite values whose squared norms are
    finite in float32 too.

    Integer sources (uint8 images, bvecs) convert exactly enough for features. bool is refused:
    a boolean 2-D array reaching ``append`` is far more often a mask passed by mistake than binary
    features, and genuine binary features cost one explicit ``astype(np.float32)``.
    """
    X = np.asarray(X)
    if X.dtype.kind not in "fiu":
        raise StoreError(
            f"{where}: features have dtype {X.dtype}; expected a real numeric dtype "
            "(float or integer; bool, complex, strings and objects are refused)"
        )
    if X.ndim != 2 or X.shape[1] != dim:
        raise StoreError(f"{where}: features have shape {X.shape}; expected (n, {dim})")
    with np.errstate(over="ignore"):  # float64 beyond float32 range becomes inf, reported below
        X = np.ascontiguousarray(X, dtype=np.float32)
    # A row's float32 squared norm is inf or NaN exactly when an entry is, or when the finite
    # entries' squares overflow: such rows would make distances and Gram entries inf downstream
    # (a bandwidth of 0, a NaN solve). One pass over X finds both; only those rows are looked at.
    suspect = np.flatnonzero(~np.isfinite(np.einsum("ij,ij->i", X, X)))
    if suspect.size:
        bad = suspect[~np.isfinite(X[suspect]).all(axis=1)]
        if bad.size:
            raise StoreError(
                f"{where}: {bad.size} rows contain NaN/inf (first at row {first_row + bad[0]}); "
                "expected finite float32 values"
            )
        raise StoreError(
            f"{where}: {suspect.size} rows have a squared norm beyond float32's range (first at "
            f"row {first_row + suspect[0]}); expected ‖x‖² ≤ {FLOAT32_MAX:.3g} so distances "
            "and Gram entries stay finite"
        )
    return X


def as_strings(values: Any, n: int, what: str, where: str) -> list[str]:
    """A per-row list of str; a single str is repeated for every row."""
    if isinstance(values, str):
        return [values] * n
    array = np.asarray(values)
    if array.shape != (n,):
        raise StoreError(f"{where}: {what} have shape {array.shape}; expected ({n},), one per row")
    out = array.tolist()
    if not all(isinstance(v, str) for v in out):
        raise StoreError(f"{where}: {what} have dtype {array.dtype}; expected strings")
    if "" in out:
        raise StoreError(f"{where}: empty {what[:-1]} at row {out.index('')}; expected non-empty")
    return out


def as_codes(codes: Any, m: int, where: str) -> np.ndarray:
    """A coded store's codes as a C-contiguous uint8 (n, m) array.

    Only uint8 is accepted: any other dtype (float rows passed to a coded store, or int codes
    that may hold values ≥ 256) is a caller mistake that a silent cast would turn into wrong rows.
    """
    codes = np.asarray(codes)
    if codes.dtype != np.uint8:
        raise StoreError(
            f"{where}: codes have dtype {codes.dtype}; expected uint8 codes (encode float rows "
            "with the store's codec first)"
        )
    if codes.ndim != 2 or codes.shape[1] != m:
        raise StoreError(f"{where}: codes have shape {codes.shape}; expected (n, {m})")
    return np.ascontiguousarray(codes)


def as_digests(
    values: Any, n: int, where: str, width: int = ROW_DIGEST_BYTES
) -> pa.FixedSizeBinaryArray:
    """Per-row digests of ``width`` bytes: the first 16 bytes of each sha256 as rows carry them
    (`layout.row_digest`), or whole (``width`` 32, as rejects carry them); from (n, 32) uint8
    or n ``bytes`` of 32 (whole sha256 digests), or of ``width`` (a row copied from a store)."""
    widths = {FULL_DIGEST_BYTES, width}
    if isinstance(values, np.ndarray) and values.dtype == np.uint8:
        if values.ndim != 2 or values.shape[0] != n or values.shape[1] not in widths:
            raise StoreError(f"{where}: sha256 of shape {values.shape}; expected ({n}, 32)")
        digests = np.ascontiguousarray(values[:, :width])
        return pa.FixedSizeBinaryArray.from_buffers(
            pa.binary(width), n, [None, pa.py_buffer(digests.tobytes())]
        )
    values = list(values)
    if len(values) != n or not all(isinstance(v, bytes) and len(v) in widths for v in values):
        raise StoreError(f"{where}: expected {n} sha256 digests of 32 bytes, one per row")
    return pa.array([v[:width] for v in values], pa.binary(width))
