"""Predicted neighbourhoods for lazy local learning (paper 004, Yu & Grauman, NIPS 2014).

A query is classified by a linear classifier trained, at query time, on a *predicted* subset of
the training rows rather than on its nearest neighbours:

- offline (§3.1) each of N training instances gets a target neighbourhood: for every size k, S
  label-balanced candidate sets drawn with a probability that falls with distance, a local
  classifier on each, and the members of the candidate whose Platt posterior for the instance's
  own label is highest, at the size whose mean posterior is highest;
- offline (§3.2) ridge regressors learn to map a row to its neighbourhood's indicator vector
  (M-dimensional, sparse), all sharing one Gram matrix with ρ by generalised cross-validation:
  either to the indicator itself, or, as in the paper, to its compression by a random D × M
  sign matrix φ (Hsu et al. 2009);
- online (§3.3) a query's M confidences are the regression's output, or recovered from its
  predicted compressed indicator by a sparse-recovery algorithm; for each size k the k/C most
  confident training rows per label train a local classifier, and the most confident of these
  classifies the query.

Compression is off by default here. The paper compresses to afford its Bayesian regression and
recovery; a ridge regression costs one Gram matrix and d × M coefficients whether it predicts
D or M targets, and the neighbourhoods hold l of up to 400 rows, so a D = 15% M measurement of
so dense an indicator is below the D = O(l log(M/l)) compressed sensing needs (§3.2) and the
recovered confidences rank the target rows less precisely than the regression itself does.
That costs 1–6 points on digit tasks, but on rare attributes (one photo class against nine)
the compressed indicators are the better: ``imgscale train --method local`` compresses.

Two options go beyond the paper, for rare labels: ``class_weight="balanced"`` with
``balanced=False`` keeps a neighbourhood's labels in the proportion in which they surround the
query and weighs each row by its label's rarity, where the paper's label-balanced sets put every
query on the side of the common label; ``local_prior="global"`` shrinks each local ridge
towards the ridge of all rows rather than towards 0.

The local classifier is ridge regression on ±1 targets (one-vs-rest for C > 2 labels, as §3.1
footnote 1 suggests) solved in closed form in whichever of the k × k or d × d forms is smaller,
with a Platt-scaled posterior (Platt 1999; the Newton method of Lin, Lin & Weng 2007) fitted on
the neighbourhood's own decision values. The paper trains linear SVMs; a closed-form solve makes
the N × K × S offline fits cheap and exactly reproducible (the same bits in-process and on a
cluster), which an iterative SVM solver would not.

The pieces are numpy kernels (`sample_candidates`, `training_neighbourhoods`,
`predict_from_confidences` here; `local_posteriors`, `multi_target_ridge`, `recover` in
`local_kernels`) wired by `PredictedNeighbourhoodClassifier`; the offline fits take a ``mapper``
so the jobs layer can run instance blocks as cluster tasks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted, check_random_state

from imgscale.pipeline.classify._base import RowClassifierMixin, encode_labels, unique_labels
from imgscale.pipeline.classify.knn import MetricKNeighborsClassifier
from imgscale.pipeline.classify.local_kernels import (
    RECOVERIES,
    local_posteriors,
    multi_target_ridge,
    one_blas_thread,
    recover,
    ridge_weights,
    sensing_signs,
)
from imgscale.pipeline.compute import Mapper, compute, run_in_process
from imgscale.pipeline.embed import RandomFourierFeatures
from imgscale.pipeline.fitted import Shape
from imgscale.pipeline.params import Each, Interval, Options

NEIGHBOURHOODS = ("predicted", "nearest")
METRICS = ("euclidean", "learned")
# Instances per offline task (a task then fits 100 × K × S local classifiers).
INSTANCES_PER_BLOCK = 100


# --------------------------------------------------------------------------------------------
# Offline: training neighbourhoods (§3.1)


def sample_candidates(
    ranked: Sequence[np.ndarray], per_label: int, n_samples: int, rng: np.random.Generator
) -> np.ndarray:
    """`n_samples` label-balanced candidate sets (n_samples, Σ min(per_label, m_c)) of row ids.

    ``ranked[c]`` holds the rows of label c, nearest first. From each, `per_label` rows are drawn
    without replacement with weight 1/r for the row of rank r: the weight falls with the row's
    distance normalised to its rank among the label's rows (§3.1: "inversely related to its
    normalized distance"). Efraimidis & Spirakis' keys: the rows with the smallest r·Eᵣ,
    Eᵣ ~ Exp(1), are a weighted sample without replacement.
    """
    parts = []
    for rows in ranked:
        take = min(per_label, len(rows))
        if take == 0:
            continue
        keys = rng.standard_exponential((n_samples, len(rows))) * np.arange(1, len(rows) + 1)
        picked = np.argpartition(keys, take - 1, axis=1)[:, :take] if take < len(rows) else None
        parts.append(rows[picked] if picked is not None else np.tile(rows, (n_samples, 1)))
    return np.concatenate(parts, axis=1)


@one_blas_thread
def training_neighbourhoods(
    X: np.ndarray,
    y_index: np.ndarray,
    distance_rows: np.ndarray,
    n_classes: int,
    sizes: Sequence[int],
    n_samples: int,
    alpha: float,
    seed: int,
    balanced: bool,
    label_weights: np.ndarray | None,
    prior: np.ndarray | None,
    instances: np.ndarray,
) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """Target neighbourhoods of `instances` (row ids of X): members, chosen size, posterior.

    Distances are Euclidean between rows of `distance_rows` (X itself, or X under a learned
    metric). Candidates of size k hold k/C rows of each label drawn by rank among that label's
    rows if `balanced` (§3.1), else k rows drawn by rank among all rows; `label_weights` (C,)
    weigh each row of a candidate's fit by its label (`local_posteriors`' ``row_weights``), and
    `prior` (d, C') is the weights its ridge shrinks towards (``prior``).
    Each instance's draws come from its own generator seeded by (seed, instance), so the result
    does not depend on how instances are split into blocks or where blocks run.
    """
    sizes = np.asarray(sizes)
    Q = distance_rows[instances].astype(np.float64)
    R = distance_rows.astype(np.float64)
    distances = (R * R).sum(1)[None, :] - 2 * Q @ R.T  # + ‖q‖², constant per row
    members, chosen, best = [], np.empty(len(instances), np.int64), np.empty(len(instances))
    for i, instance in enumerate(instances):
        rng = np.random.default_rng([seed, int(instance)])
        order = np.argsort(distances[i], kind="stable")
        order = order[order != instance]
        ranked = [order[y_index[order] == c] for c in range(n_classes)] if balanced else [order]
        posteriors, candidates = [], []
        for k in sizes:
            per_group = int(k) // n_classes if balanced else int(k)
            sets = sample_candidates(ranked, per_group, n_samples, rng)
            query = np.broadcast_to(X[instance], (n_samples, X.shape[1]))
            weights = None if label_weights is None else label_weights[y_index[sets]]
            p = local_posteriors(X[sets], y_index[sets], n_classes, query, alpha, weights, prior)
            posteriors.append(p[:, y_index[instance]])
            candidates.append(sets)
        size = int(np.argmax([p.mean() for p in posteriors]))
        sample = int(np.argmax(posteriors[size]))
        members.append(np.sort(candidates[size][sample]))
        chosen[i], best[i] = sizes[size], posteriors[size][sample]
    return members, chosen, best


# --------------------------------------------------------------------------------------------
# Online inference (§3.3)


def neighbourhood_for(
    confidences: np.ndarray, y_index: np.ndarray, n_classes: int, k: int, balanced: bool
) -> np.ndarray:
    """Row ids of the size-k neighbourhood: the k/C most confident rows of each label (or the k
    most confident overall if not `balanced`), among rows of positive confidence."""
    order = np.argsort(-confidences, kind="stable")
    order = order[confidences[order] > 0]
    if not balanced:
        return order[:k]
    return np.concatenate([order[y_index[order] == c][: k // n_classes] for c in range(n_classes)])


def predict_from_confidences(
    X: np.ndarray,
    y_index: np.ndarray,
    n_classes: int,
    queries: np.ndarray,
    confidences: np.ndarray,
    sizes: Sequence[int],
    alpha: float,
    balanced: bool = True,
    label_weights: np.ndarray | None = None,
    prior: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Posteriors (q, C) and chosen sizes (q,) of queries with training-row confidences (q, M).

    For each size, the neighbourhood of `neighbourhood_for` trains a local classifier (its rows
    weighted by `label_weights` (C,) of their labels, if given, and its weights shrunk towards
    `prior`); the one whose posterior for its
    predicted label is highest answers (§3.3). A neighbourhood holding
    one label only answers that label with posterior 1, without fitting; one holding no row
    (no positive confidence) answers nothing, and a query with no answer at any size gets
    uniform posteriors.
    """
    out = np.full((len(queries), n_classes), 1.0 / n_classes)
    chosen = np.zeros(len(queries), dtype=np.int64)
    for q, query in enumerate(queries):
        best = -1.0
        for k in sizes:
            rows = neighbourhood_for(confidences[q], y_index, n_classes, int(k), balanced)
            if len(rows) == 0:
                continue
            labels = y_index[rows]
            if (labels == labels[0]).all():
                posterior = np.zeros(n_classes)
                posterior[labels[0]] = 1.0
            else:
                weights = None if label_weights is None else label_weights[labels]
                posterior = local_posteriors(
                    X[rows], labels, n_classes, query, alpha, weights, prior
                )
            if posterior.max() > best:
                best, out[q], chosen[q] = posterior.max(), posterior, k
    return out, chosen


@one_blas_thread
def _posterior_block(
    queries: np.ndarray,
    X: np.ndarray,
    y_index: np.ndarray,
    n_classes: int,
    sizes: tuple,
    alpha: float,
    neighbourhood: str,
    balanced: bool,
    label_weights: np.ndarray | None,
    prior: np.ndarray | None,
    components: np.ndarray | None,
    signs: np.ndarray | None,
    coef: np.ndarray | None,
    x_mean: np.ndarray | None,
    z_mean: np.ndarray | None,
    recovery: str,
    embedding: tuple | None,
) -> np.ndarray:
    """float32 posteriors (q, C) of a block of queries: the numpy kernel of the model's scores."""
    queries = np.asarray(queries, dtype=np.float32)
    if neighbourhood == "nearest":
        space = X if components is None else X @ components.T
        q_space = queries if components is None else queries @ components.T
        confidences = 2.0 * q_space @ space.T - (space.astype(np.float64) ** 2).sum(axis=1)
        # −‖q − x‖² + ‖q‖²: the same order; shifted so that every row's confidence is positive.
        confidences -= confidences.min(axis=1, keepdims=True) - 1.0
    else:
        inputs = queries if embedding is None else _embed(queries, *embedding)
        confidences = (inputs - x_mean) @ coef + z_mean
        if signs is not None:
            phi = signs.astype(np.float32) / np.sqrt(len(signs))
            confidences = recover(confidences, phi, int(max(sizes)), recovery)
    posteriors, _ = predict_from_confidences(
        X, y_index, n_classes, queries, confidences, sizes, alpha, balanced, label_weights, prior
    )
    return posteriors.astype(np.float32)


def _embed(rows: np.ndarray, weights: np.ndarray, offset: np.ndarray) -> np.ndarray:
    """Random Fourier features of rows (`RandomFourierFeatures`' kernel)."""
    return RandomFourierFeatures._transform_block(np.asarray(rows, np.float32), weights, offset)


# --------------------------------------------------------------------------------------------


class PredictedNeighbourhoodClassifier(RowClassifierMixin, BaseEstimator):
    """Lazy local learning on predicted neighbourhoods (paper 004 §3), or on nearest ones.

    Parameters
    ----------
    n_neighbourhoods : int, default=2000
        N, training instances given a target neighbourhood (§3.1; §4 uses 2,000).
    sizes : tuple of int, default=(50, 100, 200, 400)
        Candidate neighbourhood sizes k₁..k_K (§4: 50 to 500); k/C rows of each label.
    n_samples : int, default=10
        S, candidate sets per size and instance (§4 uses 100).
    compression : float or None, default=None
        None regresses the indicator vectors themselves; a float is D/M, the compressed
        indicator length over training rows (§3.2; §4 uses about 15%).
    neighbourhood : {"predicted", "nearest"}, default="predicted"
        "nearest" is the Local baseline of §4: the k nearest rows, k chosen per query as here.
    balanced : bool, default=True
        The k/C most confident (or nearest) rows of each label (§3.3; Local B), and candidates
        of k/C rows of each label for the targets (§3.1); False takes the k most confident rows
        whatever their labels (Local U), and draws candidates from all rows.
    class_weight : {None, "balanced"}, default=None
        "balanced" weighs each row of a local classifier's set by M / (C · M_c), its label's
        share of the training rows inverted (scikit-learn's ``class_weight="balanced"``), so
        both labels weigh alike, as on balanced test queries, while the set keeps the labels in
        the proportion in which they surround the query. With rare positives a label-balanced
        set must reach further for its positives than for its negatives, which puts every
        query on the negative side; weighting an unbalanced set (``balanced=False``) does not.
        Beyond the paper, which balances by count (§3.4).
    local_prior : {None, "global"}, default=None
        What a local ridge shrinks its weights towards: None, 0 (§3.1's plain local
        classifier); "global", the weights of the same ridge fitted on all training rows
        (weighted by ``class_weight``), so a neighbourhood with few rows of a label keeps the
        global direction and sets its own offset (biased regularisation, beyond the paper;
        `alpha` is then how far a neighbourhood may pull away from it).
    metric : {"euclidean", "learned"}, default="euclidean"
        Distances for the candidate sampling and for "nearest": "learned" is those of a
        `MetricKNeighborsClassifier` fitted on the training rows (Local+ML of §4).
    metric_dim : int, default=64
    metric_max_iter : int, default=1000
        Minibatch steps of the learned metric (`MetricKNeighborsClassifier`'s ``max_iter``).
    recovery : {"omp", "correlation"}, default="correlation"
        Sparse recovery of a query's confidences from compressed indicators (`recover`).
    embedding_dim : int or None, default=None
        None regresses the (compressed) indicators on the features (§3.2); an int regresses them
        on that many random Fourier features of the Gaussian kernel (bandwidth as in
        `RandomFourierFeatures`), which lets a confidence depend on the query's distance to the
        instances whose neighbourhoods hold the row, not on a linear function of it.
    alpha : float, default=1.0
        Local ridge regularisation relative to the mean squared norm of the centred set.
    random_state : int, RandomState or None

    Attributes
    ----------
    classes_ : ndarray (C,)
    training_rows_ : ndarray (M, d) float32
        The training rows local classifiers are drawn from (lazy learning keeps them).
    training_index_ : ndarray (M,) int64, the class index of each.
    components_ : ndarray (d', d) float32 or None, the learned metric's projection.
    prior_weights_ : ndarray (d, C') float32, the ridge of all training rows (weighted by
        ``class_weight``), C' = 1 for two classes: what ``local_prior="global"`` shrinks to.
    neighbourhood_instances_ : ndarray (N,) row ids; neighbourhood_indptr_ (N + 1,) and
        neighbourhood_members_: their target neighbourhoods (CSR); neighbourhood_sizes_ (N,) k*.
    sensing_seed_ : int or None, the seed of the D × M signs φ·√D (`sensing_matrix`), or None
        without compression; the model keeps the seed, not the signs, which would outweigh
        every other array (a model saved before kept them as ``sensing_signs_``).
    regression_coef_ : ndarray (d, D) float32; regression_mean_ (d,), target_mean_ (D,),
        regression_rho_: the indicator ridge (d: features or embedding dimensions; D = M
        without compression).
    embedding_weights_, embedding_offset_ : the random Fourier features, or None.
    n_features_in_ : int

    References
    ----------
    Yu & Grauman, "Predicting useful neighborhoods for lazy local learning", NIPS 2014;
    Hsu, Kakade, Langford & Zhang, "Multi-label prediction via compressed sensing", NIPS 2009.
    """

    # The fitted arrays and their shapes (`pipeline.fitted`): N training rows, S measurements,
    # M neighbourhood members.
    _fitted_shapes: ClassVar[dict[str, Shape]] = {
        "training_rows_": ("N", "D"),
        "training_index_": ("N",),
        "sensing_signs_": ("S", "N"),  # what a model saved before `sensing_seed_` kept
        "target_mean_": ("S",),
        "neighbourhood_instances_": ("M",),
        "neighbourhood_sizes_": ("M",),
        "prior_weights_": ("D", "P"),
    }

    # What each parameter may be (`pipeline.params`), checked when fit reads its rows.
    _parameter_rules: ClassVar[dict[str, tuple]] = {
        "n_neighbourhoods": (Interval(int, 1, None),),
        "sizes": (Each(Interval(int, 1, None)),),
        "n_samples": (Interval(int, 1, None),),
        "compression": (Interval(float, 0, 1, closed="right"), None),
        "neighbourhood": (Options(NEIGHBOURHOODS),),
        "class_weight": (Options(("balanced",)), None),
        "local_prior": (Options(("global",)), None),
        "metric": (Options(METRICS),),
        "metric_dim": (Interval(int, 1, None),),
        "metric_max_iter": (Interval(int, 1, None),),
        "recovery": (Options(RECOVERIES),),
        "embedding_dim": (Interval(int, 1, None), None),
        "alpha": (Interval(float, 0, None, closed="neither"),),
    }

    def __init__(
        self,
        n_neighbourhoods: int = 2000,
        sizes: tuple = (50, 100, 200, 400),
        n_samples: int = 10,
        compression: float | None = None,
        neighbourhood: str = "predicted",
        balanced: bool = True,
        class_weight: str | None = None,
        local_prior: str | None = None,
        metric: str = "euclidean",
        metric_dim: int = 64,
        metric_max_iter: int = 1000,
        recovery: str = "correlation",
        embedding_dim: int | None = None,
        alpha: float = 1.0,
        random_state: Any = None,
    ):
        self.n_neighbourhoods = n_neighbourhoods
        self.sizes = sizes
        self.n_samples = n_samples
        self.compression = compression
        self.neighbourhood = neighbourhood
        self.balanced = balanced
        self.class_weight = class_weight
        self.local_prior = local_prior
        self.metric = metric
        self.metric_dim = metric_dim
        self.metric_max_iter = metric_max_iter
        self.recovery = recovery
        self.embedding_dim = embedding_dim
        self.alpha = alpha
        self.random_state = random_state

    def fit(self, X: Any, y: Any, mapper: Mapper | None = None) -> PredictedNeighbourhoodClassifier:
        """Keep the training rows; for "predicted", find N target neighbourhoods (the N × K × S
        local fits run as blocks of instances through `mapper`, default in-process) and learn
        the compressed-sensing regression. X may be a row-chunked dask array: its M rows are
        brought into memory, as every query may train on any of them."""
        X, y = self._check_fit_input(X, y, reset=True)
        X, y = compute(X, y)
        X, y = np.ascontiguousarray(X, dtype=np.float32), np.asarray(y)
        classes = unique_labels(y)
        if len(classes) < 2:
            raise ValueError(
                f"y has {len(classes)} class(es) {classes.tolist()}; local learning needs two"
            )
        labelled = encode_labels(y, classes) >= 0
        X, y_index = X[labelled], encode_labels(y[labelled], classes)
        sizes = tuple(int(k) for k in self.sizes)
        if min(sizes) < len(classes):
            raise ValueError(f"sizes {sizes} must be at least the number of classes {len(classes)}")
        self.classes_ = classes
        self.training_rows_, self.training_index_ = X, y_index
        weights = self.label_weights()
        self.prior_weights_ = ridge_weights(
            X, y_index, len(classes), float(self.alpha),
            None if weights is None else weights[y_index],
        ).astype(np.float32)  # fmt: skip
        seed = check_random_state(self.random_state).randint(2**31)
        self.components_ = self.embedding_weights_ = self.embedding_offset_ = None
        if self.metric == "learned":
            knn = MetricKNeighborsClassifier(
                n_components=self.metric_dim, max_iter=self.metric_max_iter, random_state=seed
            )
            self.components_ = knn.fit(X, y_index).components_
        if self.neighbourhood == "predicted":
            self._fit_predicted(X, y_index, sizes, seed, mapper or run_in_process)
        return self

    def _fit_predicted(self, X, y_index, sizes, seed, mapper: Mapper) -> None:
        n_rows = len(X)
        if self.n_neighbourhoods > n_rows:
            raise ValueError(
                f"n_neighbourhoods={self.n_neighbourhoods} exceeds the {n_rows} labelled "
                "training rows"
            )
        rng = np.random.default_rng(seed)
        instances = np.sort(rng.choice(n_rows, self.n_neighbourhoods, replace=False))
        distance_rows = X if self.components_ is None else X @ self.components_.T
        shared = (
            X, y_index, distance_rows, len(self.classes_), sizes, int(self.n_samples),
            float(self.alpha), seed, bool(self.balanced), self.label_weights(), self.prior(),
        )  # fmt: skip
        blocks = [
            (instances[start : start + INSTANCES_PER_BLOCK],)
            for start in range(0, len(instances), INSTANCES_PER_BLOCK)
        ]
        results = mapper(training_neighbourhoods, shared, blocks)
        members = [m for part, _, _ in results for m in part]
        self.neighbourhood_instances_ = instances
        self.neighbourhood_indptr_ = np.concatenate([[0], np.cumsum([len(m) for m in members])])
        self.neighbourhood_members_ = np.concatenate(members).astype(np.int64)
        self.neighbourhood_sizes_ = np.concatenate([chosen for _, chosen, _ in results])
        self.fit_regression()

    def fit_regression(self) -> PredictedNeighbourhoodClassifier:
        """Learn §3.2's regression from the target neighbourhoods `fit` found, with the current
        `compression` and `embedding_dim`: changing these needs no new neighbourhood search."""
        check_is_fitted(self, "neighbourhood_indptr_")
        X, n_rows = self.training_rows_, len(self.training_rows_)
        seed = check_random_state(self.random_state).randint(2**31)
        self.sensing_seed_ = self.embedding_weights_ = self.embedding_offset_ = None
        vars(self).pop("sensing_signs_", None)  # a model saved with its signs: drawn anew now
        self._sensing_signs = None
        if self.compression is not None:
            n_measurements = max(1, round(self.compression * n_rows))
            self.sensing_seed_ = seed
            self._sensing_signs = sensing_signs(n_measurements, n_rows, seed)
        targets = self.regression_targets()
        inputs = X[self.neighbourhood_instances_]
        if self.embedding_dim is not None:
            rff = RandomFourierFeatures(n_components=self.embedding_dim, random_state=seed).fit(X)
            self.embedding_weights_ = rff.random_weights_
            self.embedding_offset_ = rff.random_offset_
            inputs = _embed(inputs, self.embedding_weights_, self.embedding_offset_)
        coef, x_mean, z_mean, rho = multi_target_ridge(inputs, targets)
        self.regression_coef_, self.regression_mean_, self.target_mean_ = coef, x_mean, z_mean
        self.regression_rho_ = rho
        return self

    def regression_targets(self) -> np.ndarray:
        """The N target neighbourhoods' indicator vectors y (N, M), or φ y (N, D) compressed."""
        check_is_fitted(self, "neighbourhood_indptr_")
        signs, bounds = self.sensing_matrix(), self.neighbourhood_indptr_
        n_targets = len(self.training_rows_) if signs is None else len(signs)
        out = np.zeros((len(self.neighbourhood_instances_), n_targets), dtype=np.float32)
        for n in range(len(out)):
            members = self.neighbourhood_members_[bounds[n] : bounds[n + 1]]
            if signs is None:
                out[n, members] = 1.0
            else:
                out[n] = signs[:, members].sum(axis=1, dtype=np.float32)
        return out if signs is None else out / np.float32(np.sqrt(len(signs)))

    def sensing_matrix(self) -> np.ndarray | None:
        """The signs φ·√D (D, M) int8 of the compressed indicators, or None without compression:
        drawn from `sensing_seed_` the first time a loaded model needs them, or the signs a
        model saved before kept."""
        saved = vars(self).get("sensing_signs_")
        if saved is not None or getattr(self, "sensing_seed_", None) is None:
            return saved
        if getattr(self, "_sensing_signs", None) is None:
            n_measurements = len(self.target_mean_)
            self._sensing_signs = sensing_signs(
                n_measurements, len(self.training_rows_), self.sensing_seed_
            )
        return self._sensing_signs

    def prior(self) -> np.ndarray | None:
        """The weights (d, C') local fits shrink towards (``local_prior``), or None."""
        return self.prior_weights_ if self.local_prior == "global" else None

    def label_weights(self) -> np.ndarray | None:
        """M / (C · M_c) of each label c for ``class_weight="balanced"``, else None."""
        if self.class_weight is None:
            return None
        counts = np.bincount(self.training_index_, minlength=len(self.classes_))
        return len(self.training_index_) / (len(counts) * np.maximum(counts, 1))

    def _score_params(self) -> tuple:
        check_is_fitted(self, "training_rows_")
        predicted = self.neighbourhood == "predicted"
        return (
            self.training_rows_, self.training_index_, len(self.classes_),
            tuple(int(k) for k in self.sizes), float(self.alpha), self.neighbourhood,
            bool(self.balanced), self.label_weights(), self.prior(), self.components_,
            self.sensing_matrix() if predicted else None,
            self.regression_coef_ if predicted else None,
            self.regression_mean_ if predicted else None,
            self.target_mean_ if predicted else None,
            self.recovery,
            None if self.embedding_weights_ is None or not predicted
            else (self.embedding_weights_, self.embedding_offset_),
        )  # fmt: skip

    _scores = staticmethod(_posterior_block)

    def predict_proba(self, X: Any) -> Any:
        """Posteriors (n, C) of the most confident local classifier of each row."""
        X = self._check_predict_input(X)
        return self._map_rows(X, _proba_block, n_cols=len(self.classes_), dtype=np.float32)


def _proba_block(X: np.ndarray, scores: Any, params: tuple) -> np.ndarray:
    return scores(X, *params)
