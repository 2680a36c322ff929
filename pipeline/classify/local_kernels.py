"""The numpy kernels of lazy local learning (paper 004) that `local` wires: the local
classifiers with their Platt posteriors (§3.1, §3.3) and the compressed-sensing regression of
neighbourhood indicators (§3.2)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import scipy.linalg
from sklearn.linear_model import orthogonal_mp
from threadpoolctl import threadpool_limits

from imgscale.pipeline.gram import add_gram

RECOVERIES = ("omp", "correlation")
# The ρ of the indicator regression is chosen by GCV on this grid times the mean
# eigenvalue of the centred Gram, so one grid fits features of any scale.
RELATIVE_RHO_GRID = tuple(10.0**e for e in range(-5, 3))
# Platt's sigmoid fit (Lin, Lin & Weng 2007): Newton iterations, step halvings, the gradient
# tolerance and the Hessian's ridge σ.
_PLATT_ITERATIONS, _PLATT_HALVINGS, _PLATT_TOLERANCE, _PLATT_SIGMA = 100, 20, 1e-5, 1e-12


def one_blas_thread(fn: Callable) -> Callable:
    """Run `fn` with single-threaded BLAS: its products and solves are small (k, d ≤ a few
    hundred), where OpenBLAS threads cost more than they give; parallelism comes from running
    blocks side by side."""

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        with threadpool_limits(limits=1, user_api="blas"):
            return fn(*args, **kwargs)

    return functools.update_wrapper(wrapped, fn)


# --------------------------------------------------------------------------------------------
# Local classifiers (§3.1, §3.3)


def _targets(y_set: np.ndarray, n_classes: int) -> np.ndarray:
    """±1 targets (..., k, C') of class indices: one column (class 1) for two classes."""
    if n_classes == 2:
        return np.where(y_set == 1, 1.0, -1.0)[..., None]
    return np.where(y_set[..., None] == np.arange(n_classes), 1.0, -1.0)


def _platt(
    decisions: np.ndarray, positive: np.ndarray, weights: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Platt's sigmoid P(positive | f) = 1 / (1 + exp(A f + B)) fitted per leading index.

    `decisions` and `positive` are (..., k); returns A and B of shape (...). The targets are
    Platt's smoothed (N₊ + 1)/(N₊ + 2) and 1/(N₋ + 2), so separable sets keep a finite fit.
    Newton's method with a backtracking line search (Lin, Lin & Weng 2007, Algorithm 1), all
    fits advancing together; a fit stops moving once its gradient is below their tolerance.
    `weights` (..., k), scaled to sum to k, weigh each row's term of the likelihood, and N₊, N₋
    are then the weighted counts.
    """
    f = decisions
    w_row = np.ones(f.shape) if weights is None else np.broadcast_to(weights, f.shape)
    w_row = w_row * (f.shape[-1] / w_row.sum(axis=-1, keepdims=True))
    n_pos = (w_row * positive).sum(axis=-1, keepdims=True)
    n_neg = f.shape[-1] - n_pos
    t = np.where(positive, (n_pos + 1.0) / (n_pos + 2.0), 1.0 / (n_neg + 2.0))
    a = np.zeros(f.shape[:-1])
    b = np.log((n_neg[..., 0] + 1.0) / (n_pos[..., 0] + 1.0))

    def loss(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        z = a[..., None] * f + b[..., None]
        # −log-likelihood: t·log(1 + e^z) + (1 − t)·log(1 + e^−z), written stably.
        return (w_row * (t * np.logaddexp(0, z) + (1 - t) * np.logaddexp(0, -z))).sum(axis=-1)

    current = loss(a, b)
    for _ in range(_PLATT_ITERATIONS):
        p = 0.5 * (1 - np.tanh(0.5 * (a[..., None] * f + b[..., None])))  # 1 / (1 + e^z)
        g = w_row * (t - p)  # ∂loss/∂z
        ga, gb = (g * f).sum(-1), g.sum(-1)
        moving = np.maximum(np.abs(ga), np.abs(gb)) >= _PLATT_TOLERANCE
        if not moving.any():
            break
        w = w_row * p * (1 - p) + _PLATT_SIGMA
        haa, hab, hbb = (w * f * f).sum(-1) + _PLATT_SIGMA, (w * f).sum(-1), w.sum(-1)
        det = haa * hbb - hab * hab
        da_, db_ = -(hbb * ga - hab * gb) / det, -(haa * gb - hab * ga) / det
        slope = ga * da_ + gb * db_
        step = np.where(moving, 1.0, 0.0)
        for _ in range(_PLATT_HALVINGS):
            trial = loss(a + step * da_, b + step * db_)
            short = moving & (trial > current + 1e-4 * step * slope)
            if not short.any():
                break
            step = np.where(short, step / 2, step)
        step = np.where(trial <= current, step, 0.0)
        a, b = a + step * da_, b + step * db_
        current = np.minimum(trial, current)
    return a, b


def _ridge(
    X_sets: np.ndarray,
    y_sets: np.ndarray,
    n_classes: int,
    alpha: float,
    row_weights: np.ndarray | None,
    prior: np.ndarray | None,
) -> tuple[np.ndarray, ...]:
    """The weighted ridge of each set: (weights (..., d, C'), mean (..., 1, d), target mean
    (..., 1, C'), row weights (..., k, 1) summing to k, ±1 targets (..., k, C'))."""
    X_sets = np.asarray(X_sets, dtype=np.float64)
    k, d = X_sets.shape[-2:]
    if row_weights is None:
        w = np.ones(X_sets.shape[:-1])
    else:
        w = np.broadcast_to(np.asarray(row_weights, np.float64), X_sets.shape[:-1])
    w = (w * (k / w.sum(axis=-1, keepdims=True)))[..., None]  # (..., k, 1), Σ = k
    mean = (w * X_sets).sum(axis=-2, keepdims=True) / k
    centred = X_sets - mean
    rho = alpha * (w * centred**2).sum(axis=(-2, -1)) / k + np.finfo(float).tiny
    targets = _targets(y_sets, n_classes)
    target_mean = (w * targets).sum(axis=-2, keepdims=True) / k
    prior = np.zeros((d, targets.shape[-1])) if prior is None else np.asarray(prior, np.float64)
    root = np.sqrt(w)
    # weights = prior + the plain ridge of the residual targets t̃ − X̃·prior.
    scaled, scaled_targets = root * centred, root * (targets - target_mean - centred @ prior)
    transposed = np.swapaxes(scaled, -1, -2)
    if d < k:
        system = transposed @ scaled + rho[..., None, None] * np.eye(d)
        weights = np.linalg.solve(system, transposed @ scaled_targets)
    else:
        dual = np.linalg.solve(scaled @ transposed + rho[..., None, None] * np.eye(k),
                               scaled_targets)  # fmt: skip
        weights = transposed @ dual
    return prior + weights, mean, target_mean, w, targets


def ridge_weights(
    X: np.ndarray,
    y_index: np.ndarray,
    n_classes: int,
    alpha: float,
    row_weights: np.ndarray | None = None,
) -> np.ndarray:
    """Weights (d, C') of the ridge `local_posteriors` fits, on one set X (k, d): the global
    classifier a local fit may shrink towards (its ``prior``)."""
    return _ridge(X, y_index, n_classes, alpha, row_weights, None)[0]


def local_posteriors(
    X_sets: np.ndarray,
    y_sets: np.ndarray,
    n_classes: int,
    queries: np.ndarray,
    alpha: float,
    row_weights: np.ndarray | None = None,
    prior: np.ndarray | None = None,
) -> np.ndarray:
    """Posterior (..., C) of each query under a Platt-scaled ridge classifier of its set.

    `X_sets` (..., k, d) and class indices `y_sets` (..., k) are one neighbourhood per leading
    index and `queries` (..., d) one row each. Ridge on centred rows and ±1 targets with
    ρ = alpha · ‖X̃‖²_F / k (scale-free), solved in the primal (d × d) form when d < k, else the
    dual (k × k); the sigmoid of each target column is fitted on the set's own decisions, and
    one-vs-rest posteriors are normalised.

    `row_weights` (..., k), if given, weigh each row's squared error and Platt term, the mean,
    the centring and ρ's norm being weighted alike (rows of weight w count as w rows): the
    weighted least squares min Σ wᵢ(x̃ᵢw − t̃ᵢ)² + ρ‖w‖², solved through √W X̃.

    `prior` (d, C'), C' the target columns, makes the ridge shrink the weights towards it
    rather than towards 0: min Σ wᵢ(x̃ᵢw − t̃ᵢ)² + ρ‖w − prior‖² (biased regularisation, as in
    hypothesis transfer: Tommasi, Orabona & Caputo, CVPR 2010). A set with few rows of a label
    then keeps the prior's direction where it says little, and sets its own offset.
    """
    weights, mean, target_mean, w, targets = _ridge(
        X_sets, y_sets, n_classes, alpha, row_weights, prior
    )
    centred = np.asarray(X_sets, dtype=np.float64) - mean
    offsets = (queries - mean[..., 0, :])[..., None, :]  # (..., 1, d)
    train_decisions = centred @ weights + target_mean
    query_decisions = (offsets @ weights + target_mean)[..., 0, :]
    a, b = _platt(
        np.swapaxes(train_decisions, -1, -2),
        np.swapaxes(targets > 0, -1, -2),
        None if row_weights is None else w[..., 0][..., None, :],
    )
    probability = 0.5 * (1 - np.tanh(0.5 * (a * query_decisions + b)))  # (..., C')
    if targets.shape[-1] == 1:
        return np.concatenate([1 - probability, probability], axis=-1)
    return probability / np.maximum(probability.sum(axis=-1, keepdims=True), 1e-300)


# --------------------------------------------------------------------------------------------
# Compressed sensing (§3.2)


def sensing_signs(n_measurements: int, n_rows: int, seed: int) -> np.ndarray:
    """Random ±1 signs (D, M) int8; φ = signs/√D satisfies the RIP with high probability.

    Sign i·M + j is bit i·M + j of the raw 64-bit words of PCG64 seeded with ``seed``, the least
    significant bit of each word first: -1 for a 0 bit, +1 for a 1. NumPy guarantees a bit
    generator's raw stream for a fixed seed across versions (a `Generator` method's is not), so
    a model that keeps only ``seed`` draws the same signs again wherever it is loaded.
    """
    count = n_measurements * n_rows
    words = np.random.PCG64(seed).random_raw(-(-count // 64)).astype("<u8")
    signs = np.unpackbits(words.view(np.uint8), count=count, bitorder="little").view(np.int8)
    signs *= 2
    signs -= 1
    return signs.reshape(n_measurements, n_rows)


def multi_target_ridge(
    X: np.ndarray, Z: np.ndarray, relative_grid: Sequence[float] = RELATIVE_RHO_GRID
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Multi-target ridge from rows X (n, d) to targets Z (n, D): (coef (d, D), x̄, z̄, ρ).

    One Gram of the centred rows (`pipeline.gram.add_gram`), one eigendecomposition, and ρ
    chosen by generalised cross-validation over `relative_grid` times the mean eigenvalue:
    RSS(ρ) = ‖Z̃‖² − Σᵢ ‖uᵢ‖² (λᵢ + 2ρ)/(λᵢ + ρ)², df(ρ) = Σᵢ λᵢ/(λᵢ + ρ), with U = VᵀX̃ᵀZ̃.
    """
    x_mean = X.mean(axis=0, dtype=np.float64)
    z_mean = Z.mean(axis=0, dtype=np.float64)
    centred = (X - x_mean).astype(np.float64)
    gram = np.zeros((X.shape[1], X.shape[1]))
    add_gram(gram, centred)
    eigvals, eigvecs = scipy.linalg.eigh(gram, driver="evd")
    eigvals = eigvals.clip(min=0.0)
    Zc = Z - z_mean
    u = eigvecs.T @ (centred.T @ Zc)
    grid = np.asarray(relative_grid) * max(eigvals.mean(), np.finfo(float).tiny)
    n = len(X)
    u2 = (u**2).sum(axis=1)
    lam, rho = eigvals[None, :], grid[:, None]
    rss = (Zc**2).sum() - (u2 * (lam + 2 * rho) / (lam + rho) ** 2).sum(axis=1)
    df = (lam / (lam + rho)).sum(axis=1)
    with np.errstate(divide="ignore"):
        gcv = np.where(df < n, (rss / n) / (1 - df / n) ** 2, np.inf)
    rho = float(grid[np.argmin(gcv)])
    coef = eigvecs @ (u / (eigvals + rho)[:, None])
    return coef.astype(np.float32), x_mean, z_mean, rho


def recover(
    measurements: np.ndarray, phi: np.ndarray, sparsity: int, method: str = "omp"
) -> np.ndarray:
    """M-dimensional confidences (q, M) of measurements (q, D) = x φᵀ of sparse x.

    ``"omp"``: orthogonal matching pursuit with `sparsity` atoms (scikit-learn's
    `orthogonal_mp`); entries off its support are 0. ``"correlation"``: φᵀ measurements, the
    one-step thresholding estimate (every entry non-zero; its ranking is what §3.3 uses).
    """
    measurements = np.atleast_2d(measurements).astype(np.float64)
    if method == "correlation":
        return measurements @ phi
    if method != "omp":
        raise ValueError(f"recovery must be one of {RECOVERIES}, got {method!r}")
    coef = orthogonal_mp(phi.astype(np.float64), measurements.T, n_nonzero_coefs=sparsity)
    return np.asarray(coef).reshape(phi.shape[1], -1).T
