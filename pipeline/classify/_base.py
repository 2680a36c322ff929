"""Input checks, label encoding and the predict / top-k plumbing shared by the classifiers.

A classifier supplies `_score_params()` (its fitted arrays) and a static `_scores(X, *params)`
numpy kernel giving one float32 score per class; this module turns that into
`decision_function`, `predict` and `predict_top_k` on numpy arrays and, lazily with `map_blocks`,
on row-chunked dask arrays.
"""

from __future__ import annotations

from typing import Any

import dask
import dask.array as da
import numpy as np
from sklearn.base import ClassifierMixin, TransformerMixin
from sklearn.utils import Tags
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, column_or_1d

from imgscale.pipeline.compute import compute, shared_arguments
from imgscale.pipeline.rows import check_rows
from imgscale.pipeline.top_k import top_k_columns

UNLABELLED = -1
_UNKNOWN = -2
# encode_labels' lookup table is used for integer class ids below 4 per class + 65,536.
_TABLE_PER_CLASS, _TABLE_MIN = 4, 2**16

# Rows scored at a time in predict/top-k: bounds the rows × classes float32 temporary.
_SCORE_ROWS = 4096


def is_unlabelled(y: np.ndarray) -> np.ndarray:
    """Rows marked -1 (scikit-learn's semi-supervised convention); only numeric labels can be."""
    if y.dtype.kind in "iuf":
        return y == UNLABELLED
    return np.zeros(y.shape, dtype=bool)


def unique_labels(y: Any) -> np.ndarray:
    """Sorted distinct labels other than -1 (one pass over y if it is a dask array)."""
    if isinstance(y, da.Array):
        y = compute(da.unique(y))[0]
    y = np.unique(y)
    return y[~is_unlabelled(y)]


def grown_classes(old: np.ndarray | None, y: Any, classes: Any = None) -> np.ndarray:
    """`old` (None before the first fit) followed by the sorted labels of y and `classes` not
    among them: partial_fit appends classes, so the index of a known class never moves."""
    seen = unique_labels(y)
    if classes is not None:
        seen = np.union1d(seen, unique_labels(np.asarray(classes)))
    if old is None:
        return seen
    return np.concatenate([old, np.setdiff1d(seen, old)])


def checked_grid(grid: Any, value: Any, name: str) -> np.ndarray:
    """`grid` (parameter `<name>_grid`) as float64, non-empty and positive; `value` (parameter
    `<name>`) positive or None."""
    checked = np.asarray(grid, dtype=np.float64).ravel()
    if len(checked) == 0 or not np.all(checked > 0):
        raise ValueError(f"{name}_grid must be non-empty and positive, got {grid}")
    if value is not None and not value > 0:
        raise ValueError(f"{name} must be positive or None, got {value}")
    return checked


def encode_labels(y: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Class index of each label in `classes` (any order), -1 for unlabelled rows."""
    y = np.asarray(y)
    if len(classes) and _small_class_ids(y, classes):
        # A table lookup, one gather per label instead of a sort and a search. Labels outside
        # [-1, max] read the unknown slot after the classes; -1 reads the last entry.
        top = int(classes.max())
        table = np.full(top + 3, _UNKNOWN, dtype=np.int64)
        table[classes] = np.arange(len(classes))
        table[UNLABELLED] = UNLABELLED
        index = table[np.where((y >= UNLABELLED) & (y <= top), y, top + 1)]
        unknown = index == _UNKNOWN
    else:
        index = np.full(y.shape, UNLABELLED, dtype=np.int64)
        labelled = ~is_unlabelled(y)
        if len(classes) == 0:
            if labelled.any():
                raise ValueError(f"unknown labels {np.unique(y[labelled])[:10].tolist()}")
            return index
        order = np.argsort(classes, kind="stable")
        pos = np.searchsorted(classes, y[labelled], sorter=order).clip(0, len(classes) - 1)
        found = order[pos]
        index[labelled] = found
        unknown = np.zeros(y.shape, dtype=bool)
        unknown[labelled] = classes[found] != y[labelled]
    if unknown.any():
        bad = np.unique(y[unknown])[:10].tolist()
        raise ValueError(f"labels {bad} are not among the classes {classes[:10].tolist()}...")
    return index


def _small_class_ids(y: np.ndarray, classes: np.ndarray) -> bool:
    """Whether `classes` are non-negative integers small enough to index a lookup table."""
    return (
        y.dtype.kind in "iu"
        and classes.dtype.kind in "iu"
        and classes.min() >= 0
        and classes.max() < _TABLE_PER_CLASS * len(classes) + _TABLE_MIN
    )


def encode_labels_lazy(y: Any, classes: np.ndarray) -> Any:
    """`encode_labels` for numpy or (block-wise, lazily) dask labels."""
    if isinstance(y, da.Array):
        return y.map_blocks(encode_labels, dask.delayed(classes, pure=True), dtype=np.int64)
    return encode_labels(y, classes)


def _top_k_block(X: np.ndarray, scores: Any, params: tuple, classes: np.ndarray, k: int):
    out = np.empty((len(X), k), dtype=classes.dtype)
    for start in range(0, len(X), _SCORE_ROWS):
        s = scores(X[start : start + _SCORE_ROWS], *params)
        out[start : start + len(s)] = classes[top_k_columns(s, k)]
    return out


def _predict_block(X: np.ndarray, scores: Any, params: tuple, classes: np.ndarray):
    out = np.empty(len(X), dtype=classes.dtype)
    for start in range(0, len(X), _SCORE_ROWS):
        s = scores(X[start : start + _SCORE_ROWS], *params)
        out[start : start + len(s)] = classes[np.argmax(s, axis=1)]
    return out


def _decision_block(X: np.ndarray, scores: Any, params: tuple, binary: bool):
    s = scores(X, *params)
    # scikit-learn's binary convention: one column, positive favours classes_[1].
    return s[:, 1] - s[:, 0] if binary else s


class RowClassifierMixin(ClassifierMixin):
    """decision_function / predict / predict_top_k for numpy or row-chunked dask input."""

    def _check_fit_input(self, X: Any, y: Any, *, reset: bool) -> tuple[Any, Any]:
        X = check_rows(self, X, reset=reset)
        if not isinstance(y, da.Array):
            y = column_or_1d(y, warn=True)
            check_classification_targets(y)
        if len(y) != X.shape[0]:
            raise ValueError(f"X has {X.shape[0]} rows but y has {len(y)} labels")
        return X, y

    def _check_predict_input(self, X: Any) -> Any:
        check_is_fitted(self)
        return self._check_rows(X)

    def _check_rows(self, X: Any) -> Any:
        """Rows to score with the fitted (or being fitted) feature count, as float32."""
        return check_rows(self, X, reset=False)

    def _map_rows(self, X: Any, block_fn: Any, *args: Any, n_cols: int | None, dtype: Any):
        params = tuple(self._score_params())
        if not isinstance(X, da.Array):
            return block_fn(X, self._scores, params, *args)
        shared = shared_arguments(params)
        if n_cols is None:
            return X.map_blocks(block_fn, self._scores, shared, *args, dtype=dtype, drop_axis=1)
        return X.map_blocks(
            block_fn, self._scores, shared, *args, dtype=dtype, chunks=(X.chunks[0], (n_cols,))
        )

    def decision_function(self, X: Any) -> Any:
        """Per-class scores (n, C); for two classes, scikit-learn's (n,) score of classes_[1]."""
        X = self._check_predict_input(X)
        binary = len(self.classes_) == 2
        n_cols = None if binary else len(self.classes_)
        return self._map_rows(X, _decision_block, binary, n_cols=n_cols, dtype=np.float32)

    def predict(self, X: Any) -> Any:
        """The best-scoring class of each row (ties go to the earlier class in `classes_`)."""
        X = self._check_predict_input(X)
        classes = np.asarray(self.classes_)
        return self._map_rows(X, _predict_block, classes, n_cols=None, dtype=classes.dtype)

    def _check_top_k_input(self, X: Any, k: int) -> tuple[Any, np.ndarray, int]:
        """Checked rows, `classes_` as an array and k capped at the number of classes."""
        X = self._check_predict_input(X)
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        classes = np.asarray(self.classes_)
        return X, classes, min(k, len(classes))

    def predict_top_k(self, X: Any, k: int = 5) -> Any:
        """The k best classes of each row, best first (n, min(k, C)); column 0 equals `predict`."""
        X, classes, k = self._check_top_k_input(X, k)
        return self._map_rows(X, _top_k_block, classes, k, n_cols=k, dtype=classes.dtype)


class ProjectionMixin(TransformerMixin):
    """`transform` for a classifier that scores rows after a learned projection `components_`."""

    def __sklearn_tags__(self) -> Tags:
        tags = super().__sklearn_tags__()
        # The projected rows are float32 whatever came in.
        tags.transformer_tags.preserves_dtype = ["float32"]
        return tags

    def transform(self, X: Any) -> Any:
        """Projected rows Wx (n, d)."""
        check_is_fitted(self, "components_")
        X = self._check_rows(X)
        W = self.components_.T
        if isinstance(X, da.Array):
            return X.map_blocks(np.matmul, W, dtype=np.float32, chunks=(X.chunks[0], W.shape[1]))
        return X @ W


class LinearClassifierMixin(RowClassifierMixin):
    """RowClassifierMixin for linear scores X coef_ᵀ + intercept_."""

    def _score_params(self) -> tuple[np.ndarray, np.ndarray]:
        return self.coef_, self.intercept_

    @staticmethod
    def _scores(X: np.ndarray, coef: np.ndarray, intercept: np.ndarray) -> np.ndarray:
        return X @ coef.T + intercept
