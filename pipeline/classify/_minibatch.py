"""Random minibatches of rows for SGD metric learning (paper 002 §3, §4.1).

SGD touches m ≪ n rows per iteration. On a numpy array the rows are taken directly. On a
row-chunked dask array one random row costs a whole chunk read, so rows are drawn uniformly into
a pool of ``pool_rows`` in one pass (one task per chunk, each returning only its selected rows)
and minibatches are drawn without replacement from the pool; a fresh pool is drawn once it is
used up (a pool holding every labelled row is reshuffled instead). On PQ codes the pool holds
codes (M bytes a row) and only the rows of a minibatch are decoded, as in §4.1 ("we decompress
the features of a limited number of images").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dask.array as da
import numpy as np

from imgscale.pipeline.compute import gather_rows


class RowSampler:
    """Uniform random labelled rows of X (numpy or dask; raw rows or codes with ``decode``).

    ``y_index`` is the numpy class index of every row, -1 for unlabelled rows (never drawn).
    """

    def __init__(
        self,
        X: Any,
        y_index: np.ndarray,
        rng: np.random.Generator,
        *,
        decode: Callable[[np.ndarray], np.ndarray] | None = None,
        pool_rows: int = 131_072,
    ):
        self.X, self.y_index, self.rng = X, np.asarray(y_index), rng
        self.decode = decode
        self.pool_rows = int(pool_rows)
        self.candidates = np.flatnonzero(self.y_index >= 0)
        if len(self.candidates) == 0:
            raise ValueError("no labelled rows to sample")
        self._pool: tuple[np.ndarray, np.ndarray] | None = None
        self._order = np.empty(0, np.intp)

    def _fetch(self, index: np.ndarray) -> np.ndarray:
        """Rows ``index`` (sorted) as stored: one selection per chunk on dask input."""
        return gather_rows(self.X, index)

    def _rows(self, stored: np.ndarray) -> np.ndarray:
        rows = stored if self.decode is None else self.decode(stored)
        return np.asarray(rows, dtype=np.float32)

    def hold_out(self, size: int) -> tuple[np.ndarray, np.ndarray]:
        """Draw ``size`` rows (at most a fifth of the labelled rows) that later minibatches
        never contain: a validation set."""
        size = min(int(size), len(self.candidates) // 5)
        if size <= 0:
            raise ValueError(
                f"too few labelled rows to hold out a validation set: n_samples = "
                f"{len(self.candidates)}"
            )
        index = np.sort(self.rng.choice(self.candidates, size, replace=False))
        self.candidates = np.setdiff1d(self.candidates, index, assume_unique=True)
        self._pool = None
        return self._rows(self._fetch(index)), self.y_index[index]

    def sample(self, size: int) -> tuple[np.ndarray, np.ndarray]:
        """``size`` rows drawn without replacement from the (not held out) candidates."""
        size = min(int(size), len(self.candidates))
        index = np.sort(self.rng.choice(self.candidates, size, replace=False))
        return self._rows(self._fetch(index)), self.y_index[index]

    def batch(self, size: int) -> tuple[np.ndarray, np.ndarray]:
        """One minibatch of ``size`` rows (float32, decoded) and their class indices."""
        if not isinstance(self.X, da.Array):
            index = self.rng.choice(self.candidates, min(size, len(self.candidates)), False)
            return self._rows(np.asarray(self.X)[index]), self.y_index[index]
        if self._pool is None or len(self._order) < size:
            rows = min(max(self.pool_rows, size), len(self.candidates))
            # A pool of every candidate is reshuffled, not fetched again: same distribution.
            if self._pool is None or rows < len(self.candidates):
                index = np.sort(self.rng.choice(self.candidates, rows, replace=False))
                self._pool = (self._fetch(index), self.y_index[index])
            self._order = self.rng.permutation(rows)
        take, self._order = self._order[:size], self._order[size:]
        stored, labels = self._pool
        return self._rows(stored[take]), labels[take]
