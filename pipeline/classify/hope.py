"""Exemplar-centred high-order parametric embedding, en-HOPE (paper 003 §3): an embedding
trained for, and used as, a classifier by k-NN against class exemplars.

The network and objective are `hope_network`, the exemplars `hope_exemplars`, the optimisers
`_optimisers`; this module is the estimator that wires them.
"""

from __future__ import annotations

from typing import Any, ClassVar

import dask.array as da
import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state

from imgscale.pipeline.classify._base import RowClassifierMixin, encode_labels, unique_labels
from imgscale.pipeline.classify._minibatch import RowSampler
from imgscale.pipeline.classify._optimisers import ValidationTrace, adam, lbfgs
from imgscale.pipeline.classify.hope_exemplars import (
    exemplar_knn_scores,
    exemplars_per_class,
    initial_exemplars,
)
from imgscale.pipeline.classify.hope_network import Layout, Network, Problem, initial_blocks
from imgscale.pipeline.compute import compute
from imgscale.pipeline.embed._base import RowTransformerMixin
from imgscale.pipeline.fitted import Shape
from imgscale.pipeline.params import Interval, Options

EXEMPLAR_INITS = ("kmeans", "random", "learned")
SOLVERS = ("adam", "lbfgs")
SCHEDULES = ("adaptive", "constant")
# Labelled rows drawn (at most) for the input scaling and the per-class k-means / random exemplars.
_INIT_SAMPLE_ROWS = 50_000


class ExemplarHOPE(RowTransformerMixin, RowClassifierMixin, BaseEstimator):
    """en-HOPE: y = V σ(Wᵀ(Cᵀx′)² + b) trained so rows collapse onto their class's exemplars.

    Objective (paper 003 eqs. 6–8): KL(p ‖ q) over rows i and exemplars j with
    q_{j|i} = (1 + d_ij)⁻¹ / Σ_ik (1 + d_ik)⁻¹, d_ij = ‖f(x_i) − f(e_j)‖², p_{j|i} = 1/z_c on the
    z_c exemplars of row i's class. Rows are centred and scaled by one factor (so the mean
    squared norm of a row is H) before eq. 5; x′ appends 1 (§3.1).

    Exemplars (§3.2): ``kmeans`` (per-class k-means centres, fixed), ``random`` (random rows of
    each class, fixed) or ``learned`` (initialised by k-means and learned with the network, eq. 9).
    The z exemplars are shared among classes in proportion to their rows, at least one each
    ("designated class labels uniformly sampled from the training set"); k-means and the input
    scaling use up to 50,000 labelled rows sampled from X.

    Solvers: ``adam`` takes minibatches of ``batch_size`` rows (drawn from a pool of rows on
    dask input), regularised by ``input_dropout``, ``weight_decay`` and ``averaging`` (none of
    them in the paper, which does not say how it regularises); ``lbfgs`` is full-batch L-BFGS
    (the paper uses conjugate gradients) where each objective and gradient evaluation is one
    streaming pass over X. Either way the kNN error on validation rows (``X_val`` or a
    ``validation_fraction`` of the training rows held out, §4) is measured every
    ``validate_every`` iterations and the best parameters are kept.

    `transform` embeds rows (lazy on dask); `predict` is k-NN among the embedded exemplars
    (`exemplar_knn_scores`): k = 1 with one exemplar per class, else 5 (§4).

    Parameters
    ----------
    n_components : int, default=2
        Embedding dimension h.
    n_factors : int, default=800
        F, the columns of C (§4).
    n_hidden : int, default=400
        m, the high-order units (§4).
    n_exemplars : int, default=20
        z, over all classes; at least one per class and at most the rows of each class.
    exemplar_init : {"kmeans", "random", "learned"}, default="kmeans"
    n_neighbors : int or None, default=None
        k of the kNN; None: 1 with one exemplar per class, else 5 (§4).
    solver : {"adam", "lbfgs"}, default="adam"
    learning_rate : float, default=3e-3
        Adam's initial step (chosen on USPS at F = 800, m = 400 over 1e-3; `bench hope`
        measures it).
    learning_rate_schedule : {"adaptive", "constant"}, default="adaptive"
        ``adaptive`` halves Adam's step after every two validations in a row without a lower
        error (as scikit-learn's MLP with ``learning_rate="adaptive"`` shrinks it when the loss
        stalls): minibatch noise at a constant step otherwise drives the error up again after
        its first minimum.
    batch_size : int, default=1000
    input_dropout : float, default=0.2
        Fraction of each minibatch row's features set to 0 at every Adam step, the others
        scaled by 1/(1 − p): dropout on the input, at the rate Srivastava et al. (JMLR 2014)
        use for MNIST inputs. Not in paper 003, which does not say how it regularises: without
        it the network fits the writers of MNIST's training rows and errs more on the test rows
        (docs/findings/hope.md); 0 trains on the plain objective. Full-batch L-BFGS needs a
        deterministic objective and never drops.
    weight_decay : float, default=1.0
        Decoupled weight decay (AdamW, Loshchilov & Hutter, ICLR 2019): each Adam step also
        shrinks C, W and V by ``learning_rate × weight_decay`` (b and learned exemplars are not
        shrunk). A regulariser paper 003 does not name, as ``input_dropout``.
    averaging : float, default=0.999
        Validation and the fitted parameters use the exponential moving average of Adam's
        iterates with this decay (bias-corrected, so it averages the steps taken, not the
        initial weights): minibatch noise around the optimum averages out. 0 uses the last
        iterate.
    max_iter : int, default=4000
        Adam steps or L-BFGS iterations.
    validate_every : int, default=100
        Iterations between validations (L-BFGS: every ``max(1, validate_every // 20)``).
    validation_fraction : float, default=0.1
    n_iter_no_change : int, default=10
        Stop after this many validations without a lower error.
    pool_rows : int, default=131072
        Rows fetched per pass over dask input for Adam's minibatches.
    random_state : int, RandomState or None

    Attributes
    ----------
    factors_ : ndarray (H + 1, F) float32
        C, acting on scaled rows x̃ = scale_ (x − mean_) with 1 appended.
    hidden_weights_ : ndarray (F, m) float32
    hidden_bias_ : ndarray (m,) float32
    output_weights_ : ndarray (h, m) float32
    mean_ : ndarray (H,) float32
    scale_ : float
    exemplars_ : ndarray (z, H) float32
        Exemplars in input space, ordered by class.
    exemplar_labels_ : ndarray (z,)
    embedded_exemplars_ : ndarray (z, h) float32
    classes_ : ndarray (C,)
    n_neighbors_ : int
    objective_ : list of float
        Objective at each validation (Adam: of the current minibatch).
    validation_error_ : list of float
    validation_seconds_ : list of float
        Seconds from the start of the optimiser to each validation (a convergence curve).
    best_iteration_, n_iter_ : int
    n_components_, n_features_in_ : int

    References
    ----------
    Min, Guo & Song, "Exemplar-centered supervised shallow parametric data embedding",
    IJCAI 2017, §3.1 (eq. 5), §3.2 (eqs. 6–9), §4 (F, m, z, k and validation).
    """

    EXEMPLAR_INITS = EXEMPLAR_INITS
    SOLVERS = SOLVERS

    # The fitted arrays and their shapes (`pipeline.fitted`): Z exemplars, F factors, H hidden
    # units, K the embedding dimension.
    _fitted_shapes: ClassVar[dict[str, Shape]] = {
        "mean_": ("D",),
        "exemplars_": ("Z", "D"),
        "exemplar_labels_": ("Z",),
        "embedded_exemplars_": ("Z", "K"),
        "factors_": (None, "F"),
        "hidden_weights_": ("F", "H"),
        "hidden_bias_": ("H",),
        "output_weights_": ("K", "H"),
    }

    # What each parameter may be (`pipeline.params`), checked when fit reads its rows;
    # n_exemplars is checked against the classes (`exemplars_per_class`).
    _parameter_rules: ClassVar[dict[str, tuple]] = {
        "n_components": (Interval(int, 1, None),),
        "n_factors": (Interval(int, 1, None),),
        "n_hidden": (Interval(int, 1, None),),
        "exemplar_init": (Options(EXEMPLAR_INITS),),
        "n_neighbors": (Interval(int, 1, None), None),
        "solver": (Options(SOLVERS),),
        "learning_rate": (Interval(float, 0, None, closed="neither"),),
        "learning_rate_schedule": (Options(SCHEDULES),),
        "batch_size": (Interval(int, 1, None),),
        "input_dropout": (Interval(float, 0, 1, closed="left"),),
        "weight_decay": (Interval(float, 0, None),),
        "averaging": (Interval(float, 0, 1, closed="left"),),
        "max_iter": (Interval(int, 0, None),),
        "validate_every": (Interval(int, 1, None),),
        "validation_fraction": (Interval(float, 0, 1, closed="neither"),),
        "n_iter_no_change": (Interval(int, 1, None),),
        "pool_rows": (Interval(int, 1, None),),
    }

    def __init__(
        self,
        n_components: int = 2,
        n_factors: int = 800,
        n_hidden: int = 400,
        n_exemplars: int = 20,
        exemplar_init: str = "kmeans",
        n_neighbors: int | None = None,
        solver: str = "adam",
        learning_rate: float = 3e-3,
        learning_rate_schedule: str = "adaptive",
        batch_size: int = 1000,
        input_dropout: float = 0.2,
        weight_decay: float = 1.0,
        averaging: float = 0.999,
        max_iter: int = 4000,
        validate_every: int = 100,
        validation_fraction: float = 0.1,
        n_iter_no_change: int = 10,
        pool_rows: int = 131_072,
        random_state: Any = None,
    ):
        self.n_components = n_components
        self.n_factors = n_factors
        self.n_hidden = n_hidden
        self.n_exemplars = n_exemplars
        self.exemplar_init = exemplar_init
        self.n_neighbors = n_neighbors
        self.solver = solver
        self.learning_rate = learning_rate
        self.learning_rate_schedule = learning_rate_schedule
        self.batch_size = batch_size
        self.input_dropout = input_dropout
        self.weight_decay = weight_decay
        self.averaging = averaging
        self.max_iter = max_iter
        self.validate_every = validate_every
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.pool_rows = pool_rows
        self.random_state = random_state

    # -- input checks shared by transform (RowTransformerMixin) and predict (RowClassifierMixin)

    def _check_rows(self, X: Any, *, reset: bool = False) -> Any:
        return RowTransformerMixin._check_rows(self, X, reset=reset)

    # -- fit -------------------------------------------------------------------------------

    def fit(self, X: Any, y: Any, X_val: Any = None, y_val: Any = None) -> ExemplarHOPE:
        """Learn the embedding (and exemplars) from labelled rows of X; rows labelled -1 are
        not used. ``X_val``/``y_val`` choose the iteration (else rows of X are held out)."""
        X = self._check_rows(X, reset=True)
        y = np.asarray(compute(y)[0] if isinstance(y, da.Array) else y).ravel()
        if len(y) != X.shape[0]:
            raise ValueError(f"X has {X.shape[0]} rows but y has {len(y)} labels")
        classes = unique_labels(y)
        if len(classes) < 2:
            raise ValueError(f"en-HOPE needs labelled rows of at least 2 classes, got {classes}")
        y_index = encode_labels(y, classes)
        counts = np.bincount(y_index[y_index >= 0], minlength=len(classes))
        per_class = exemplars_per_class(counts, self.n_exemplars, classes)
        rng = check_random_state(self.random_state)
        sampler = RowSampler(X, y_index, rng, pool_rows=self.pool_rows)
        if X_val is None:
            labelled = sampler.candidates
            n_val = max(1, round(self.validation_fraction * len(labelled)))
            X_val, val_index = sampler.hold_out(n_val)
            held_out = np.setdiff1d(labelled, sampler.candidates, assume_unique=True)
            y_index = y_index.copy()
            y_index[held_out] = -1
        else:
            X_val = self._check_rows(X_val)
            val_index = encode_labels(np.asarray(y_val).ravel(), classes)
            keep = val_index >= 0
            X_val, val_index = compute(X_val)[0][keep], val_index[keep]
        sample, sample_index = sampler.sample(_INIT_SAMPLE_ROWS)
        mean = sample.mean(axis=0, dtype=np.float64)
        scale = 1 / max(np.sqrt(np.mean((sample - mean) ** 2)), np.finfo(np.float32).tiny)
        exemplars, exemplar_index = initial_exemplars(
            sample, sample_index, per_class, self.exemplar_init, rng
        )
        layout = Layout(
            self.n_features_in_, self.n_factors, self.n_hidden, self.n_components,
            len(exemplars), self.exemplar_init == "learned",
        )  # fmt: skip
        targets = (np.arange(len(classes))[:, None] == exemplar_index[None]).astype(np.float32)
        targets /= targets.sum(axis=1, keepdims=True)
        scaled_exemplars = (exemplars - mean) * scale
        problem = Problem(
            layout, mean, scale, targets, None if layout.learn_exemplars else scaled_exemplars
        )
        theta = layout.pack(initial_blocks(layout, scaled_exemplars, rng))
        self.classes_ = classes
        self.n_neighbors_ = int(
            self.n_neighbors or (1 if len(exemplars) == len(classes) else min(5, len(exemplars)))
        )
        self.mean_, self.scale_ = mean.astype(np.float32), float(scale)
        self.n_components_ = int(self.n_components)
        self._problem, self.exemplar_labels_ = problem, classes[exemplar_index]
        self._validation = (X_val, val_index)
        trace = ValidationTrace(self._validation_error, theta, self.n_iter_no_change, self.max_iter)
        if self.solver == "adam":
            self._fit_adam(
                problem, sampler, theta, trace, np.random.default_rng(rng.randint(2**31))
            )
        else:
            self._fit_lbfgs(problem, X, y_index, theta, trace)
        self._set_parameters(trace.best_theta)
        self.objective_, self.validation_error_ = trace.objective, trace.errors
        self.validation_seconds_ = trace.seconds
        self.best_iteration_, self.n_iter_ = trace.best_iteration, trace.iteration
        del self._problem, self._validation
        return self

    def _fit_adam(
        self, problem: Problem, sampler: RowSampler, theta, trace, dropout_rng: np.random.Generator
    ) -> None:
        """Adam on minibatches; each step's objective is eq. 6 on the batch, its features
        dropped at ``input_dropout``."""
        keep = 1 - self.input_dropout

        def gradient(theta: np.ndarray) -> tuple[float, np.ndarray]:
            rows, labels = sampler.batch(self.batch_size)
            if keep < 1:
                rows = _drop_features(rows, keep, dropout_rng)
            return problem.batch_objective(rows, labels, theta)

        slices = problem.layout.slices()
        adam(
            gradient, theta, trace, learning_rate=self.learning_rate, max_iter=self.max_iter,
            validate_every=self.validate_every, averaging=self.averaging,
            weight_decay=self.weight_decay, decayed=[slices[name] for name in ("C", "W", "V")],
            adaptive=self.learning_rate_schedule == "adaptive",
        )  # fmt: skip

    def _fit_lbfgs(self, problem: Problem, X: Any, y_index: np.ndarray, theta, trace) -> None:
        """Full-batch L-BFGS: every function and gradient evaluation is one pass over X."""
        lbfgs(
            lambda t: problem.objective(X, y_index, t), theta, trace, max_iter=self.max_iter,
            validate_every=max(1, self.validate_every // 20),
        )  # fmt: skip

    def _set_parameters(self, theta: np.ndarray) -> None:
        problem = self._problem
        blocks = problem.layout.unpack(theta)
        self.factors_ = blocks["C"].astype(np.float32)
        self.hidden_weights_ = blocks["W"].astype(np.float32)
        self.hidden_bias_ = blocks["b"].astype(np.float32)
        self.output_weights_ = blocks["V"].astype(np.float32)
        scaled = problem.scaled_exemplars(blocks)
        self.exemplars_ = (scaled / problem.scale + problem.mean).astype(np.float32)
        self.embedded_exemplars_ = self._network().embed(self.exemplars_)

    def _validation_error(self, theta: np.ndarray) -> float:
        """kNN error of the validation rows against the exemplars under θ."""
        self._set_parameters(theta)
        X_val, val_index = self._validation
        predicted = self.predict(X_val)
        return float(np.mean(predicted != self.classes_[val_index]))

    # -- embedding and prediction ----------------------------------------------------------

    def _network(self) -> Network:
        Cx = self.scale_ * self.factors_[:-1]
        c0 = self.factors_[-1] - self.mean_ @ Cx
        return Network(
            Cx, c0.astype(np.float32), self.hidden_weights_, self.hidden_bias_,
            self.output_weights_,
        )  # fmt: skip

    def _transform_params(self) -> tuple[np.ndarray, ...]:
        return self._network().arrays()

    @staticmethod
    def _transform_block(X: np.ndarray, *network: np.ndarray, row_start: int = 0) -> np.ndarray:
        return Network(*network).embed(X)

    def _score_params(self) -> tuple:
        index = encode_labels(np.asarray(self.exemplar_labels_), np.asarray(self.classes_))
        starts = np.searchsorted(index, np.arange(len(self.classes_) + 1))
        return self._network().arrays(), self.embedded_exemplars_, starts, self.n_neighbors_

    @staticmethod
    def _scores(X: np.ndarray, network: tuple, Ye: np.ndarray, starts, k: int) -> np.ndarray:
        return exemplar_knn_scores(Network(*network).embed(X), Ye, starts, k)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float32"]
        return tags


def _drop_features(rows: np.ndarray, keep: float, rng: np.random.Generator) -> np.ndarray:
    """Inverted dropout: each feature kept with probability ``keep`` and scaled by 1/keep."""
    dropped = np.multiply(rows, 1 / keep, dtype=rows.dtype)
    dropped *= rng.random(rows.shape, dtype=np.float32) < keep
    return dropped
