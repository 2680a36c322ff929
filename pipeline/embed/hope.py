"""Exemplar-centred high-order parametric embedding, en-HOPE (paper 003 §3).

The embedding (eq. 5, O = 2) is a shallow network of factorised second-order feature
interactions: y = V σ(Wᵀ(Cᵀx′)² + b), x′ = [x; 1]. It is trained against z exemplars instead of
all pairs of rows (eqs. 6–8): q_{j|i} ∝ (1 + ‖f(x_i) − f(e_j)‖²)⁻¹ with one normaliser over every
(row, exemplar) pair, and p_{j|i} spread evenly over the exemplars of row i's class. The objective
is therefore a sum over rows plus the log of another sum over rows, so one streaming pass
(`pipeline.reductions.reduce_rows`) gives the exact full-batch objective and gradient.

The gradient is linear in the upstream weights ∂ℓ/∂d_ij = (p_ij t_ij − t_ij²/G)/n, with G the
global mean similarity that is only known at the end of the pass. A pass therefore back-propagates
the two terms separately and combines them once G is known: one read of the rows for the same
GEMM count as a first pass for G followed by a gradient pass, which would read every row twice.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import dask.array as da
import numpy as np
import scipy.optimize
from sklearn.base import BaseEstimator
from sklearn.cluster import KMeans
from sklearn.utils import check_random_state

from imgscale.pipeline.classify._base import RowClassifierMixin, encode_labels, unique_labels
from imgscale.pipeline.classify._minibatch import RowSampler
from imgscale.pipeline.compute import compute
from imgscale.pipeline.embed._base import RowTransformerMixin
from imgscale.pipeline.reductions import accumulating, reduce_rows

EXEMPLAR_INITS = ("kmeans", "random", "learned")
SOLVERS = ("adam", "lbfgs")
SCHEDULES = ("adaptive", "constant")
# Rows embedded at a time inside a chunk: bounds the (rows × F) float32 temporaries to ~13 MB.
_PIECE_ROWS = 4096
# Labelled rows drawn (at most) for the input scaling and the per-class k-means / random exemplars.
_INIT_SAMPLE_ROWS = 50_000


# -- the network (eq. 5) -----------------------------------------------------------------------


def _sigmoid_inplace(U: np.ndarray) -> np.ndarray:
    """σ(U) = ½(1 + tanh(U/2)), written over U. Trained units saturate (pre-activations of
    ±1,000 on MNIST), where `scipy.special.expit` slows several-fold on overflowing and
    subnormal exponentials; numpy's vectorised tanh costs the same at any magnitude and is as
    accurate in float32."""
    U *= 0.5
    np.tanh(U, out=U)
    U *= 0.5
    U += 0.5
    return U


@dataclass
class Network:
    """Parameters of eq. 5 acting on raw rows: the input centring and scaling is folded into the
    first layer, A = X Cx + c0 (Cx = s C[:H], c0 = C[H] − s μᵀC[:H]), so rows are never copied."""

    Cx: np.ndarray  # (H, F)
    c0: np.ndarray  # (F,)
    W: np.ndarray  # (F, m)
    b: np.ndarray  # (m,)
    V: np.ndarray  # (h, m)

    def forward(self, X: np.ndarray) -> tuple[np.ndarray, tuple]:
        """Embedded rows (n, h) and what `backward` needs."""
        A = X @ self.Cx
        A += self.c0
        P = A * A
        U = P @ self.W
        U += self.b
        S = _sigmoid_inplace(U)
        return S @ self.V.T, (X, A, P, S)

    def backward(
        self, cache: tuple, dY: np.ndarray, *, wrt_rows: bool = False
    ) -> tuple[dict, np.ndarray | None]:
        """Gradients of Σ_i dY_i · y_i with respect to every block, and to the rows X when
        ``wrt_rows`` (learned exemplars need it; training rows do not)."""
        X, A, P, S = cache
        grads = {"V": dY.T @ S}
        dU = dY @ self.V
        dU *= S
        dU *= 1 - S
        grads["W"], grads["b"] = P.T @ dU, dU.sum(axis=0)
        dA = dU @ self.W.T
        dA *= A
        dA *= 2
        grads["Cx"], grads["c0"] = X.T @ dA, dA.sum(axis=0)
        return grads, (dA @ self.Cx.T if wrt_rows else None)

    def arrays(self) -> tuple[np.ndarray, ...]:
        """(Cx, c0, W, b, V): what tasks get, each array a graph key of its own."""
        return self.Cx, self.c0, self.W, self.b, self.V

    def embed(self, X: np.ndarray) -> np.ndarray:
        """Embedded rows, `_PIECE_ROWS` at a time."""
        out = np.empty((len(X), self.V.shape[0]), dtype=self.V.dtype)
        for start in range(0, len(X), _PIECE_ROWS):
            out[start : start + _PIECE_ROWS] = self.forward(X[start : start + _PIECE_ROWS])[0]
        return out


# -- the objective (eqs. 6–8) as a row reduction -----------------------------------------------


@dataclass
class HopeTerms:
    """Additive terms of the objective over a set of labelled rows.

    ``log_sum`` = Σ_ij p_ij log(1 + d_ij), ``similarity_sum`` = Σ_ij t_ij (t = (1 + d)⁻¹), and the
    gradients of Σ_ij (p_ij t_ij)·(−log t...) split as in the module docstring: ``attract`` holds
    the gradients for upstream weights p_ij t_ij and ``repel`` for t_ij², each with respect to
    the network blocks and the embedded exemplars ``Ye``.
    """

    n_rows: int = 0
    log_sum: float = 0.0
    similarity_sum: float = 0.0
    attract: dict = field(default_factory=dict)
    repel: dict = field(default_factory=dict)

    def __add__(self, other: HopeTerms) -> HopeTerms:
        return HopeTerms(
            self.n_rows + other.n_rows,
            self.log_sum + other.log_sum,
            self.similarity_sum + other.similarity_sum,
            _add_dicts(self.attract, other.attract),
            _add_dicts(self.repel, other.repel),
        )


def _add_dicts(a: dict, b: dict) -> dict:
    if not a:
        return dict(b)
    if not b:
        return dict(a)
    return {k: a[k] + b[k] for k in a}


def _accumulate(target: dict, grads: dict) -> None:
    for k, v in grads.items():
        if k in target:
            target[k] += v
        else:
            target[k] = v.astype(np.float64)


def _exemplar_pull(w: np.ndarray, Y: np.ndarray, Ye: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For upstream weights w_ij on d_ij = ‖y_i − ye_j‖²: (∂/∂Y, ∂/∂Ye) of Σ w_ij d_ij."""
    row_weight = w.sum(axis=1)
    dY = 2 * (row_weight[:, None] * Y - w @ Ye)
    dYe = 2 * (w.sum(axis=0)[:, None] * Ye - w.T @ Y)
    return dY, dYe


@accumulating
def chunk_hope_terms(
    X: np.ndarray,
    y_index: np.ndarray,
    Cx: np.ndarray,
    c0: np.ndarray,
    W: np.ndarray,
    b: np.ndarray,
    V: np.ndarray,
    Ye: np.ndarray,
    targets: np.ndarray,
    row_start: int = 0,
    into: HopeTerms | None = None,
) -> HopeTerms:
    """HopeTerms of one chunk's labelled rows (y_index ≥ 0), added in place to `into`.

    (Cx, c0, W, b, V) are a `Network`'s; ``targets`` (C, z) is p_{j|i} for a row of each
    class: 1/z_c on the class's exemplars.
    Computes in the dtype of the network (float32 in fit, float64 in gradient checks) and
    accumulates in float64.
    """
    net = Network(Cx, c0, W, b, V)
    terms = HopeTerms() if into is None else into
    y_index = np.asarray(y_index)
    if len(y_index) != len(X):
        raise ValueError(f"rows {row_start}..{row_start + len(X)}: {len(y_index)} labels")
    for start in range(0, len(X), _PIECE_ROWS):
        labels = y_index[start : start + _PIECE_ROWS]
        keep = labels >= 0
        if not keep.any():
            continue
        rows = X[start : start + _PIECE_ROWS]
        rows, labels = (rows, labels) if keep.all() else (rows[keep], labels[keep])
        Y, cache, distances, p, similarity = _similarities(
            net, rows, labels, Ye, targets, row_start + start
        )
        terms.n_rows += len(rows)
        terms.log_sum += float(np.sum(p * np.log1p(distances), dtype=np.float64))
        terms.similarity_sum += float(np.sum(similarity, dtype=np.float64))
        for part, weights in (
            (terms.attract, p * similarity),
            (terms.repel, similarity * similarity),
        ):
            dY, dYe = _exemplar_pull(weights, Y, Ye)
            grads, _ = net.backward(cache, dY)
            grads["Ye"] = dYe
            _accumulate(part, grads)
    return terms


def _similarities(
    net: Network,
    rows: np.ndarray,
    labels: np.ndarray,
    Ye: np.ndarray,
    targets: np.ndarray,
    row_start: int,
) -> tuple[np.ndarray, tuple, np.ndarray, np.ndarray, np.ndarray]:
    """Embedded rows Y, the network's cache, d_ij, p_{j|i} and t_ij = (1 + d_ij)⁻¹ of labelled
    rows (numbered from ``row_start`` in errors)."""
    Y, cache = net.forward(rows.astype(net.V.dtype, copy=False))
    distances = _squared_distances(Y, Ye)
    if not np.isfinite(distances).all():
        bad = np.flatnonzero(~np.isfinite(distances).all(axis=1))[:10] + row_start
        raise ValueError(f"non-finite embedding of rows {bad.tolist()}")
    return Y, cache, distances, targets[labels], 1 / (1 + distances)


def _squared_distances(Y: np.ndarray, Ye: np.ndarray) -> np.ndarray:
    """‖y_i − ye_j‖² (n, z); expanded, clipped at 0 against rounding."""
    d = -2 * (Y @ Ye.T)
    d += np.einsum("ij,ij->i", Y, Y)[:, None]
    d += np.einsum("ij,ij->i", Ye, Ye)
    return np.maximum(d, 0, out=d)


# -- the full parameter vector -----------------------------------------------------------------


@dataclass
class Layout:
    """How the blocks C (H+1, F), W (F, m), b (m,), V (h, m) and, when learned, the exemplars
    E (z, H) in scaled input coordinates sit in one flat float64 vector θ."""

    n_features: int
    n_factors: int
    n_hidden: int
    n_components: int
    n_exemplars: int
    learn_exemplars: bool

    def shapes(self) -> dict[str, tuple[int, ...]]:
        H, F, m, h = self.n_features, self.n_factors, self.n_hidden, self.n_components
        shapes = {"C": (H + 1, F), "W": (F, m), "b": (m,), "V": (h, m)}
        if self.learn_exemplars:
            shapes["E"] = (self.n_exemplars, H)
        return shapes

    def slices(self) -> dict[str, slice]:
        """Where each block sits in θ."""
        slices, start = {}, 0
        for name, shape in self.shapes().items():
            size = int(np.prod(shape))
            slices[name] = slice(start, start + size)
            start += size
        return slices

    def unpack(self, theta: np.ndarray) -> dict[str, np.ndarray]:
        shapes = self.shapes()
        return {name: theta[span].reshape(shapes[name]) for name, span in self.slices().items()}

    def pack(self, blocks: dict[str, np.ndarray]) -> np.ndarray:
        return np.concatenate([np.ravel(blocks[name]) for name in self.shapes()])


@dataclass
class Problem:
    """Everything the objective needs besides θ: input scaling (x̃ = s(x − μ)), the exemplars in
    scaled coordinates when they are fixed, and the per-class targets p_{j|i}."""

    layout: Layout
    mean: np.ndarray  # (H,) μ
    scale: float  # s
    targets: np.ndarray  # (C, z)
    fixed_exemplars: np.ndarray | None  # (z, H) scaled, or None when learned
    dtype: Any = np.float32

    def network(self, blocks: dict[str, np.ndarray]) -> Network:
        C = blocks["C"]
        Cx = self.scale * C[:-1]
        c0 = C[-1] - self.mean @ Cx
        dt = self.dtype
        return Network(
            Cx.astype(dt), c0.astype(dt), blocks["W"].astype(dt), blocks["b"].astype(dt),
            blocks["V"].astype(dt),
        )  # fmt: skip

    def scaled_exemplars(self, blocks: dict[str, np.ndarray]) -> np.ndarray:
        return blocks["E"] if self.layout.learn_exemplars else self.fixed_exemplars

    def exemplar_embedding(self, blocks: dict[str, np.ndarray]) -> tuple[Network, np.ndarray, Any]:
        """The network on raw rows, and the exemplars embedded by the same network on scaled
        rows (an identity scaling: their first layer is C itself)."""
        net = self.network(blocks)
        E = self.scaled_exemplars(blocks).astype(self.dtype)
        on_scaled = Network(
            blocks["C"][:-1].astype(self.dtype), blocks["C"][-1].astype(self.dtype),
            net.W, net.b, net.V,
        )  # fmt: skip
        Ye, cache = on_scaled.forward(E)
        return net, Ye, (on_scaled, cache)

    def terms(self, X: Any, y_index: Any, theta: np.ndarray) -> tuple[HopeTerms, Any]:
        """HopeTerms of all labelled rows of X (one `reduce_rows` pass on dask input)."""
        blocks = self.layout.unpack(theta)
        net, Ye, exemplar_state = self.exemplar_embedding(blocks)
        partial = reduce_rows(chunk_hope_terms, [X, y_index], *net.arrays(), Ye, self.targets)
        return compute(partial)[0], (blocks, exemplar_state)

    def objective(self, X: Any, y_index: Any, theta: np.ndarray) -> tuple[float, np.ndarray]:
        """Cross-entropy −Σ_ij p_{j|i} log q_{j|i} per row, minus log n, and its gradient: eq. 6's
        KL divergence per row up to constants (the entropy of p and log n, so that the value
        does not grow with n)."""
        terms, (_, exemplar_state) = self.terms(X, y_index, theta)
        if terms.n_rows == 0:
            raise ValueError("no labelled rows to fit")
        n, mean_similarity = terms.n_rows, terms.similarity_sum / terms.n_rows
        loss = terms.log_sum / n + np.log(mean_similarity)
        g = {k: (terms.attract[k] - terms.repel[k] / mean_similarity) / n for k in terms.attract}
        return float(loss), self._gradient(g, exemplar_state)

    def batch_objective(
        self, X: np.ndarray, y_index: np.ndarray, theta: np.ndarray
    ) -> tuple[float, np.ndarray]:
        """`objective` of in-memory rows (a minibatch) with one backward pass instead of two:
        the normaliser is known once the rows are embedded, so the upstream weights
        (p_ij t_ij − t_ij²/G)/n are combined before back-propagating."""
        keep = np.asarray(y_index) >= 0
        if not keep.any():
            raise ValueError("no labelled rows to fit")
        blocks = self.layout.unpack(theta)
        net, Ye, exemplar_state = self.exemplar_embedding(blocks)
        Y, cache, distances, p, similarity = _similarities(
            net, np.asarray(X)[keep], np.asarray(y_index)[keep], Ye, self.targets, 0
        )
        n = len(Y)
        mean_similarity = np.sum(similarity, dtype=np.float64) / n
        loss = np.sum(p * np.log1p(distances), dtype=np.float64) / n + np.log(mean_similarity)
        dtype = similarity.dtype.type
        weights = similarity * (p - similarity / dtype(mean_similarity)) / dtype(n)
        dY, dYe = _exemplar_pull(weights, Y, Ye)
        g, _ = net.backward(cache, dY)
        g["Ye"] = dYe
        return float(loss), self._gradient(g, exemplar_state)

    def _gradient(self, g: dict, exemplar_state: tuple) -> np.ndarray:
        """θ's gradient from the gradients with respect to the raw-row network and the
        embedded exemplars ``Ye``."""
        on_scaled, cache = exemplar_state
        # ∂ℓ/∂Ye flows back through the exemplars' own embedding (eq. 9 for learned exemplars).
        exemplar_grads, dE = on_scaled.backward(
            cache, g.pop("Ye").astype(on_scaled.V.dtype), wrt_rows=self.layout.learn_exemplars
        )
        C_grad = np.zeros(self.layout.shapes()["C"])
        C_grad[:-1] = self.scale * (g["Cx"] - np.outer(self.mean, g["c0"]))
        C_grad[:-1] += exemplar_grads["Cx"]
        C_grad[-1] = g["c0"] + exemplar_grads["c0"]
        grads = {
            "C": C_grad,
            "W": g["W"] + exemplar_grads["W"],
            "b": g["b"] + exemplar_grads["b"],
            "V": g["V"] + exemplar_grads["V"],
        }
        if self.layout.learn_exemplars:
            grads["E"] = dE
        return self.layout.pack(grads).astype(np.float64)


# -- kNN against the embedded exemplars --------------------------------------------------------


def exemplar_knn_scores(
    Y: np.ndarray, Ye: np.ndarray, class_starts: np.ndarray, k: int
) -> np.ndarray:
    """Class scores (n, C) of embedded rows by k-NN among the embedded exemplars, which are
    ordered by class (class c holds columns class_starts[c]:class_starts[c + 1]).

    A class scores its votes among the k nearest exemplars plus 1/(2(1 + d_c)) ∈ (0, ½], d_c the
    squared distance to its nearest exemplar: ties in votes go to the class with the nearer
    exemplar, and classes without votes are ranked by their nearest exemplar (top-k).
    """
    distances = _squared_distances(Y, Ye)
    n, z = distances.shape
    nearest = np.argpartition(distances, k - 1, axis=1)[:, :k] if k < z else np.arange(z)[None]
    exemplar_class = np.repeat(np.arange(len(class_starts) - 1), np.diff(class_starts))
    scores = 0.5 / (1 + np.minimum.reduceat(distances, class_starts[:-1], axis=1))
    rows = np.arange(n)
    for column in np.broadcast_to(nearest, (n, min(k, z))).T:
        scores[rows, exemplar_class[column]] += 1
    return scores.astype(np.float32)


# -- the estimator -----------------------------------------------------------------------------


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
        Adam's initial step (on USPS, 800 steps at F = 800, m = 400 reached a validation error
        of 3.8% at 3e-3 and 4.7% at 1e-3).
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
        self._check_params()
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
        trace = _Trace(self, theta)
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

    def _check_params(self) -> None:
        if self.exemplar_init not in EXEMPLAR_INITS:
            raise ValueError(
                f"exemplar_init must be one of {', '.join(EXEMPLAR_INITS)}, "
                f"got {self.exemplar_init!r}"
            )
        if self.solver not in SOLVERS:
            raise ValueError(f"solver must be one of {', '.join(SOLVERS)}, got {self.solver!r}")
        if self.learning_rate_schedule not in SCHEDULES:
            raise ValueError(
                f"learning_rate_schedule must be one of {', '.join(SCHEDULES)}, "
                f"got {self.learning_rate_schedule!r}"
            )
        for name in ("n_components", "n_factors", "n_hidden", "batch_size", "validate_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.max_iter < 0:
            raise ValueError(f"max_iter must be non-negative, got {self.max_iter}")
        for name in ("input_dropout", "averaging"):
            if not 0 <= getattr(self, name) < 1:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be non-negative, got {self.weight_decay}")
        if not 0 < self.validation_fraction < 1:
            raise ValueError(
                f"validation_fraction must be in (0, 1), got {self.validation_fraction}"
            )

    def _fit_adam(
        self, problem: Problem, sampler: RowSampler, theta, trace, dropout_rng: np.random.Generator
    ) -> None:
        """AdamW (β = 0.9, 0.999) on minibatches, validated on the average of its iterates;
        each step's objective is eq. 6 on the batch (its features dropped at ``input_dropout``)."""
        theta = theta.copy()  # updated in place
        first, second = np.zeros_like(theta), np.zeros_like(theta)
        average, update = np.zeros_like(theta), np.empty_like(theta)
        slices = problem.layout.slices()
        decayed = [slices[name] for name in ("C", "W", "V")] if self.weight_decay else []
        rate = self.learning_rate
        beta1, beta2, eps = 0.9, 0.999, 1e-8
        keep = 1 - self.input_dropout
        for step in range(1, self.max_iter + 1):
            rows, labels = sampler.batch(self.batch_size)
            if keep < 1:
                rows = _drop_features(rows, keep, dropout_rng)
            loss, grad = problem.batch_objective(rows, labels, theta)
            first *= beta1
            first += (1 - beta1) * grad
            grad *= grad
            second *= beta2
            second += (1 - beta2) * grad
            # θ −= rate · m̂ / (√v̂ + ε), m̂ and v̂ the bias-corrected moments.
            np.sqrt(second, out=update)
            update *= 1 / np.sqrt(1 - beta2**step)
            update += eps
            np.divide(first, update, out=update)
            update *= rate / (1 - beta1**step)
            theta -= update
            for span in decayed:
                theta[span] *= 1 - rate * self.weight_decay
            average *= self.averaging
            average += (1 - self.averaging) * theta
            if step % self.validate_every and step != self.max_iter:
                continue
            if trace.record(step, average / (1 - self.averaging**step), loss):
                break
            if self.learning_rate_schedule == "adaptive" and trace.stale and trace.stale % 2 == 0:
                rate /= 2

    def _fit_lbfgs(self, problem: Problem, X: Any, y_index: np.ndarray, theta, trace) -> None:
        """scipy's L-BFGS-B; every function and gradient evaluation is one pass over X."""
        every = max(1, self.validate_every // 20)
        state = {"iteration": 0, "loss": np.nan}

        def fun(t: np.ndarray) -> tuple[float, np.ndarray]:
            state["loss"], grad = problem.objective(X, y_index, t)
            return state["loss"], grad

        def callback(intermediate_result: scipy.optimize.OptimizeResult) -> None:
            state["iteration"] += 1
            step = state["iteration"]
            if step % every == 0 or step == self.max_iter:
                if trace.record(step, intermediate_result.x, float(intermediate_result.fun)):
                    raise StopIteration

        trace.record(0, theta, problem.objective(X, y_index, theta)[0])
        scipy.optimize.minimize(
            fun, theta, jac=True, method="L-BFGS-B", callback=callback,
            options={"maxiter": self.max_iter, "maxcor": 20},
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


class _Trace:
    """Validation history with early stopping: the best θ by validation error is kept."""

    def __init__(self, model: ExemplarHOPE, theta: np.ndarray):
        self.model, self.patience = model, model.n_iter_no_change
        self.objective: list[float] = []
        self.errors: list[float] = []
        self.seconds: list[float] = []
        self.started = time.perf_counter()
        self.best_theta, self.best_error, self.best_iteration = theta.copy(), np.inf, 0
        self.iteration, self.stale = 0, 0

    def record(self, iteration: int, theta: np.ndarray, loss: float) -> bool:
        """Validate θ; True when the error has not improved in `patience` validations."""
        error = self.model._validation_error(theta)
        self.iteration = iteration
        self.objective.append(float(loss))
        self.errors.append(error)
        self.seconds.append(time.perf_counter() - self.started)
        if error < self.best_error:
            self.best_theta, self.best_error, self.best_iteration = theta.copy(), error, iteration
            self.stale = 0
        else:
            self.stale += 1
        return self.stale >= self.patience


def exemplars_per_class(
    class_counts: np.ndarray, n_exemplars: int, classes: Any = None
) -> np.ndarray:
    """z_c: n_exemplars shared in proportion to class_counts (largest remainders), ≥ 1 each;
    errors name the class by its label in `classes` (default: its index)."""
    n_classes = len(class_counts)
    if not n_classes <= n_exemplars:
        raise ValueError(
            f"n_exemplars = {n_exemplars}: need at least one exemplar for each of the "
            f"{n_classes} classes"
        )
    share = class_counts / class_counts.sum() * (n_exemplars - n_classes)
    per_class = 1 + np.floor(share).astype(np.int64)
    remainder = n_exemplars - per_class.sum()
    per_class[np.argsort(-(share - np.floor(share)), kind="stable")[:remainder]] += 1
    short = np.flatnonzero(per_class > class_counts)
    if len(short):
        c = short[0]
        label = c if classes is None else np.asarray(classes)[c].item()
        raise ValueError(
            f"n_exemplars = {n_exemplars} gives class {label!r} {per_class[c]} exemplars but it "
            f"has only {class_counts[c]} labelled rows"
        )
    return per_class


def initial_exemplars(
    rows: np.ndarray, y_index: np.ndarray, per_class: np.ndarray, init: str, rng
) -> tuple[np.ndarray, np.ndarray]:
    """(exemplars (z, H) float64, their class index), ordered by class: per-class k-means
    centres (``kmeans``, ``learned``) or random rows of each class (``random``)."""
    exemplars, index = [], []
    for c, count in enumerate(per_class):
        members = rows[y_index == c]
        if len(members) < count:
            raise ValueError(
                f"class index {c}: {len(members)} rows sampled, fewer than its {count} exemplars"
            )
        if init == "random":
            centres = members[rng.choice(len(members), count, replace=False)]
        else:
            seed = int(rng.randint(2**31 - 1))
            centres = KMeans(count, n_init=3, random_state=seed).fit(members).cluster_centers_
        exemplars.append(np.asarray(centres, dtype=np.float64))
        index.append(np.full(count, c))
    return np.vstack(exemplars), np.concatenate(index)


def initial_blocks(layout: Layout, scaled_exemplars: np.ndarray, rng) -> dict[str, np.ndarray]:
    """Gaussian weights with std 1/√fan-in, so that every unit's input has unit scale on scaled
    rows; b = 0."""
    blocks = {}
    for name, shape in layout.shapes().items():
        if name == "b":
            blocks[name] = np.zeros(shape)
        elif name == "E":
            blocks[name] = scaled_exemplars.copy()
        else:
            fan_in = shape[1] if name == "V" else shape[0]
            blocks[name] = rng.standard_normal(shape) / np.sqrt(fan_in)
    return blocks
