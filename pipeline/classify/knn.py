"""k-nearest-neighbour classification with a metric learned from triplets (paper 002 §3.1)."""

from __future__ import annotations

from typing import Any, ClassVar

import dask.array as da
import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted, check_random_state

from imgscale.pipeline.classify._base import (
    ProjectionMixin,
    RowClassifierMixin,
    encode_labels,
    unique_labels,
)
from imgscale.pipeline.classify._minibatch import RowSampler
from imgscale.pipeline.classify._optimisers import ValidationTrace
from imgscale.pipeline.classify.ncm_metric import initial_projection
from imgscale.pipeline.compute import compute
from imgscale.pipeline.fitted import Shape
from imgscale.pipeline.params import Each, Interval
from imgscale.pipeline.reductions import reduce_rows, row_stats
from imgscale.pipeline.top_k import TopK

_QUERY_ROWS = 4096


def _faiss_search(queries: np.ndarray, references: np.ndarray, k: int):
    """Exact squared-ℓ2 k nearest references (faiss IndexFlatL2: blocked GEMM + heap)."""
    import faiss

    index = faiss.IndexFlatL2(references.shape[1])
    index.add(np.ascontiguousarray(references, dtype=np.float32))
    distances, ids = index.search(np.ascontiguousarray(queries, dtype=np.float32), k)
    return distances, ids.astype(np.int64)


def _chunk_top_k(references: np.ndarray, queries: np.ndarray, k: int, row_start: int = 0) -> TopK:
    references = np.asarray(references, dtype=np.float32)
    keep = min(k, len(references))
    if keep == 0:
        return TopK.empty(len(queries), k)
    distances, ids = _faiss_search(queries, references, keep)
    return TopK(ids + row_start, distances, k)


def knn_search(queries: Any, references: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact k nearest rows of ``references`` (numpy or row-chunked dask) for each query row.

    Returns (ids (q, k) int64, squared distances (q, k) float32), nearest first. Over a dask
    array each chunk is searched with faiss and the per-chunk top k are merged in a tree
    (`reduce_rows`), so only q·k ids per chunk travel.
    """
    queries = np.asarray(queries, dtype=np.float32)
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if not isinstance(references, da.Array):
        distances, ids = _faiss_search(queries, np.asarray(references), min(k, len(references)))
        return ids, distances
    result = compute(reduce_rows(_chunk_top_k, [references], queries, k))[0]
    return result.ids, result.distances


def triplet_objective(
    W: np.ndarray,
    rows: np.ndarray,
    queries: np.ndarray,
    targets: np.ndarray,
    negatives: np.ndarray,
) -> tuple[float, np.ndarray]:
    """Mean hinge loss (eq. 2) and its sub-gradient (eq. 5) over a minibatch's triplets.

    ``rows`` (u, D) holds each row the minibatch uses once; ``queries`` (m,) indexes its query
    rows, ``targets`` (m, k) each query's target neighbours (same class) and ``negatives``
    (m, r) rows of other classes; every (q, p, n) is a triplet. The triplet sum reduces to pair
    sums weighted by how many active triplets each pair is in, Σ c_qp W Δ_qp Δ_qpᵀ −
    Σ c_qn W Δ_qn Δ_qnᵀ, and with Δ_qp = x_q − x_p to Gᵀ rows, where G gathers each pair's
    c W Δ on its two rows. So the D-dimensional work is two GEMMs on the distinct rows (Z =
    rows Wᵀ, then Gᵀ rows), with no pair differences in D dimensions (at 64K-D those were
    gigabytes a step).
    """
    dtype = W.dtype
    rows = rows.astype(dtype, copy=False)
    m, k = targets.shape
    r = negatives.shape[1]
    Z = rows @ W.T
    projected_target = Z[queries][:, None, :] - Z[targets]  # W Δ_qp, (m, k, d)
    projected_negative = Z[queries][:, None, :] - Z[negatives]  # W Δ_qn, (m, r, d)
    target_distance = np.einsum("mkd,mkd->mk", projected_target, projected_target)
    negative_distance = np.einsum("mrd,mrd->mr", projected_negative, projected_negative)
    hinge = 1 + target_distance[:, :, None] - negative_distance[:, None, :]
    active = hinge > 0
    n_triplets = m * k * r
    loss = float(np.where(active, hinge, 0).sum()) / n_triplets
    target_pull = projected_target * active.sum(axis=2, dtype=dtype)[:, :, None]
    negative_push = projected_negative * active.sum(axis=1, dtype=dtype)[:, :, None]
    G = np.zeros_like(Z)
    np.add.at(G, queries, target_pull.sum(axis=1) - negative_push.sum(axis=1))
    np.add.at(G, targets.ravel(), -target_pull.reshape(m * k, -1))
    np.add.at(G, negatives.ravel(), negative_push.reshape(m * r, -1))
    grad = G.T @ rows
    grad *= 2 / n_triplets
    return loss, grad


def _mean_squared_distance(
    X: np.ndarray, centres: np.ndarray, index: np.ndarray, block_rows: int = 256
) -> float:
    """Mean of ‖x_i − centres[index_i]‖², summed in float64 a block of rows at a time: no
    copy of X (a pool of wide rows is gigabytes)."""
    total = 0.0
    for start in range(0, len(X), block_rows):
        block = X[start : start + block_rows] - centres[index[start : start + block_rows]]
        total += float(np.einsum("nd,nd->", block, block, dtype=np.float64))
    return total / len(X)


def dynamic_targets(Z: np.ndarray, y_index: np.ndarray, k: int) -> np.ndarray:
    """(n, k) indices of each row's k nearest same-class rows under the current projection
    (§3.1 "dynamic targets"); classes with ≤ k rows repeat their nearest rows."""
    targets = np.empty((len(Z), k), dtype=np.int64)
    for c in np.unique(y_index):
        rows = np.flatnonzero(y_index == c)
        if len(rows) < 2:
            targets[rows] = rows[:, None]
            continue
        keep = min(k + 1, len(rows))
        _, ids = _faiss_search(Z[rows], Z[rows], keep)
        # Drop each row itself (distance 0, but not always first among exact duplicates).
        own = ids == np.arange(len(rows))[:, None]
        drop = np.where(own.any(axis=1), own.argmax(axis=1), keep - 1)
        kept = np.ones(ids.shape, dtype=bool)
        kept[np.arange(len(rows)), drop] = False
        others = ids[kept].reshape(len(rows), keep - 1)
        targets[rows] = rows[others[:, np.resize(np.arange(keep - 1), k)]]
    return targets


def dynamic_negatives(Z: np.ndarray, y_index: np.ndarray, r: int) -> np.ndarray:
    """(n, r) indices of each row's r nearest rows of other classes under the current
    projection: the impostors that the hinge loss (eq. 2) is active on."""
    negatives = np.empty((len(Z), r), dtype=np.int64)
    for c in np.unique(y_index):
        rows, others = np.flatnonzero(y_index == c), np.flatnonzero(y_index != c)
        if len(others) == 0:
            raise ValueError("metric learning needs at least two classes")
        _, ids = _faiss_search(Z[rows], Z[others], min(r, len(others)))
        negatives[rows] = others[ids[:, np.resize(np.arange(ids.shape[1]), r)]]
    return negatives


class MetricKNeighborsClassifier(ProjectionMixin, RowClassifierMixin, BaseEstimator):
    """k-NN under a learned low-rank metric ‖W(x − x')‖² (paper 002 §3.1, eqs. 1–5).

    W (d × D) starts from PCA and is learned by SGD on the triplet hinge loss (eq. 2): each
    iteration takes ``batch_size`` query rows from a working pool of training rows and forms
    every triplet of a query, one of its ``n_targets`` dynamic targets (its nearest same-class
    pool rows under the current W) and one of its ``n_negatives`` nearest other-class pool rows
    (impostors), both recomputed every ``refresh_every`` iterations (T of §3.1). Every
    ``validate_every`` iterations the held-out 1-NN error against the pool is measured and the
    best W kept; k is then validated over ``n_neighbors_grid`` (§4.1).
    Prediction is an exact search (faiss IndexFlatL2) in the projected space against all
    training rows, which the fitted model holds projected (``reference_``, n × d float32; fitted
    on a dask array it is a dask array persisted on the workers, for as long as the client that
    fitted it, searched block by block with the per-block top k merged in a tree, so no n-sized
    array reaches the client).
    Class scores are neighbour votes, ties broken by the nearer neighbours.

    Parameters
    ----------
    n_neighbors : int or None, default=None
        k of the classifier; None validates it over ``n_neighbors_grid``.
    n_components : int or None, default=64
        d; None with ``metric_learning=False`` is plain ℓ2 in input space.
    metric_learning : bool, default=True
        False keeps W at its (PCA or identity) start.
    n_targets, n_negatives, batch_size, max_iter, refresh_every, validate_every : int
    learning_rate : float, default=1.0
        Relative step (divided by the mean squared distance of a row to its class mean).
    n_iter_no_change : int or None, default=None
        Stop after this many validations without a lower 1-NN error (None: run max_iter).
    pool_rows : int, default=20000
        Training rows SGD draws its queries and targets from.
    n_validation : int, default=2000
    n_neighbors_grid : tuple of int
    random_state : int, RandomState or None

    Attributes
    ----------
    components_ : ndarray (d, D) float32
    reference_ : ndarray or dask array (n, d) float32
    reference_index_ : ndarray (n,) int64 class index of each reference row
    classes_, n_neighbors_, best_iteration_, n_iter_, validation_iterations_,
    validation_error_, validation_loss_, n_features_in_

    References
    ----------
    Mensink et al., ECCV 2012, §3.1; Weinberger & Saul, "Distance metric learning for large
    margin nearest neighbor classification", JMLR 2009.
    """

    # The fitted arrays and their shapes (`pipeline.fitted`): N reference rows.
    _fitted_shapes: ClassVar[dict[str, Shape]] = {
        "components_": ("n_components", "D"),
        "reference_": ("N", "n_components"),
        "reference_index_": ("N",),
    }

    # What each parameter may be (`pipeline.params`), checked when fit reads its rows.
    _parameter_rules: ClassVar[dict[str, tuple]] = {
        "n_neighbors": (Interval(int, 1, None), None),
        "n_components": (Interval(int, 1, None), None),
        "n_targets": (Interval(int, 1, None),),
        "n_negatives": (Interval(int, 1, None),),
        "learning_rate": (Interval(float, 0, None, closed="neither"),),
        "batch_size": (Interval(int, 1, None),),
        "max_iter": (Interval(int, 0, None),),
        "refresh_every": (Interval(int, 1, None),),
        "validate_every": (Interval(int, 1, None),),
        "n_iter_no_change": (Interval(int, 1, None), None),
        "pool_rows": (Interval(int, 1, None),),
        "n_validation": (Interval(int, 1, None),),
        "n_neighbors_grid": (Each(Interval(int, 1, None)),),
    }

    def __init__(
        self,
        n_neighbors: int | None = None,
        n_components: int | None = 64,
        metric_learning: bool = True,
        n_targets: int = 10,
        n_negatives: int = 10,
        learning_rate: float = 1.0,
        batch_size: int = 256,
        max_iter: int = 1000,
        refresh_every: int = 100,
        validate_every: int = 100,
        n_iter_no_change: int | None = None,
        pool_rows: int = 20_000,
        n_validation: int = 2000,
        n_neighbors_grid: tuple = (1, 3, 5, 10, 20, 50, 100),
        random_state: Any = None,
    ):
        self.n_neighbors = n_neighbors
        self.n_components = n_components
        self.metric_learning = metric_learning
        self.n_targets = n_targets
        self.n_negatives = n_negatives
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.refresh_every = refresh_every
        self.validate_every = validate_every
        self.n_iter_no_change = n_iter_no_change
        self.pool_rows = pool_rows
        self.n_validation = n_validation
        self.n_neighbors_grid = n_neighbors_grid
        self.random_state = random_state

    def fit(self, X: Any, y: Any, X_val: Any = None, y_val: Any = None):
        X, y = self._check_fit_input(X, y, reset=True)
        y = compute(y)[0] if isinstance(y, da.Array) else np.asarray(y)
        self.classes_ = unique_labels(y)
        y_index = encode_labels(y, self.classes_)
        rng = np.random.default_rng(check_random_state(self.random_state).randint(2**31))
        sampler = RowSampler(X, y_index, rng)
        if X_val is not None:
            X_val = np.asarray(compute(self._check_rows(X_val))[0])
            val_index = encode_labels(np.asarray(y_val).ravel(), self.classes_)
        else:
            X_val, val_index = sampler.hold_out(self.n_validation)
        pool, pool_index = sampler.sample(self.pool_rows)
        # One compiled sweep of the pool (20,000 rows of 64K-D Fisher vectors are 5 GiB).
        stats = row_stats(pool, pool_index, len(self.classes_), gram=False)
        counts = np.maximum(stats.class_counts, 1)[:, None]
        pool_means = (stats.class_sums / counts).astype(np.float32)
        if self.n_components is None:
            W = np.eye(pool.shape[1], dtype=np.float32)
        else:
            W = initial_projection(pool, pool_index, pool_means, self.n_components)
        if self.metric_learning:
            W = self._learn(W, pool, pool_index, pool_means, X_val, val_index, rng)
        else:
            self.best_iteration_, self.n_iter_ = 0, 0
        self.components_ = W
        labelled = y_index >= 0
        # The projected reference rows (n × d, d ≪ D) come to the client: a fitted model holds
        # numpy state only, so it saves, loads and predicts the same without a cluster.
        self.reference_ = np.asarray(compute(self.transform(X[labelled]))[0])
        self.reference_index_ = y_index[labelled]
        self.n_neighbors_ = self._choose_k(X_val, val_index)
        return self

    def update(self, keep: Any, added: tuple[Any, Any], order: Any = None) -> np.ndarray:
        """Make the neighbour set follow the training rows: keep the reference rows where
        ``keep`` (a mask over them), append the labelled rows of ``added`` (X, y) projected by
        the kept W, then take them in ``order`` (a permutation of the result: the order of the
        rows a fit from scratch would see). W and k are not relearned. Returns the classes left
        with no reference row (removed from the model)."""
        check_is_fitted(self, "reference_")
        keep = np.asarray(keep, dtype=bool)
        if keep.shape != (len(self.reference_),):
            raise ValueError(f"keep has {keep.shape} values; expected {len(self.reference_)}")
        X, y = added
        y = np.asarray(y).ravel()
        labelled = y >= 0
        rows = X if labelled.all() else X[labelled]
        projected = np.asarray(compute(self.transform(rows))[0]).reshape(-1, len(self.components_))
        kept_labels = np.asarray(self.classes_)[self.reference_index_[keep]]
        labels = np.concatenate([kept_labels, y[labelled]])
        reference = np.vstack([np.asarray(self.reference_)[keep], projected])
        if order is not None:
            order = np.asarray(order)
            reference, labels = reference[order], labels[order]
        classes = unique_labels(labels)
        if len(classes) == 0:
            raise ValueError("no labelled rows are left: the model would have no classes")
        dropped = np.setdiff1d(self.classes_, classes)
        self.classes_ = classes
        self.reference_ = np.ascontiguousarray(reference, dtype=np.float32)
        self.reference_index_ = encode_labels(labels, classes)
        return dropped

    def _learn(self, W, pool, pool_index, pool_means, X_val, val_index, rng) -> np.ndarray:
        spread = _mean_squared_distance(pool, pool_means, pool_index)
        step = float(self.learning_rate) / max(spread, np.finfo(np.float32).tiny)

        def error_of(W: np.ndarray) -> float:
            # 1-NN against the pool: the cheap proxy of the k-NN error used for early stopping.
            ids, _ = knn_search(X_val @ W.T, pool @ W.T, 1)
            return float(np.mean(pool_index[ids[:, 0]] != val_index))

        trace = ValidationTrace(error_of, W, self.n_iter_no_change, self.max_iter)
        trace.record(0, W, np.nan)
        targets = None
        for n_iter in range(1, int(self.max_iter) + 1):
            if targets is None or (n_iter - 1) % int(self.refresh_every) == 0:
                projected = pool @ W.T
                targets = dynamic_targets(projected, pool_index, int(self.n_targets))
                negatives = dynamic_negatives(projected, pool_index, int(self.n_negatives))
            batch = rng.choice(len(pool), min(int(self.batch_size), len(pool)), replace=False)
            # The pool rows the minibatch's triplets use, each once (queries share neighbours).
            near, far = targets[batch], negatives[batch]
            used = np.concatenate([batch, near.ravel(), far.ravel()])
            used, position = np.unique(used, return_inverse=True)
            queries, near_at, far_at = np.split(position, [len(batch), len(batch) + near.size])
            loss, grad = triplet_objective(
                W, pool[used], queries, near_at.reshape(near.shape), far_at.reshape(far.shape)
            )
            W -= step * grad
            if n_iter % int(self.validate_every) and n_iter != int(self.max_iter):
                continue
            if trace.record(n_iter, W, loss):
                break
        self.best_iteration_, self.n_iter_ = int(trace.best_iteration), int(trace.iteration)
        self.validation_iterations_ = np.asarray(trace.iterations, dtype=np.int64)
        self.validation_error_ = np.asarray(trace.errors)
        self.validation_loss_ = np.asarray(trace.objective)
        return trace.best_theta

    def _choose_k(self, X_val: np.ndarray, val_index: np.ndarray) -> int:
        if self.n_neighbors is not None:
            return int(self.n_neighbors)
        grid = [k for k in self.n_neighbors_grid if k <= len(self.reference_)] or [1]
        ids, _ = knn_search(X_val @ self.components_.T, self.reference_, max(grid))
        labels = self.reference_index_[ids]
        errors = [
            np.mean(_vote_scores(labels[:, :k], len(self.classes_)).argmax(1) != val_index)
            for k in grid
        ]
        return int(grid[int(np.argmin(errors))])

    def _score_params(self) -> tuple:
        check_is_fitted(self, "reference_")
        return (
            self.components_, self.reference_, self.reference_index_,
            len(self.classes_), int(self.n_neighbors_),
        )  # fmt: skip

    @staticmethod
    def _scores(X, W, reference, reference_index, n_classes, k) -> np.ndarray:
        ids, _ = knn_search(X @ W.T, reference, k)
        return _vote_scores(reference_index[ids], n_classes)


def _vote_scores(neighbour_labels: np.ndarray, n_classes: int) -> np.ndarray:
    """(n, C) float32 votes of the neighbours (nearest first); a nearer neighbour breaks ties."""
    n, k = neighbour_labels.shape
    scores = np.zeros((n, n_classes), dtype=np.float32)
    weight = 1 + (k - np.arange(k, dtype=np.float32)) / (k * (k + 1))
    np.add.at(scores, (np.repeat(np.arange(n), k), neighbour_labels.ravel()), np.tile(weight, n))
    return scores
