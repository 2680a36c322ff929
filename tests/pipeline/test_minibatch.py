"""RowSampler: uniform minibatches of labelled rows from numpy or dask rows."""

from __future__ import annotations

import dask.array as da
import numpy as np

from imgscale.pipeline.classify._minibatch import RowSampler


def _rows_and_labels(n: int = 60):
    X = np.arange(n, dtype=np.float32)[:, None] * np.ones((1, 3), np.float32)
    y_index = np.arange(n) % 4
    y_index[::7] = -1  # unlabelled rows are never drawn
    return X, y_index


def test_a_pool_of_every_labelled_row_is_read_once_and_reshuffled(monkeypatch):
    X, y_index = _rows_and_labels()
    sampler = RowSampler(da.from_array(X, chunks=(16, 3)), y_index, np.random.default_rng(0))
    fetches = []
    fetch = sampler._fetch
    monkeypatch.setattr(sampler, "_fetch", lambda index: fetches.append(index) or fetch(index))
    labelled = np.flatnonzero(y_index >= 0)
    epochs = [np.concatenate([sampler.batch(len(labelled) // 3)[0][:, 0] for _ in range(3)])]
    epochs.append(np.concatenate([sampler.batch(len(labelled) // 3)[0][:, 0] for _ in range(3)]))
    assert len(fetches) == 1
    for drawn in epochs:  # each pass over the pool draws every labelled row once
        np.testing.assert_array_equal(np.sort(drawn), labelled.astype(np.float32))
    assert not np.array_equal(epochs[0], epochs[1])


def test_a_smaller_pool_is_drawn_again_when_used_up():
    X, y_index = _rows_and_labels()
    sampler = RowSampler(
        da.from_array(X, chunks=(16, 3)), y_index, np.random.default_rng(0), pool_rows=10
    )
    drawn = np.concatenate([sampler.batch(5)[0][:, 0] for _ in range(40)])
    labelled = np.flatnonzero(y_index >= 0)
    assert set(drawn.astype(int)) <= set(labelled)
    assert len(set(drawn.astype(int))) > 10  # rows beyond the first pool of 10 were drawn
