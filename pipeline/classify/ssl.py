"""Semi-supervised classifiers on approximate Laplacian eigenvectors (paper 001 eq. 3, paper 000).

Both take the embedding U of `pipeline.embed.ALE` / `PCALap` / `RPLap` (unlabelled rows labelled
-1) and that embedding's eigenvalues Σ (`eigenvalues_`), and regularise by Σ: smooth functions
(small σ) are cheap, rough ones expensive.
"""

from __future__ import annotations

from typing import Any, ClassVar

import dask.array as da
import numpy as np
import scipy.linalg
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from imgscale.pipeline.classify._base import (
    LinearClassifierMixin,
    checked_grid,
    encode_labels_lazy,
    grown_classes,
    unique_labels,
)
from imgscale.pipeline.classify._row_stats import (
    RowStatsMixin,
    changed_stats,
    row_stats_attributes,
)
from imgscale.pipeline.classify.ridge import RidgeClassifier, grid_rates
from imgscale.pipeline.fitted import Shape
from imgscale.pipeline.reductions import RowStats, lazy_row_stats, row_stats

LAM_GRID = (0.01, 0.1, 1.0, 10.0, 100.0, 1000.0, 10000.0)


def check_eigenvalues(eigenvalues: Any, n_features: int) -> np.ndarray:
    """Σ's diagonal as float64 (n_features,), all positive; None means Σ = I."""
    if eigenvalues is None:
        return np.ones(n_features)
    sigma = np.asarray(eigenvalues, dtype=np.float64).ravel()
    if sigma.shape != (n_features,):
        raise ValueError(f"{sigma.shape[0]} eigenvalues for {n_features} embedding columns")
    if not (np.isfinite(sigma).all() and (sigma > 0).all()):
        raise ValueError("eigenvalues must be finite and positive (the constant one excluded)")
    return sigma


class SemiSupervisedEigenSolver(RowStatsMixin, LinearClassifierMixin, BaseEstimator):
    """Paper 001 eq. 3, (Σ + UᵀΛU)α = UᵀΛY, for all C classes (one-vs-rest) in one solve.

    U holds the rows' approximate Laplacian eigenvectors (the embedding), Σ their eigenvalues,
    Λ = λ on labelled rows and 0 on unlabelled ones (label -1), Y the one-hot labels; the score of
    a row u is uᵀα (+ an intercept). Fitting is one pass over the rows accumulating UᵀΛU and UᵀΛY
    (`pipeline.reductions.row_stats`: Gram and class sums of the labelled rows, and the row count
    n), then one symmetric eigendecomposition of Σ^{-1/2}UᵀΛ₁UΣ^{-1/2} that solves every λ of
    the grid.

    Scale: Fergus et al. use approximate eigenvectors of unit length over the n rows; our
    embedding gives each column unit mean square per row so that a row's embedding never depends
    on the others. With U₁ = U/√n, eq. 3 becomes (Σ + (λ/n)UᵀΛ₁U)β = (λ/n)UᵀΛ₁Y with f = Uβ,
    which is what is solved (n counts labelled and unlabelled rows).

    Parameters
    ----------
    lam : float or None, default=100
        λ (paper 001 §3: 100). None chooses it from `lam_grid` by the mean per-class rate on
        validation rows passed to `fit`.
    lam_grid : tuple of float, default=(0.01, 0.1, 1, 10, 100, 1000, 10000)
    fit_intercept : bool, default=True
        Add the constant eigenvector (σ = 0, so unpenalised): an intercept per class, i.e. U and
        Y centred on the labelled rows. False solves eq. 3 exactly as written.

    Attributes
    ----------
    classes_ : ndarray of shape (C,)
    coef_ : ndarray of shape (C, d), float32
        αᵀ (β in the scale above).
    intercept_ : ndarray of shape (C,), float32
    eigenvalues_ : ndarray of shape (d,)
        Σ used (ones if `fit` got no eigenvalues).
    lam_ : float
    lam_scores_ : ndarray of shape (R,)
        Validation mean per-class rate per grid value (empty unless λ was validated).
    n_rows_, feature_sum_, gram_, class_sums_, class_counts_ :
        Sufficient statistics that `partial_fit` adds to (`gram_` over labelled rows).
    n_features_in_ : int

    References
    ----------
    Mantziou, Papadopoulos & Kompatsiaris, ACM MM 2013, eq. 3. Fergus, Weiss & Torralba,
    "Semi-supervised learning in gigantic image collections", NIPS 2009, §3.
    """

    _fitted_shapes: ClassVar[dict[str, Shape]] = {
        **{k: v for k, v in RidgeClassifier._fitted_shapes.items() if k != "mean_"},
        "eigenvalues_": ("D",),
    }

    def __init__(
        self, lam: float | None = 100.0, lam_grid: tuple = LAM_GRID, fit_intercept: bool = True
    ):
        self.lam = lam
        self.lam_grid = lam_grid
        self.fit_intercept = fit_intercept

    def fit(
        self,
        X: Any,
        y: Any,
        eigenvalues: Any = None,
        X_val: Any = None,
        y_val: Any = None,
    ) -> SemiSupervisedEigenSolver:
        """One pass over (X, y), plus one over (X_val, y_val) if λ is validated on them."""
        grid = self._checked_grid()
        if (X_val is None) != (y_val is None):
            raise ValueError("pass both X_val and y_val, or neither")
        if self.lam is None and X_val is None:
            raise ValueError("lam=None selects λ on validation rows: pass X_val and y_val")
        X, y = self._check_fit_input(X, y, reset=True)
        sigma = check_eigenvalues(eigenvalues, self.n_features_in_)
        classes = unique_labels(y)
        if len(classes) == 0:
            raise ValueError("y has no labelled rows (every label is -1)")
        stats = row_stats(X, encode_labels_lazy(y, classes), len(classes), gram=True)
        validation = None if X_val is None else (self._check_rows(X_val), y_val)
        self._solve(stats, classes, sigma, grid, validation)
        return self

    def partial_fit(
        self, X: Any, y: Any, eigenvalues: Any = None, classes: Any = None
    ) -> SemiSupervisedEigenSolver:
        """Add rows (labelled or not; new classes are appended) and re-solve with λ = `lam_`."""
        self._checked_grid()
        first = not hasattr(self, "classes_")
        X, y = self._check_fit_input(X, y, reset=first)
        if first:
            sigma = check_eigenvalues(eigenvalues, self.n_features_in_)
        elif eigenvalues is None:
            sigma = self.eigenvalues_
        else:
            sigma = check_eigenvalues(eigenvalues, self.n_features_in_)
        all_classes = grown_classes(None if first else np.asarray(self.classes_), y, classes)
        if len(all_classes) == 0:
            raise ValueError("y has no labelled rows (every label is -1)")
        stats = row_stats(X, encode_labels_lazy(y, all_classes), len(all_classes), gram=True)
        if not first:
            stats = self._row_stats() + stats
        if self.lam is None and first:
            raise ValueError("lam=None selects λ on validation rows: use fit with X_val, y_val")
        lam = float(self.lam) if self.lam is not None else float(self.lam_)
        self._solve(stats, all_classes, sigma, np.array([lam]), None)
        return self

    def update(
        self,
        added: tuple[Any, Any],
        removed: tuple[Any, Any],
        X_val: Any = None,
        y_val: Any = None,
    ) -> np.ndarray:
        """Bring the fit up to date with embedded rows added and removed, each a (U, y) pair,
        in one pass over them only; returns the classes left with no rows (removed).

        UᵀΛU, UᵀΛY and the row count n are updated and eq. 3 solved again with the kept
        eigenvalues Σ (the eigenfunctions are not refitted); λ is chosen again on (X_val,
        y_val) when `lam` is None, as `fit` chooses it. The result is `fit` on the rows as they
        now are with the same eigenvalues, to float64 rounding of the statistics.
        """
        check_is_fitted(self)
        grid = self._checked_grid()
        if (X_val is None) != (y_val is None):
            raise ValueError("pass both X_val and y_val, or neither")
        if self.lam is None and X_val is None:
            raise ValueError("lam=None selects λ on validation rows: pass X_val and y_val")

        def stats_of(X: Any, y_index: Any, n_classes: int) -> RowStats:
            return lazy_row_stats(self._check_rows(X), y_index, n_classes, gram=True)

        stats, classes, dropped = changed_stats(
            self._row_stats(), np.asarray(self.classes_), stats_of, added, removed
        )
        if len(classes) == 0:
            raise ValueError("no labelled rows are left: the model would have no classes")
        validation = None if X_val is None else (self._check_rows(X_val), y_val)
        self._solve(stats, classes, self.eigenvalues_, grid, validation)
        return dropped

    def _checked_grid(self) -> np.ndarray:
        return checked_grid(self.lam_grid, self.lam, "lam")

    def _weights(
        self, stats: RowStats, sigma: np.ndarray, lams: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(d, R·C) coefficients and (R·C,) intercepts for every λ, from one eigendecomposition."""
        gram, targets = stats.gram, stats.class_sums.T
        n_labelled, counts = stats.n_labelled, stats.class_counts.astype(np.float64)
        if self.fit_intercept:
            # The unpenalised constant column: centre U and Y on the labelled rows.
            mean_l = stats.labelled_sum / n_labelled
            gram = gram - n_labelled * np.outer(mean_l, mean_l)
            targets = targets - np.outer(mean_l, counts)
        scale = 1 / np.sqrt(sigma)
        mu, V = scipy.linalg.eigh(gram * scale[:, None] * scale[None, :])
        mu = mu.clip(min=0.0)  # a Gram matrix: negative values are rounding
        z = V.T @ (targets * scale[:, None])
        # (Σ + cG)⁻¹cB = Σ^{-1/2} V diag(c / (1 + cμ)) Vᵀ Σ^{-1/2} B with c = λ/n.
        weights = np.hstack(
            [scale[:, None] * (V @ (z * (c / (1 + c * mu))[:, None])) for c in lams / stats.n_rows]
        )
        if self.fit_intercept:
            intercepts = np.tile(counts / n_labelled, len(lams)) - mean_l @ weights
        else:
            intercepts = np.zeros(weights.shape[1])
        return weights, intercepts

    def _solve(
        self,
        stats: RowStats,
        classes: np.ndarray,
        sigma: np.ndarray,
        grid: np.ndarray,
        validation: tuple | None,
    ) -> None:
        empty = classes[stats.class_counts == 0]
        if len(empty):
            raise ValueError(f"classes {empty[:10].tolist()} have no labelled rows")
        n_classes = len(classes)
        lams = grid if self.lam is None else np.array([float(self.lam)])
        weights, intercepts = self._weights(stats, sigma, lams)
        scores = np.empty(0)
        best = 0
        if validation is not None and self.lam is None:
            scores = grid_rates(weights, intercepts, classes, *validation)
            best = int(np.argmax(scores))
        columns = slice(best * n_classes, (best + 1) * n_classes)
        self.classes_ = classes
        self.coef_ = np.ascontiguousarray(weights[:, columns].T, dtype=np.float32)
        self.intercept_ = intercepts[columns].astype(np.float32)
        self.eigenvalues_ = sigma
        self.lam_ = float(lams[best])
        self.lam_scores_ = np.asarray(scores, dtype=np.float64)
        for name, value in row_stats_attributes(stats).items():
            setattr(self, name, value)


class EigenvalueRidgeClassifier(RidgeClassifier):
    """Paper 000's PCALap regression: ridge regularised by the eigenvalue diagonal, not ρI.

    W = (ŨᵀŨ + ρΣ)⁻¹ŨᵀY with Ũ the labelled rows centred on the mean of all rows (as
    `RidgeClassifier`). Substituting U′ = UΣ^{-1/2} turns it into ordinary ridge on U′, so the
    whole of `RidgeClassifier` (one pass, one eigendecomposition, ρ by validation or GCV) is
    reused; `coef_` and `mean_` are mapped back to U's coordinates.

    Parameters
    ----------
    rho, rho_grid : see `RidgeClassifier`.

    Attributes
    ----------
    eigenvalues_ : ndarray of shape (d,)
        Σ (ones if `fit` got none).
    Others as `RidgeClassifier`; the sufficient statistics are those of U′.

    References
    ----------
    Gong & Lazebnik, CVPR 2011, §4.1 ("regularize the solution by a diagonal matrix of
    eigenvalues instead of a scalar multiple of the identity").
    """

    _fitted_shapes: ClassVar[dict[str, Shape]] = {
        **RidgeClassifier._fitted_shapes,
        "eigenvalues_": ("D",),
    }

    def fit(
        self, X: Any, y: Any, eigenvalues: Any = None, X_val: Any = None, y_val: Any = None
    ) -> EigenvalueRidgeClassifier:
        """`RidgeClassifier.fit` on UΣ^{-1/2} (and X_val likewise); Σ = I without eigenvalues."""
        sigma = None if eigenvalues is None else check_eigenvalues(eigenvalues, np.shape(X)[1])
        X_val = None if X_val is None else _scaled(X_val, sigma)
        super().fit(_scaled(X, sigma), y, X_val=X_val, y_val=y_val)
        self._to_original_coordinates(sigma)
        return self

    def partial_fit(
        self, X: Any, y: Any, classes: Any = None, eigenvalues: Any = None
    ) -> EigenvalueRidgeClassifier:
        """Add rows with the Σ of the first call (or `eigenvalues` on the first call)."""
        if hasattr(self, "eigenvalues_"):
            sigma = self.eigenvalues_
        elif eigenvalues is not None:
            sigma = check_eigenvalues(eigenvalues, np.shape(X)[1])
        else:
            sigma = None
        if sigma is not None and np.ndim(X) == 2 and np.shape(X)[1] != len(sigma):
            sigma = None  # unscaled, so RidgeClassifier's input check names the mismatch
        super().partial_fit(_scaled(X, sigma), y, classes=classes)
        self._to_original_coordinates(sigma)
        return self

    def _to_original_coordinates(self, sigma: np.ndarray | None) -> None:
        if sigma is None:
            self.eigenvalues_ = np.ones(self.n_features_in_)
            return
        scale = 1 / np.sqrt(sigma)
        # u′ᵀw′ = uᵀ(Σ^{-1/2}w′): coefficients scale; the mean maps back by Σ^{1/2}.
        self.coef_ = np.ascontiguousarray(self.coef_ * scale[None, :].astype(np.float32))
        self.mean_ = self.mean_ / scale
        self.eigenvalues_ = sigma


def _scaled(X: Any, sigma: np.ndarray | None) -> Any:
    """X Σ^{-1/2}, lazily for dask; X untouched when Σ = I (None)."""
    if sigma is None:
        return X
    scale = (1 / np.sqrt(sigma)).astype(np.float32)
    if isinstance(X, da.Array):
        return X * scale
    return np.asarray(X, dtype=np.float32) * scale
