"""Nearest class mean with a learned low-rank Mahalanobis metric (paper 002 §3.2, §4.1, §4.4)."""

from __future__ import annotations

from typing import Any, ClassVar

import dask
import dask.array as da
import numpy as np
from sklearn.utils.validation import check_random_state

from imgscale.pipeline.classify._base import (
    ProjectionMixin,
    encode_labels,
    encode_labels_lazy,
    grown_classes,
    top_k_columns,
)
from imgscale.pipeline.classify._minibatch import RowSampler
from imgscale.pipeline.classify._optimisers import ValidationTrace
from imgscale.pipeline.classify.ncm import NearestClassMean
from imgscale.pipeline.coded_rows import RowDecoder
from imgscale.pipeline.compute import compute
from imgscale.pipeline.fitted import Shape
from imgscale.pipeline.params import Interval
from imgscale.pipeline.principal_axes import principal_axes_of_rows
from imgscale.pipeline.reductions import RowStats

# Query rows scored per GEMM: the rows × classes float32 block (40 MiB at 10,000 classes)
# stays close to the L3 cache for the top-k scan that reads it right after.
SCORE_ROWS = 1024
# Bytes of float64 rows the initial PCA of rows wider than they are many works on: 2,048 rows
# of a 64K-D signature.
AXES_BYTES = 2**30
# Rows drawn to start W: five a dimension, at least 2,000, at most 20,000 and at most 2 GiB of
# float32 rows (8,192 rows of a 64K-D signature).
SAMPLE_BYTES = 2**31


def ncm_objective(
    W: np.ndarray, X: np.ndarray, y_index: np.ndarray, means: np.ndarray
) -> tuple[float, np.ndarray]:
    """Loss (eq. 7) and its gradient (eq. 8) for rows X with class indices y_index.

    p(c|x) ∝ exp −‖W(μ_c − x)‖² (eq. 6) is computed as a log-softmax shifted by each row's largest
    logit, so 10,000 classes with distances in the thousands neither overflow nor underflow.
    The gradient Σ_ic A_ic W(μ_c − x_i)(μ_c − x_i)ᵀ with A = Y − P is expanded into four GEMMs
    ((diag(a)P − AᵀZ)ᵀ M + (diag(r)Z − AP)ᵀ X, a/r the column/row sums of A), never forming
    the m·C outer products. Works in the dtype of W (float32 in SGD, float64 in tests).
    """
    dtype = W.dtype
    X, means = X.astype(dtype, copy=False), means.astype(dtype, copy=False)
    m = len(X)
    Z = X @ W.T
    P = means @ W.T
    logits = Z @ P.T
    logits *= 2
    logits -= np.einsum("cd,cd->c", P, P)
    logits -= np.einsum("nd,nd->n", Z, Z)[:, None]
    logits -= logits.max(axis=1, keepdims=True)
    probabilities = np.exp(logits)
    normaliser = probabilities.sum(axis=1)
    rows = np.arange(m)
    loss = float(np.mean(np.log(normaliser) - logits[rows, y_index]))
    probabilities /= normaliser[:, None]
    A = np.negative(probabilities, out=probabilities)
    A[rows, y_index] += 1
    a, r = A.sum(axis=0), A.sum(axis=1)
    class_part = a[:, None] * P - A.T @ Z
    row_part = r[:, None] * Z - A @ P
    grad = class_part.T @ means + row_part.T @ X
    grad *= 2 / m
    return loss, grad


def _top_k_block(X: np.ndarray, W: np.ndarray, P2: np.ndarray, norms: np.ndarray, classes, k):
    out = np.empty((len(X), k), dtype=classes.dtype)
    for start in range(0, len(X), SCORE_ROWS):
        Z = X[start : start + SCORE_ROWS] @ W.T
        # 2 Wx·Wμ_c − ‖Wμ_c‖² (eq. 9 without the per-row ‖Wx‖²); the norms are subtracted
        # inside the top-k scan, so the score block is read once after the GEMM.
        out[start : start + len(Z)] = classes[top_k_columns(Z @ P2.T, k, norms)]
    return out


class MetricNearestClassMean(ProjectionMixin, NearestClassMean):
    """NCM with a learned low-rank metric: argmax_c −‖W(x − μ_c)‖², W ∈ R^{d×D} (eqs. 6–9).

    Class means are one pass of class sums (as `NearestClassMean`). W is learned by minibatch SGD
    on the multi-class logistic loss (eq. 7) with the means fixed: W starts as the top-d PCA
    components of a row sample (§4.2, "we initialize W as a PCA projection") scaled so that the
    mean squared projected distance of a row to its class mean is 1; every iteration draws
    ``batch_size`` rows (decoding only those on PQ codes, §4.1); the learning rate is fixed
    (§4.1, after Bottou); the top-k error (k = ``validation_k``) on held-out rows is measured
    every ``validate_every`` iterations and the best W is kept (early stopping, §4.1). Classes
    added afterwards (`partial_fit`, `add_class`, `add_class_prior`) cost one mean and leave W
    and every other class untouched (§4.4).

    Scoring is eq. 9: queries are projected (one GEMM), then scored against the projected means
    Wμ_c (one GEMM per block of query rows), so a query costs D·d + C·d instead of C·D.

    Parameters
    ----------
    n_components : int, default=64
        Projection dimension d.
    learning_rate : float, default=1.0
        Fixed step, relative to the data's scale: the step applied is ``learning_rate / s²``,
        s² the mean squared distance of a sampled row to its class mean in input space.
    batch_size : int, default=1000
        Rows per SGD iteration (m).
    max_iter : int, default=2000
    validate_every : int, default=100
    n_validation : int, default=5000
        Rows held out of the training rows (at most a fifth) for validation when fit gets no
        ``X_val``; they still count towards the class means.
    validation_k : int, default=5
        W is chosen by the top-k error on the held-out rows (5 in §4.1; 1 suits 10 classes).
    n_iter_no_change : int or None, default=None
        Stop after this many validations without a better top-5 error (None: run max_iter).
    prior_weight : float, default=0.0
        m of §4.4: a class with a zero-shot prior mean μ_z and n rows of mean μ_s gets the MAP
        mean (n μ_s + m μ_z)/(n + m).
    pool_rows : int, default=131072
        Rows fetched per pass over dask input; minibatches are drawn from them.
    random_state : int, RandomState or None

    Attributes
    ----------
    components_ : ndarray (d, D) float32
        The learned W (the best validated one).
    projected_means_ : ndarray (C, d) float32
        Wμ_c; rows of existing classes never change when classes are added.
    prior_means_ : ndarray (C, D) float32
        Zero-shot prior mean per class (NaN rows: no prior).
    validation_iterations_, validation_error_, validation_loss_ : ndarray
        The SGD trace: iteration, held-out top-k error and minibatch loss at each validation.
    best_iteration_ : int
    n_iter_ : int
    plus the attributes of `NearestClassMean`.

    References
    ----------
    Mensink, Verbeek, Perronnin & Csurka, "Metric learning for large scale image classification:
    generalizing to new classes at near-zero cost", ECCV 2012, §3.2, §4.1, §4.4.
    """

    _fitted_shapes: ClassVar[dict[str, Shape]] = {
        **NearestClassMean._fitted_shapes,
        "components_": ("n_components", "D"),
        "projected_means_": ("C", "n_components"),
    }

    # What each parameter may be (`pipeline.params`), checked when fit reads its rows.
    _parameter_rules: ClassVar[dict[str, tuple]] = {
        "n_components": (Interval(int, 1, None),),
        "learning_rate": (Interval(float, 0, None, closed="neither"),),
        "batch_size": (Interval(int, 1, None),),
        "max_iter": (Interval(int, 0, None),),
        "validate_every": (Interval(int, 1, None),),
        "n_validation": (Interval(int, 1, None),),
        "validation_k": (Interval(int, 1, None),),
        "n_iter_no_change": (Interval(int, 1, None), None),
        "prior_weight": (Interval(float, 0, None),),
        "pool_rows": (Interval(int, 1, None),),
    }

    def __init__(
        self,
        n_components: int = 64,
        learning_rate: float = 1.0,
        batch_size: int = 1000,
        max_iter: int = 2000,
        validate_every: int = 100,
        n_validation: int = 5000,
        validation_k: int = 5,
        n_iter_no_change: int | None = None,
        prior_weight: float = 0.0,
        pool_rows: int = 131_072,
        random_state: Any = None,
    ):
        self.n_components = n_components
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.validate_every = validate_every
        self.n_validation = n_validation
        self.validation_k = validation_k
        self.n_iter_no_change = n_iter_no_change
        self.prior_weight = prior_weight
        self.pool_rows = pool_rows
        self.random_state = random_state

    # -- fitting --------------------------------------------------------------------------

    def fit(
        self,
        X: Any,
        y: Any,
        X_val: Any = None,
        y_val: Any = None,
        *,
        codec: RowDecoder | None = None,
    ) -> MetricNearestClassMean:
        """Class means (one pass), then W by SGD on rows drawn from X; rows labelled -1 unused.

        With ``codec``, X are its codes: the means come from the codes (`NearestClassMean.fit`)
        and SGD decodes only the rows it samples, with the codec's own decoder. Validation rows
        are float rows either way.
        """
        self._forget()
        super().fit(X, y, codec=codec)
        if codec is None:
            return self._learn(self._check_rows(X), y, None, X_val, y_val)
        return self._learn(X, y, codec.decode, X_val, y_val)

    def partial_fit(
        self, X: Any, y: Any, classes: Any = None, *, codec: RowDecoder | None = None
    ) -> MetricNearestClassMean:
        """Add rows and classes to the means of a fitted model; W is never changed."""
        self._check_has_metric()
        return super().partial_fit(X, y, classes, codec=codec)

    def add_class_prior(self, label: Any, prior_mean: Any) -> MetricNearestClassMean:
        """Add a class with no rows whose mean is a zero-shot prior (§4.4); rows added later
        with `partial_fit` give the MAP mean (n μ_s + m μ_z)/(n + m), m = ``prior_weight``."""
        self._check_has_metric()
        prior_mean = np.asarray(prior_mean, dtype=np.float32).reshape(-1)
        if prior_mean.shape != (self.n_features_in_,) or not np.isfinite(prior_mean).all():
            raise ValueError(f"prior mean must be {self.n_features_in_} finite values")
        if np.isin(label, self.classes_):
            raise ValueError(f"class {label!r} already exists")
        n_features = self.n_features_in_
        self.classes_ = np.concatenate([self.classes_, np.asarray([label])])
        self.class_sums_ = np.vstack([self.class_sums_, np.zeros((1, n_features))])
        self.class_counts_ = np.concatenate([self.class_counts_, [0]])
        self.prior_means_ = np.vstack([self._priors(len(self.classes_) - 1), prior_mean[None]])
        self.means_ = np.vstack([self.means_, prior_mean[None]])
        self.projected_means_ = np.vstack(
            [self.projected_means_, prior_mean[None] @ self.components_.T]
        )
        return self

    def _apply_change(self, stats_of: Any, added: tuple, removed: tuple) -> np.ndarray:
        """`NearestClassMean.update`'s class means, projected by the kept W (not relearned:
        paper 002 §4.4 adds classes under a fixed W); refused for a model with zero-shot
        priors, whose MAP means are not a plain sum of rows."""
        self._check_has_metric()
        priors = getattr(self, "prior_means_", None)
        if priors is not None and not np.isnan(priors).all():
            raise ValueError(
                "classes with zero-shot prior means (add_class_prior) have MAP means that are "
                "not a sum over rows; fit the model again"
            )
        dropped = super()._apply_change(stats_of, added, removed)
        self.projected_means_ = self.means_ @ self.components_.T
        self.__dict__.pop("prior_means_", None)
        return dropped

    def _forget(self) -> None:
        for name in ("components_", "projected_means_", "prior_means_"):
            self.__dict__.pop(name, None)

    def _check_has_metric(self) -> None:
        if not hasattr(self, "components_"):
            raise ValueError(
                "MetricNearestClassMean: call fit first (it learns W); partial_fit adds classes "
                "and rows to a fitted model"
            )

    def _priors(self, n_classes: int) -> np.ndarray:
        priors = getattr(self, "prior_means_", None)
        if priors is None:
            priors = np.full((0, self.n_features_in_), np.nan, dtype=np.float32)
        extra = np.full((n_classes - len(priors), priors.shape[1]), np.nan, dtype=np.float32)
        return np.vstack([priors, extra])

    def _add_stats(self, y: Any, classes: Any, stats_of: Any, *, first: bool) -> Any:
        """Class sums as `NearestClassMean`; classes with a prior may have no rows (MAP mean);
        only classes whose mean changed are re-projected."""
        if first:
            return super()._add_stats(y, classes, stats_of, first=True)
        old = np.asarray(self.classes_)
        all_classes = grown_classes(old, y, classes)
        added = stats_of(encode_labels_lazy(y, all_classes), len(all_classes))
        stats = RowStats(0, added.feature_sum, self.class_sums_, self.class_counts_) + added
        priors = self._priors(len(all_classes))
        has_prior = ~np.isnan(priors[:, 0])
        empty = (stats.class_counts == 0) & ~has_prior
        if empty.any():
            raise ValueError(f"classes {all_classes[empty][:10].tolist()} have no labelled rows")
        touched = added.class_counts > 0
        weight = np.where(has_prior, float(self.prior_weight), 0.0)[touched]
        sums = stats.class_sums[touched] + weight[:, None] * np.nan_to_num(priors[touched])
        means = np.zeros(stats.class_sums.shape, dtype=np.float32)
        means[: len(old)] = self.means_
        means[touched] = sums / (stats.class_counts[touched] + weight)[:, None]
        projected = np.zeros((len(all_classes), self.components_.shape[0]), dtype=np.float32)
        projected[: len(old)] = self.projected_means_
        projected[touched] = means[touched] @ self.components_.T
        self.classes_ = all_classes
        self.class_sums_, self.class_counts_ = stats.class_sums, stats.class_counts
        self.means_, self.projected_means_ = means, projected
        if has_prior.any():
            self.prior_means_ = priors
        return self

    def _learn(self, X: Any, y: Any, decode: Any, X_val: Any, y_val: Any) -> Any:
        rng = np.random.default_rng(check_random_state(self.random_state).randint(2**31))
        if isinstance(y, da.Array):
            y = compute(y)[0]
        y_index = encode_labels(np.asarray(y).ravel(), self.classes_)
        sampler = RowSampler(X, y_index, rng, decode=decode, pool_rows=self.pool_rows)
        if X_val is not None:
            X_val = self._check_rows(X_val)
            X_val = compute(X_val)[0] if isinstance(X_val, da.Array) else X_val
            val_index = encode_labels(np.asarray(y_val).ravel(), self.classes_)
            X_val, val_index = X_val[val_index >= 0], val_index[val_index >= 0]
        else:
            X_val, val_index = sampler.hold_out(self.n_validation)
        means = self.means_
        dim = self.n_features_in_
        rows = min(20_000, max(5 * dim, 2000), max(2000, SAMPLE_BYTES // (4 * dim)))
        sample, sample_index = sampler.sample(rows)
        W = initial_projection(sample, sample_index, means, int(self.n_components))
        spread = float(np.mean(np.sum((sample - means[sample_index]) ** 2, axis=1)))
        step = float(self.learning_rate) / max(spread, np.finfo(np.float32).tiny)
        trace = ValidationTrace(
            lambda W: _top_k_error(W, means, X_val, val_index, self.validation_k),
            W,
            self.n_iter_no_change,
            self.max_iter,
        )
        trace.record(0, W, np.nan)
        for n_iter in range(1, int(self.max_iter) + 1):
            batch, batch_index = sampler.batch(int(self.batch_size))
            loss, grad = ncm_objective(W, batch, batch_index, means)
            W -= step * grad
            if n_iter % int(self.validate_every) and n_iter != int(self.max_iter):
                continue
            if trace.record(n_iter, W, loss):
                break
        self.components_ = trace.best_theta
        self.projected_means_ = self.means_ @ self.components_.T
        self.best_iteration_ = int(trace.best_iteration)
        self.n_iter_ = int(trace.iteration)
        self.validation_iterations_ = np.asarray(trace.iterations, dtype=np.int64)
        self.validation_error_ = np.asarray(trace.errors, dtype=np.float64)
        self.validation_loss_ = np.asarray(trace.objective, dtype=np.float64)
        return self

    # -- scoring --------------------------------------------------------------------------

    def _score_params(self) -> tuple[np.ndarray, ...]:
        P = self.projected_means_
        return self.components_, P * 2, np.einsum("cd,cd->c", P, P)

    @staticmethod
    def _scores(X: np.ndarray, W: np.ndarray, P2: np.ndarray, norms: np.ndarray) -> np.ndarray:
        # −‖W(x − μ)‖² = 2 Wx·Wμ − ‖Wμ‖² − ‖Wx‖² (eq. 9 plus the per-row constant).
        Z = X @ W.T
        scores = Z @ P2.T
        scores -= norms
        scores -= np.einsum("nd,nd->n", Z, Z)[:, None]
        return scores

    def predict_top_k(self, X: Any, k: int = 5) -> Any:
        """The k best classes per row, best first, by eq. 9 (one GEMM per block of rows)."""
        X, classes, k = self._check_top_k_input(X, k)
        params = self._score_params()
        if not isinstance(X, da.Array):
            return _top_k_block(X, *params, classes, k)
        # One copy of W and the projected means in the graph, not one per block.
        shared = [dask.delayed(a, pure=True) for a in (*params, classes)]
        return X.map_blocks(
            _top_k_block, *shared, k, dtype=classes.dtype, chunks=(X.chunks[0], (k,))
        )


def initial_projection(
    X: np.ndarray, y_index: np.ndarray, means: np.ndarray, n_components: int
) -> np.ndarray:
    """Top PCA components of X (d, D) scaled to a mean squared distance of 1 to class means."""
    if not 1 <= n_components <= X.shape[1]:
        raise ValueError(f"n_components must be in [1, {X.shape[1]}], got {n_components}")
    # Wide rows (64K-D Fisher vectors): the axes of the first `wide_rows` of the sample, from
    # their Gram (rows are drawn at random, so the first of them are a random subsample).
    wide_rows = max(n_components + 1, AXES_BYTES // (8 * X.shape[1]))
    W = principal_axes_of_rows(X[:wide_rows], n_components).astype(np.float32)
    # W(x − μ) as Wx − Wμ: no n × D copy of the rows (gigabytes at 64K-D).
    projected = X @ W.T - (means @ W.T)[y_index]
    spread = float(np.mean(np.sum(projected.astype(np.float64) ** 2, axis=1)))
    return W / np.float32(np.sqrt(max(spread, np.finfo(np.float32).tiny)))


def _top_k_error(
    W: np.ndarray, means: np.ndarray, X: np.ndarray, y_index: np.ndarray, k: int
) -> float:
    P = means @ W.T
    norms = np.einsum("cd,cd->c", P, P)
    hits = 0
    for start in range(0, len(X), SCORE_ROWS):
        Z = X[start : start + SCORE_ROWS] @ W.T
        top = top_k_columns(Z @ (P * 2).T, k, norms)
        hits += int((top == y_index[start : start + SCORE_ROWS, None]).any(axis=1).sum())
    return 1.0 - hits / len(X)
