"""Input checks, row sampling and the lazy per-chunk plumbing shared by every embedding.

An embedding supplies `_transform_params()` (its fitted numpy arrays) and a static
`_transform_block(X, *params, row_start)` numpy kernel (`row_start` names rows in errors).
`RowTransformerMixin.transform` applies the kernel to a numpy array directly or, lazily, to each
row chunk of a dask array, with the parameters wrapped once in `dask.delayed(..., pure=True)`:
one graph key, sent once to each worker rather than embedded in every task. Input chunks whose
embedding would exceed `_MAX_OUTPUT_CHUNK_BYTES` are embedded in row pieces, one task each, so a
wide embedding (RFF-2000 of a 512-wide chunk is 4× its bytes) never holds a block larger than
that on a worker.
"""

from __future__ import annotations

from typing import Any

import dask
import dask.array as da
import numpy as np
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph
from sklearn.base import TransformerMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from pipeline._compute import gather_rows
from pipeline.classify._base import check_dask_X

# Largest embedded chunk (float32) one task produces: the design's 64–128 MiB chunk size, at its
# low end because each worker also holds the input chunk and the consumer's temporaries.
_MAX_OUTPUT_CHUNK_BYTES = 64 * 2**20


def split_row_chunks(chunks: tuple[int, ...], max_rows: int) -> tuple[int, ...]:
    """Each row chunk cut into the fewest nearly equal pieces of at most `max_rows` rows."""
    out: list[int] = []
    for rows in chunks:
        pieces = max(1, -(-rows // max_rows))
        base, extra = divmod(rows, pieces)
        out += [base + 1] * extra + [base] * (pieces - extra)
    return tuple(out)


def sample_rows(X: Any, n_samples: int, random_state: Any) -> np.ndarray:
    """`n_samples` distinct rows of `X` (all rows if fewer), in row order, as float32 numpy.

    Row indices are drawn on the client and the rows gathered chunk by chunk (`gather_rows`), so
    only the sample, never the n-row array, reaches the client.
    """
    n_rows = X.shape[0]
    rng = check_random_state(random_state)
    if n_samples >= n_rows:
        index = np.arange(n_rows)
    else:
        index = np.sort(rng.choice(n_rows, n_samples, replace=False))
    return np.ascontiguousarray(gather_rows(X, index), dtype=np.float32)


def check_non_negative_block(X: np.ndarray, row_start: int, what: str) -> None:
    if X.size and X.min() < 0:
        rows = np.flatnonzero((X < 0).any(axis=1))[:10] + row_start
        raise ValueError(f"Negative values in data passed to {what}: rows {rows.tolist()}")


class RowTransformerMixin(TransformerMixin):
    """`transform` for numpy or row-chunked dask input, from a per-block numpy kernel."""

    def _check_rows(self, X: Any, *, reset: bool) -> Any:
        """X as float32 (numpy) or full-width row chunks cast lazily to float32 (dask)."""
        if isinstance(X, da.Array):
            X = check_dask_X(X, None if reset else self.n_features_in_)
            if reset:
                self.n_features_in_ = int(X.shape[1])
            return X
        return validate_data(self, X, reset=reset, dtype=np.float32)

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

    A piece's task slices its rows out of the input chunk itself, so each output block is one
    task that depends on the input chunk directly. A consumer that inlines its blocks (e.g.
    `reduce_rows`) then embeds a piece only when it is about to reduce it; with a rechunk of X
    instead, the sliced input pieces were separate tasks that the workers ran far ahead of the
    consumer (measured: ~600 MB of 512-wide pieces waiting on one worker at 1M rows).
    """
    max_rows = max(1, _MAX_OUTPUT_CHUNK_BYTES // (4 * n_out))
    shared = dask.delayed(params, pure=True)
    name = "embed-" + tokenize(X.name, kernel, shared.key, max_rows)
    graph, row_chunks, row_start = {}, [], 0
    for b, rows in enumerate(X.chunks[0]):
        lo = 0
        for piece in split_row_chunks((rows,), max_rows):
            task = (_embed_rows, (X.name, b, 0), lo, lo + piece, kernel, shared.key, row_start)
            graph[(name, len(row_chunks), 0)] = task
            row_chunks.append(piece)
            lo += piece
            row_start += piece
    layers = HighLevelGraph.from_collections(name, graph, dependencies=[X, shared])
    return da.Array(layers, name, chunks=(tuple(row_chunks), (n_out,)), dtype=np.float32)


def _embed_rows(
    chunk: np.ndarray, lo: int, hi: int, kernel: Any, params: tuple, row_start: int
) -> np.ndarray:
    return kernel(chunk[lo:hi], *params, row_start=row_start)
