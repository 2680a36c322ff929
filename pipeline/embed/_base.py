"""Input checks and the lazy per-chunk plumbing shared by every embedding.

An embedding supplies `_transform_params()` (its fitted numpy arrays) and a static
`_transform_block(X, *params, row_start)` numpy kernel (`row_start` names rows in errors).
`RowTransformerMixin.transform` applies the kernel to a numpy array directly or, lazily, to each
row chunk of a dask array, with the parameters wrapped once (`compute.shared_arguments`):
one graph key, sent once to each worker rather than embedded in every task. Input chunks whose
embedding would exceed `_MAX_OUTPUT_CHUNK_BYTES` are embedded in row pieces, one task each, so a
wide embedding (RFF-2000 of a 512-wide chunk is 4× its bytes) never holds a block larger than
that on a worker.
"""

from __future__ import annotations

import itertools
from typing import Any

import dask
import dask.array as da
import numpy as np
from sklearn.base import TransformerMixin
from sklearn.utils.validation import check_is_fitted

from imgscale.pipeline.compute import shared_arguments
from imgscale.pipeline.rows import check_rows

# Largest embedded chunk (float32) one task produces: the design's 64–128 MiB chunk size, at its
# high end because every piece maps and checksums its whole input chunk file and the Gram
# consumer pays a fixed finish per block (fewer, larger pieces; `bench embed` measures both).
_MAX_OUTPUT_CHUNK_BYTES = 128 * 2**20


def split_row_chunks(chunks: tuple[int, ...], max_rows: int) -> tuple[int, ...]:
    """Each row chunk cut into the fewest nearly equal pieces of at most `max_rows` rows."""
    out: list[int] = []
    for rows in chunks:
        pieces = max(1, -(-rows // max_rows))
        base, extra = divmod(rows, pieces)
        out += [base + 1] * extra + [base] * (pieces - extra)
    return tuple(out)


def check_non_negative_block(X: np.ndarray, row_start: int, what: str) -> None:
    if X.size and X.min() < 0:
        rows = np.flatnonzero((X < 0).any(axis=1))[:10] + row_start
        raise ValueError(f"Negative values in data passed to {what}: rows {rows.tolist()}")


class RowTransformerMixin(TransformerMixin):
    """`transform` for numpy or row-chunked dask input, from a per-block numpy kernel."""

    def _check_rows(self, X: Any, *, reset: bool) -> Any:
        """X as float32 (numpy) or full-width row chunks cast lazily to float32 (dask); with
        ``reset`` (a fit), the parameters are checked first (`pipeline.params`)."""
        return check_rows(self, X, reset=reset)

    def transform(self, X: Any) -> Any:
        """Embed the rows of X: float32 (n, n_components_), lazy for dask input."""
        check_is_fitted(self)
        X = self._check_rows(X, reset=False)
        params = tuple(self._transform_params())
        if not isinstance(X, da.Array):
            return self._transform_block(X, *params, row_start=0)
        return _embed_pieces(X, self._transform_block, params, self._n_output_features())

    def _n_output_features(self) -> int:
        return int(self.n_components_)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float32"]
        return tags


def _embed_pieces(X: da.Array, kernel: Any, params: tuple, n_out: int) -> da.Array:
    """Each row chunk of X embedded by `kernel` in pieces of ≤ `_MAX_OUTPUT_CHUNK_BYTES`.

    Each piece is sliced from X on its own (``X[lo:hi]``), not rechunked: dask fuses a slice of a
    store's chunk into one read of those rows, so a consumer that inlines its blocks (e.g.
    `reduce_rows`) reads, embeds and reduces a piece in one task. A rechunk's (or a shared
    input chunk's) tasks feed several pieces, stay separate, and run ahead of the consumer, so
    finished pieces pile up in worker memory.
    """
    max_rows = max(1, _MAX_OUTPUT_CHUNK_BYTES // (4 * n_out))
    pieces = split_row_chunks(X.chunks[0], max_rows)
    if len(pieces) > X.numblocks[0]:
        # Optimised once (one fused read task per chunk) before the slicing: otherwise each
        # piece's optimisation re-materialises X's whole graph on the client, per piece, while
        # the workers wait.
        (X,) = dask.optimize(X)
        bounds = np.cumsum([0, *pieces]).tolist()
        X = da.concatenate([_own_task(X[lo:hi]) for lo, hi in itertools.pairwise(bounds)])
    return X.map_blocks(
        _embed_block,
        kernel,
        shared_arguments(params),
        chunks=(X.chunks[0], (n_out,)),
        dtype=np.float32,
        meta=np.empty((0, n_out), np.float32),
    )


def _own_task(piece: da.Array) -> da.Array:
    """`piece` (one block) as its own optimised task: a slice of a store chunk becomes one read
    of those rows (`da.concatenate` of the bare slices would keep them apart from the read)."""
    (block,) = piece.to_delayed().ravel()
    return da.from_delayed(block, piece.shape, dtype=piece.dtype, meta=piece._meta)


def _embed_block(block: np.ndarray, kernel: Any, params: tuple, block_info=None) -> np.ndarray:
    row_start = block_info[0]["array-location"][0][0] if block_info else 0
    return kernel(block, *params, row_start=row_start)
