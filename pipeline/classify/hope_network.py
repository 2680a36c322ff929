"""en-HOPE's network (paper 003 eq. 5) and objective (eqs. 6–8), and the flat parameter vector θ.

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

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from imgscale.pipeline.compute import compute
from imgscale.pipeline.reductions import accumulating, reduce_rows
from imgscale.pipeline.rows import squared_distances

# Rows embedded at a time inside a chunk: bounds the (rows × F) float32 temporaries.
PIECE_ROWS = 4096


# -- the network (eq. 5) -----------------------------------------------------------------------


def _sigmoid_inplace(U: np.ndarray) -> np.ndarray:
    """σ(U) = ½(1 + tanh(U/2)), written over U. Trained units saturate (pre-activations in the
    hundreds and beyond), where `scipy.special.expit` slows on overflowing and subnormal
    exponentials; numpy's vectorised tanh costs the same at any magnitude and is as accurate in
    float32."""
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
        """Embedded rows, `PIECE_ROWS` at a time."""
        out = np.empty((len(X), self.V.shape[0]), dtype=self.V.dtype)
        for start in range(0, len(X), PIECE_ROWS):
            out[start : start + PIECE_ROWS] = self.forward(X[start : start + PIECE_ROWS])[0]
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
    for start in range(0, len(X), PIECE_ROWS):
        labels = y_index[start : start + PIECE_ROWS]
        keep = labels >= 0
        if not keep.any():
            continue
        rows = X[start : start + PIECE_ROWS]
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
    distances = squared_distances(Y, Ye)
    if not np.isfinite(distances).all():
        bad = np.flatnonzero(~np.isfinite(distances).all(axis=1))[:10] + row_start
        raise ValueError(f"non-finite embedding of rows {bad.tolist()}")
    return Y, cache, distances, targets[labels], 1 / (1 + distances)


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
