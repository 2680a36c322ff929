"""Nearest class mean classifier with the ℓ2 metric (paper 002 §3.2 with W = I)."""

from __future__ import annotations

from typing import Any, ClassVar

import dask.array as da
import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, column_or_1d

from imgscale.pipeline.classify._base import RowClassifierMixin, encode_labels_lazy, grown_classes
from imgscale.pipeline.classify._row_stats import changed_stats
from imgscale.pipeline.coded_rows import RowDecoder, check_codes, coded_row_stats
from imgscale.pipeline.fitted import Shape
from imgscale.pipeline.params import check_params
from imgscale.pipeline.reductions import RowStats, lazy_row_stats, row_stats


class NearestClassMean(RowClassifierMixin, BaseEstimator):
    """Assign each row to the class whose mean is nearest: argmax_c −‖x − μ_c‖².

    Fitting is one pass of class sums and counts; a class is added, or updated with new rows,
    without touching the means of the other classes ("new classes at near-zero cost").

    Every fitting method takes float rows, or with ``codec`` the codes of a coded store
    (`pipeline.coded_rows`): the class sums are those of the rows the codes decode to, computed
    by the codec on the codes where it can (product quantization gathers centroids, decoding no
    row), else decoded a block at a time. The fitted state is the same either way, so the model
    scores float rows (decoded or raw) and later fits may take either.

    Attributes
    ----------
    classes_ : ndarray of shape (C,)
        Labels, sorted by `fit`; `partial_fit` appends classes it has not seen.
    means_ : ndarray of shape (C, D), float32
        Class means μ_c.
    class_sums_ : ndarray of shape (C, D), float64
    class_counts_ : ndarray of shape (C,), int64
        Sufficient statistics that `partial_fit` adds to.
    n_features_in_ : int

    References
    ----------
    Mensink, Verbeek, Perronnin & Csurka, "Metric learning for large scale image classification:
    generalizing to new classes at near-zero cost", ECCV 2012, §3.2 (here with W = I).
    """

    # The fitted arrays and their shapes (`pipeline.fitted`): C classes, D features.
    _fitted_shapes: ClassVar[dict[str, Shape]] = {
        "class_sums_": ("C", "D"),
        "class_counts_": ("C",),
        "means_": ("C", "D"),
    }

    def fit(self, X: Any, y: Any, *, codec: RowDecoder | None = None) -> NearestClassMean:
        """One pass over (X, y); rows labelled -1 are ignored. With ``codec``, X are codes it
        decodes: (n, W) uint8, numpy or row-chunked dask."""
        return self._add_rows(X, y, None, codec, first=True)

    def partial_fit(
        self, X: Any, y: Any, classes: Any = None, *, codec: RowDecoder | None = None
    ) -> NearestClassMean:
        """Add rows and new classes; means of classes that get no rows stay bit-identical."""
        return self._add_rows(X, y, classes, codec, first=not hasattr(self, "classes_"))

    def update(
        self, added: tuple[Any, Any], removed: tuple[Any, Any], *, codec: RowDecoder | None = None
    ) -> np.ndarray:
        """Bring the fit up to date with rows added and rows removed, each an (X, y) pair (X
        codes with ``codec``), in one pass over them only; returns the classes left with no rows
        (removed from the model).

        The result is the fit from scratch on the rows as they now are (classes sorted as `fit`
        sorts them), to float64 rounding of the class sums: a class mean is a sum (paper 002
        §1, §4.4).
        """

        def stats_of(X: Any, y_index: Any, n_classes: int) -> RowStats:
            if codec is None:
                return lazy_row_stats(self._check_rows(X), y_index, n_classes, gram=False)
            return coded_row_stats(check_codes(X, codec), y_index, n_classes, codec)

        return self._apply_change(stats_of, added, removed)

    def _apply_change(self, stats_of: Any, added: tuple, removed: tuple) -> np.ndarray:
        check_is_fitted(self)
        kept = RowStats(0, np.zeros(self.n_features_in_), self.class_sums_, self.class_counts_)
        stats, classes, dropped = changed_stats(
            kept, np.asarray(self.classes_), stats_of, added, removed
        )
        if len(classes) == 0:
            raise ValueError("no labelled rows are left: the model would have no classes")
        means = np.zeros(stats.class_sums.shape, dtype=np.float32)
        means[:] = stats.class_sums / stats.class_counts[:, None]
        self.classes_ = classes
        self.class_sums_ = stats.class_sums
        self.class_counts_ = stats.class_counts
        self.means_ = means
        return dropped

    def add_class(
        self, X: Any, label: Any, *, replace: bool = False, codec: RowDecoder | None = None
    ) -> NearestClassMean:
        """Add class ``label`` from its rows X (codes with ``codec``), or add them to the class
        if it exists; with ``replace`` they become its only rows. The means of the other classes
        stay bit-identical (paper 002 §4.4)."""
        self._start_class(label, replace)
        return self.partial_fit(X, _labels_of(label, len(X)), codec=codec)

    def _start_class(self, label: Any, replace: bool) -> None:
        """Check the model is fitted; with ``replace``, forget the rows of class ``label``."""
        check_is_fitted(self)
        if not replace:
            return
        found = np.flatnonzero(np.asarray(self.classes_) == label)
        if len(found) == 0:
            raise ValueError(f"no class {label!r} to replace; the model has {self.classes_[:10]}")
        self.class_sums_ = self.class_sums_.copy()
        self.class_counts_ = self.class_counts_.copy()
        self.class_sums_[found[0]] = 0
        self.class_counts_[found[0]] = 0

    def _add_rows(
        self, X: Any, y: Any, classes: Any, codec: RowDecoder | None, *, first: bool
    ) -> NearestClassMean:
        if codec is None:
            X, y = self._check_fit_input(X, y, reset=first)

            def stats(y_index: Any, n_classes: int) -> RowStats:
                return row_stats(X, y_index, n_classes, gram=False)

        else:
            X, y = self._check_codes_input(X, y, codec, first=first)

            def stats(y_index: Any, n_classes: int) -> RowStats:
                return coded_row_stats(X, y_index, n_classes, codec)

        return self._add_stats(y, classes, stats, first=first)

    def _check_codes_input(
        self, codes: Any, y: Any, codec: RowDecoder, *, first: bool
    ) -> tuple[Any, Any]:
        """(codes, y) checked as `_check_fit_input` checks rows; sets `n_features_in_` to the
        codec's dimension on a first fit."""
        if not first and codec.dim != self.n_features_in_:
            raise ValueError(
                f"codec decodes to {codec.dim} features, but the model expects "
                f"{self.n_features_in_}"
            )
        codes = check_codes(codes, codec)
        if not isinstance(y, da.Array):
            y = column_or_1d(y, warn=True)
            check_classification_targets(y)
        if len(y) != codes.shape[0]:
            raise ValueError(f"codes have {codes.shape[0]} rows but y has {len(y)} labels")
        if first:
            check_params(self)
            self.n_features_in_ = codec.dim
        return codes, y

    def _add_stats(self, y: Any, classes: Any, stats_of: Any, *, first: bool) -> NearestClassMean:
        old = None if first else np.asarray(self.classes_)
        all_classes = grown_classes(old, y, classes)
        if len(all_classes) == 0:
            raise ValueError("y has no labelled rows (every label is -1)")
        stats = stats_of(encode_labels_lazy(y, all_classes), len(all_classes))
        added_counts = stats.class_counts
        if not first:
            stats = RowStats(0, stats.feature_sum, self.class_sums_, self.class_counts_) + stats
        empty = all_classes[stats.class_counts == 0]
        if len(empty):
            raise ValueError(f"classes {empty[:10].tolist()} have no labelled rows")
        means = np.zeros(stats.class_sums.shape, dtype=np.float32)
        if not first:
            means[: len(old)] = self.means_
        touched = added_counts > 0
        means[touched] = stats.class_sums[touched] / stats.class_counts[touched, None]
        self.classes_ = all_classes
        self.class_sums_ = stats.class_sums
        self.class_counts_ = stats.class_counts
        self.means_ = means
        return self

    def predict_log_proba(self, X: Any) -> Any:
        """log p(c|x) (n, C) of paper 002 eq. 2: the softmax over classes of −½ d(x, μ_c).

        ``decision_function``'s −d(x, μ_c) holds a per-row ‖x‖² that does not change a row's
        ranking of classes but does change the ranking of rows for one class (MiAP); the
        posterior is comparable across rows. Logs, so far rows keep their order instead of all
        underflowing to 0.
        """
        X = self._check_predict_input(X)
        return self._map_rows(X, _log_posterior_block, n_cols=len(self.classes_), dtype=np.float32)

    def predict_proba(self, X: Any) -> Any:
        """p(c|x) (n, C) of paper 002 eq. 2 (see `predict_log_proba`)."""
        log_proba = self.predict_log_proba(X)
        return da.exp(log_proba) if isinstance(log_proba, da.Array) else np.exp(log_proba)

    def _score_params(self) -> tuple[np.ndarray]:
        return (self.means_,)

    @staticmethod
    def _scores(X: np.ndarray, means: np.ndarray) -> np.ndarray:
        # −‖x − μ‖² = 2 x·μ − ‖μ‖² − ‖x‖²: one GEMM per block instead of n·C differences.
        scores = X @ means.T
        scores *= 2
        scores -= np.einsum("cd,cd->c", means, means)
        scores -= np.einsum("nd,nd->n", X, X)[:, None]
        return scores


def _labels_of(label: Any, n: int) -> np.ndarray:
    """``n`` copies of ``label``, in its own dtype (a longer string label widens `classes_`)."""
    return np.full(n, label, dtype=np.asarray([label]).dtype)


def _log_posterior_block(X: np.ndarray, scores: Any, params: tuple) -> np.ndarray:
    """log softmax of ½·scores over classes; scores are −d(x, μ_c)."""
    half = scores(X, *params)
    half *= 0.5
    half -= half.max(axis=1, keepdims=True)
    half -= np.log(np.exp(half).sum(axis=1, keepdims=True))
    return half
