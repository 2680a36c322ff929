"""Ridge regression classifier with centering and a regularisation grid (paper 000 §3.3, §4.1)."""

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
    encode_labels,
    encode_labels_lazy,
    grown_classes,
    unique_labels,
)
from imgscale.pipeline.classify._row_stats import (
    RowStatsMixin,
    apply_change,
    computed,
    row_change,
    row_stats_attributes,
)
from imgscale.pipeline.classify.ridge_dual import (
    centred_kernel,
    dual_eigensystem,
    dual_gcv_scores,
    grid_coefficients,
    grid_errors,
    primal_weights,
)
from imgscale.pipeline.compute import compute
from imgscale.pipeline.fitted import Shape
from imgscale.pipeline.gram import GRAM_PRECISIONS
from imgscale.pipeline.reductions import RowStats, lazy_row_stats, reduce_rows, row_stats

RHO_GRID = (0.0002, 0.002, 0.02, 0.2, 2.0, 20.0, 200.0, 2000.0)

# The largest m × m solve, in bytes, that a fit may make: the Gram, its eigenvectors and the
# divide-and-conquer workspace (1 + 6m + 2m² doubles) come to about five m × m float64 arrays.
MAX_SOLVE_BYTES = 8 * 2**30
_SOLVE_ARRAYS = 5

# Validation rows are scored against all grid values in blocks of rows whose rows × (C·R) float32
# scores take about this much (at least _GRID_MIN_ROWS rows): blocks large enough that the GEMM,
# not the per-block bookkeeping, sets the time, small enough to stay in cache.
_GRID_SCORE_BYTES = 16 * 2**20
_GRID_MIN_ROWS = 256


def centred_system(stats: RowStats, mean: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """G = X̃ᵀX̃ and B = X̃ᵀY for labelled rows X̃ = X_l − μ, from uncentred sums (float64)."""
    s_l = stats.labelled_sum
    cross = np.outer(s_l, mean)
    gram = stats.gram - cross - cross.T + stats.n_labelled * np.outer(mean, mean)
    targets = stats.class_sums.T - np.outer(mean, stats.class_counts)
    return gram, targets


def ridge_stats(X: Any, y_index: Any, n_classes: int, gram_precision: str) -> RowStats:
    """RowStats with the Gram, of numpy or row-chunked dask `X`, in one pass."""
    return row_stats(X, y_index, n_classes, gram=True, gram_precision=gram_precision)


def gcv_scores(eigvals: np.ndarray, z: np.ndarray, n_labelled: int, grid: np.ndarray) -> np.ndarray:
    """Generalised cross-validation (RSS/n)/(1 − df/n)² per ρ, from one eigendecomposition.

    With G = V diag(λ) Vᵀ and Z = VᵀB: RSS(ρ) = tr(YᵀY) − Σᵢ ‖Zᵢ‖² (λᵢ + 2ρ)/(λᵢ + ρ)², where
    tr(YᵀY) = n for one-hot Y, and df(ρ) = Σᵢ λᵢ/(λᵢ + ρ).
    """
    z2 = (z**2).sum(axis=1)
    lam, rho = eigvals[None, :], grid[:, None]
    rss = n_labelled - (z2 * (lam + 2 * rho) / (lam + rho) ** 2).sum(axis=1)
    df = (lam / (lam + rho)).sum(axis=1)
    with np.errstate(divide="ignore"):
        return np.where(df < n_labelled, (rss / n_labelled) / (1 - df / n_labelled) ** 2, np.inf)


def validation_errors(
    eigvals: np.ndarray,
    eigvecs: np.ndarray,
    z: np.ndarray,
    mean: np.ndarray,
    grid: np.ndarray,
    classes: np.ndarray,
    validation: RowStats,
    validation_classes: np.ndarray,
) -> np.ndarray:
    """Mean squared error ‖(x − μ)ᵀW(ρ) − y‖² over the labelled validation rows, per ρ, from
    their statistics and the training eigendecomposition alone (no row is read).

    With G = V diag(λ) Vᵀ, Z = VᵀB, d(ρ) = 1/(λ + ρ) and W(ρ) = V diag(d) Z; G_v and B_v the
    validation rows' Gram and XᵀY, centred on the training mean μ:
    Σ‖x̃ᵀW − y‖² = d ᵀ(VᵀG_vV ∘ ZZᵀ) d − 2 dᵀ rowsum(Z ∘ VᵀB_v) + Σ‖y‖². A validation row of a
    class the model does not have targets zero in every class column.
    """
    n = validation.n_labelled
    cross = np.outer(validation.labelled_sum, mean)
    gram = validation.gram - cross - cross.T + n * np.outer(mean, mean)
    known = np.isin(validation_classes, classes)
    targets = np.zeros((len(mean), len(classes)))
    targets[:, encode_labels(validation_classes[known], classes)] = (
        validation.class_sums[known] - np.outer(validation.class_counts[known], mean)
    ).T
    quadratic = (eigvecs.T @ gram @ eigvecs) * (z @ z.T)
    linear = (z * (eigvecs.T @ targets)).sum(axis=1)
    d = 1.0 / (eigvals[None, :] + grid[:, None])
    labelled_known = validation.class_counts[known].sum()
    return (((d @ quadratic) * d).sum(axis=1) - 2 * d @ linear + labelled_known) / n


def grid_hits_chunk(
    X: np.ndarray,
    y_index: np.ndarray,
    weights: np.ndarray,
    intercepts: np.ndarray,
    n_classes: int,
    row_start: int = 0,
) -> np.ndarray:
    """(R + 1, C) counts: correct top-1 predictions per ρ and class, then rows per class."""
    n_rho = weights.shape[1] // n_classes
    hits = np.zeros((n_rho + 1, n_classes), dtype=np.int64)
    rows = max(_GRID_MIN_ROWS, _GRID_SCORE_BYTES // (4 * weights.shape[1]))
    for start in range(0, len(X), rows):
        y_block = y_index[start : start + rows]
        labelled = y_block >= 0
        y_block = y_block[labelled]
        block = X[start : start + rows]
        scores = (block if labelled.all() else block[labelled]) @ weights
        scores += intercepts
        predicted = scores.reshape(len(y_block), n_rho, n_classes).argmax(axis=2)
        correct = predicted == y_block[:, None]
        for r in range(n_rho):
            hits[r] += np.bincount(y_block[correct[:, r]], minlength=n_classes)
        hits[n_rho] += np.bincount(y_block, minlength=n_classes)
    return hits


class RidgeClassifier(RowStatsMixin, LinearClassifierMixin, BaseEstimator):
    """Ridge regression on one-hot targets, centred on the mean of all rows, without bias.

    W = (X̃ᵀX̃ + ρI)⁻¹ X̃ᵀY with X̃ the labelled rows minus the mean μ of all rows (labelled and
    unlabelled, label -1) and Y ∈ {0,1}^{l×C}; decision(x) = (x − μ)ᵀW. Fitting is one pass over
    the rows (Gram, sums, class sums) and one eigendecomposition of X̃ᵀX̃ that gives W for every ρ.

    Parameters
    ----------
    rho : float or None, default=None
        Regularisation ρ > 0. None selects it from `rho_grid`: by `rho_criterion` on the
        validation rows passed to `fit`, else by generalised cross-validation.
    rho_criterion : {"error", "rate"}, default="error"
        What ρ is chosen by on validation rows. "error": their squared error
        (`validation_errors`: the loss ridge minimises, held out), computed from their
        statistics, which the model keeps, so that `update` reads validation rows only when they
        change. "rate": their mean per-class rate (the measure paper 000 §4 reports), which
        needs the rows scored at every ρ, so that `update` reads every validation row again.
    rho_grid : tuple of float, default=(0.0002, 0.002, 0.02, 0.2, 2, 20, 200, 2000)
        Candidate values of ρ (paper 000 §4.1).
    gram_precision : {"float64", "float32"}, default="float64"
        Products of the Gram XᵀX (always summed in float64). "float32" runs at about twice the
        speed, within the relative error `pipeline.gram` states (float32 rounding): ample for
        classification, though not for ρ far below that error times the largest eigenvalue.
    solver : {"auto", "primal", "dual"}, default="auto"
        The system solved for the same W. "primal": the D × D Gram X̃ᵀX̃, from sums that
        `partial_fit` and `update` add rows to. "dual" (`ridge_dual`): the l × l Gram X̃X̃ᵀ of
        the l labelled rows, W = X̃ᵀ(X̃X̃ᵀ + ρI)⁻¹Y, for rows wider than they are many; it keeps
        no sums, so a dual fit cannot be updated, only fitted again. "auto": dual when l < D.
    max_solve_bytes : int, default=8 GiB
        The memory the chosen form's eigendecomposition may take (about 5·8·m² bytes for an
        m × m Gram); a fit whose form needs more is refused before any row is read.

    Attributes
    ----------
    classes_ : ndarray of shape (C,)
        Labels, sorted by `fit`; `partial_fit` appends classes it has not seen.
    coef_ : ndarray of shape (C, D), float32
        Wᵀ, so that decision = X coef_ᵀ + intercept_.
    intercept_ : ndarray of shape (C,), float32
        −coef_ @ mean_.
    mean_ : ndarray of shape (D,), float64
        Mean μ of all rows seen, labelled or not.
    rho_ : float
        The ρ used for `coef_`.
    rho_scores_ : ndarray of shape (R,)
        Per grid value: if `rho_selection_ == "validation"`, the validation mean squared error
        (lower is better) or mean per-class rate (higher is better), as `rho_criterion` says;
        else the GCV score (lower is better).
    rho_selection_ : str
        "fixed", "validation" or "gcv".
    solver_ : str
        "primal" or "dual", the form solved (absent in models saved before the dual form:
        primal).
    n_rows_, feature_sum_, gram_, class_sums_, class_counts_ :
        Sufficient statistics (`pipeline.reductions.RowStats`) that `partial_fit` adds to.
        Absent after a dual fit.
    validation_gram_, validation_class_sums_, validation_class_counts_, validation_classes_ :
        The same statistics of the validation rows (with `validation_n_rows_` and
        `validation_feature_sum_`), their classes indexed by their own labels,
        `validation_classes_`, when ρ was chosen on their squared error: what `update` adds to
        and subtracts from. Absent otherwise, and in models saved before they were kept.
    n_features_in_ : int

    References
    ----------
    Gong & Lazebnik, "Comparing data-dependent and data-independent embeddings for
    classification and ranking of Internet images", CVPR 2011, §3.3 and §4.1.
    """

    # The fitted arrays and their shapes (`pipeline.fitted`): C classes, D features.
    _fitted_shapes: ClassVar[dict[str, Shape]] = {
        "coef_": ("C", "D"),
        "intercept_": ("C",),
        "mean_": ("D",),
        "feature_sum_": ("D",),
        "gram_": ("D", "D"),
        "class_sums_": ("C", "D"),
        "class_counts_": ("C",),
        "validation_feature_sum_": ("D",),
        "validation_gram_": ("D", "D"),
        "validation_class_sums_": ("V", "D"),
        "validation_class_counts_": ("V",),
        "validation_classes_": ("V",),
    }

    RHO_CRITERIA = ("error", "rate")
    SOLVERS = ("auto", "primal", "dual")

    def __init__(
        self,
        rho: float | None = None,
        rho_grid: tuple = RHO_GRID,
        gram_precision: str = "float64",
        rho_criterion: str = "error",
        solver: str = "auto",
        max_solve_bytes: int = MAX_SOLVE_BYTES,
    ):
        self.rho = rho
        self.rho_grid = rho_grid
        self.gram_precision = gram_precision
        self.rho_criterion = rho_criterion
        self.solver = solver
        self.max_solve_bytes = max_solve_bytes

    def fit(self, X: Any, y: Any, X_val: Any = None, y_val: Any = None) -> RidgeClassifier:
        """One pass over (X, y), plus one over (X_val, y_val) when ρ is chosen on them (the
        dual form: three over X's labelled rows, for μ, the Gram and W)."""
        grid = self._checked_grid()
        if (X_val is None) != (y_val is None):
            raise ValueError("pass both X_val and y_val, or neither")
        X, y = self._check_fit_input(X, y, reset=True)
        classes = unique_labels(y)
        if len(classes) == 0:
            raise ValueError("y has no labelled rows (every label is -1)")
        y_index = encode_labels_lazy(y, classes)
        if self._form(y_index, X.shape[1]) == "dual":
            state = self._solve_dual(X, y_index, classes, grid, X_val, y_val)
            for name in (*_ROW_STATS_ATTRIBUTES, *_VALIDATION_ATTRIBUTES):
                if hasattr(self, name):
                    delattr(self, name)
            self._set_state(state)
            return self
        stats = ridge_stats(X, y_index, len(classes), self.gram_precision)
        validation = None
        if X_val is not None and self.rho is None:
            validation = self._validation(X_val, y_val)
        self._set_state(self._solve(stats, classes, grid, validation=validation))
        return self

    def partial_fit(self, X: Any, y: Any, classes: Any = None) -> RidgeClassifier:
        """Add rows (and classes never seen before, appended to `classes_`) and re-solve.

        ρ stays at `rho`, or at `rho_` if it was chosen on validation rows, else GCV picks it.
        Always the primal form (it keeps the sums rows are added to); a fit solved in the dual
        form is refused.
        """
        grid = self._checked_grid()
        first = not hasattr(self, "classes_")
        if not first:
            self._check_primal("partial_fit")
        X, y = self._check_fit_input(X, y, reset=first)
        self._check_fits("primal", X.shape[1])
        all_classes = grown_classes(None if first else np.asarray(self.classes_), y, classes)
        y_index = encode_labels_lazy(y, all_classes)
        stats = ridge_stats(X, y_index, len(all_classes), self.gram_precision)
        keep = None
        if not first:
            stats = self._row_stats() + stats
            if self.rho_selection_ == "validation":
                keep = (float(self.rho_), np.asarray(self.rho_scores_))
        self._set_state(self._solve(stats, all_classes, grid, keep=keep))
        return self

    def update(
        self,
        added: tuple[Any, Any],
        removed: tuple[Any, Any],
        validation_added: tuple[Any, Any] | None = None,
        validation_removed: tuple[Any, Any] | None = None,
    ) -> np.ndarray:
        """Bring the fit up to date with rows added and rows removed, each an (X, y) pair, in
        one pass over them only; returns the classes left with no rows (removed from the model).

        The Gram, XᵀY, row and class sums are updated, the centring becomes the mean of the rows
        as they now are, and ρ is chosen again as `fit` chooses it, unless `rho` is fixed: on
        the validation rows the model keeps the statistics of, plus ``validation_added`` and
        minus ``validation_removed`` (summed in the same pass as the training rows: one graph
        over every changed row), else by GCV; one eigendecomposition. A model without
        validation statistics (saved before they were kept, or choosing ρ by the per-class
        rate, which needs the rows) starts from none: pass all its validation rows as
        ``validation_added``. The result is the fit from scratch on the rows as they now are,
        to float64 rounding of the statistics. A fit solved in the dual form keeps no sums to
        add to: ValueError, naming it, and the model stays as it was.
        """
        check_is_fitted(self)
        self._check_primal("update")
        grid = self._checked_grid()
        classes = np.asarray(self.classes_)
        changes = [row_change(classes, self._lazy_stats_of, added, removed)]
        validation = kept = None
        if self.rho is None and self.rho_criterion == "rate":
            if validation_removed is not None:
                raise ValueError(
                    "rho_criterion='rate' keeps no validation statistics to remove rows from: "
                    "pass all validation rows as validation_added"
                )
            if validation_added is not None:
                validation = self._validation(*validation_added)
        elif self.rho is None:
            kept = self._kept_validation(validation_added is not None)
        if kept is not None:
            none = (np.empty((0, self.n_features_in_), np.float32), np.empty(0, np.int64))
            changes.append(
                row_change(
                    kept[1],
                    self._lazy_stats_of,
                    validation_added or none,
                    validation_removed or none,
                )
            )
        # One graph: the changed rows of both splits, added and removed, in one pass.
        change, *validation_change = computed(*changes)
        stats, classes, dropped = apply_change(self._row_stats(), classes, change)
        if len(classes) == 0:
            raise ValueError("no labelled rows are left: the model would have no classes")
        if kept is not None:
            validation = apply_change(*kept, *validation_change)[:2]
        state = self._solve(stats, classes, grid, validation=validation)
        for name in _VALIDATION_ATTRIBUTES:
            if name not in state and hasattr(self, name):
                delattr(self, name)
        self._set_state(state)
        return dropped

    def _stats_of(self, X: Any, y_index: Any, n_classes: int) -> RowStats:
        return ridge_stats(self._check_rows(X), y_index, n_classes, self.gram_precision)

    def _lazy_stats_of(self, X: Any, y_index: Any, n_classes: int) -> Any:
        return lazy_row_stats(
            self._check_rows(X), y_index, n_classes, gram=True, gram_precision=self.gram_precision
        )

    def _validation(self, X_val: Any, y_val: Any) -> tuple:
        """What `_solve` chooses ρ by, as `rho_criterion` says: (the statistics of (X_val,
        y_val), indexed by their own sorted labels, and those labels), or the rows themselves
        (checked) for the per-class rate."""
        if not isinstance(y_val, da.Array):
            y_val = np.asarray(y_val).ravel()
        if self.rho_criterion == "rate":
            return self._check_rows(X_val), y_val
        labels = unique_labels(y_val)
        if len(labels) == 0:
            raise ValueError("y_val has no labelled rows")
        return self._stats_of(X_val, encode_labels_lazy(y_val, labels), len(labels)), labels

    def _kept_validation(self, rows_added: bool) -> tuple[RowStats, np.ndarray] | None:
        """The validation statistics the model keeps and their labels, to add and subtract the
        changed validation rows to and from; none kept, zero statistics when rows are added
        (all the validation rows, for a model saved before they were kept), else None."""
        if hasattr(self, "validation_gram_"):
            kept = RowStats(
                n_rows=self.validation_n_rows_,
                feature_sum=self.validation_feature_sum_,
                class_sums=self.validation_class_sums_,
                class_counts=self.validation_class_counts_,
                gram=self.validation_gram_,
            )
            return kept, np.asarray(self.validation_classes_)
        if not rows_added:
            return None
        return RowStats.zeros(self.n_features_in_, 0, gram=True), np.asarray(self.classes_)[:0]

    def _checked_grid(self) -> np.ndarray:
        if self.gram_precision not in GRAM_PRECISIONS:
            raise ValueError(
                f"gram_precision must be one of {GRAM_PRECISIONS}, got {self.gram_precision!r}"
            )
        if self.rho_criterion not in self.RHO_CRITERIA:
            raise ValueError(
                f"rho_criterion must be one of {self.RHO_CRITERIA}, got {self.rho_criterion!r}"
            )
        if self.solver not in self.SOLVERS:
            raise ValueError(f"solver must be one of {self.SOLVERS}, got {self.solver!r}")
        return checked_grid(self.rho_grid, self.rho, "rho")

    def _form(self, y_index: Any, n_features: int) -> str:
        """ "primal" or "dual", as `solver` says (auto: dual when the labelled rows are fewer
        than the features), refused if it does not fit `max_solve_bytes`."""
        if isinstance(y_index, da.Array):
            y_index = compute(y_index)[0]
        n_labelled = int((np.asarray(y_index) >= 0).sum())
        form = self.solver
        if form == "auto":
            form = "dual" if n_labelled < n_features else "primal"
        self._check_fits(form, n_labelled if form == "dual" else n_features, n_labelled, n_features)
        return form

    def _check_fits(
        self, form: str, size: int, n_labelled: int | None = None, n_features: int | None = None
    ) -> None:
        needed = _SOLVE_ARRAYS * 8 * size**2
        if needed <= self.max_solve_bytes:
            return
        shape = (
            "" if n_labelled is None else f" ({n_labelled} labelled rows of {n_features} features)"
        )
        other = "" if n_labelled is None else ", and the other form's is no smaller"
        raise ValueError(
            f"ridge's {form} form needs a {size} × {size} solve{shape}, about "
            f"{needed / 2**30:.3g} GiB against max_solve_bytes of "
            f"{self.max_solve_bytes / 2**30:.3g} GiB{other if self.solver == 'auto' else ''}"
        )

    def _check_primal(self, what: str) -> None:
        if getattr(self, "solver_", "primal") == "dual":
            raise ValueError(
                f"this ridge model was solved in the dual form (fewer labelled rows than "
                f"features), which keeps no D × D sums to add rows to: {what} cannot follow "
                "its rows; fit it again on the rows as they are"
            )

    def _solve_dual(
        self,
        X: Any,
        y_index: Any,
        classes: np.ndarray,
        grid: np.ndarray,
        X_val: Any,
        y_val: Any,
    ) -> dict[str, Any]:
        """The state of the dual fit (`ridge_dual`), ρ chosen as `_solve` chooses it, from the
        validation rows scored at every ρ (the dual form keeps no D × D validation sums)."""
        if isinstance(y_index, da.Array):
            y_index = compute(y_index)[0]
        y_index = np.asarray(y_index)
        mean, gram, centred = centred_kernel(X, y_index, self.gram_precision)
        targets = np.eye(len(classes))[y_index[y_index >= 0]]
        eigvals, eigvecs, z = dual_eigensystem(gram, targets)
        gcv = dual_gcv_scores(eigvals, z, grid)
        n_classes = len(classes)
        if self.rho is not None or X_val is None:
            rho = float(self.rho) if self.rho is not None else float(grid[np.argmin(gcv)])
            how = "fixed" if self.rho is not None else "gcv"
            weights = primal_weights(centred, grid_coefficients(eigvals, eigvecs, z, [rho]))
            scores = gcv
        else:
            if not isinstance(y_val, da.Array):
                y_val = np.asarray(y_val).ravel()
            X_val = self._check_rows(X_val)
            every = primal_weights(centred, grid_coefficients(eigvals, eigvecs, z, grid))
            intercepts = -(mean @ every)
            if self.rho_criterion == "rate":
                scores = grid_rates(every, intercepts, classes, X_val, y_val)
                best = int(np.argmax(scores))
            else:
                scores = grid_errors(every, intercepts, classes, X_val, y_val)
                best = int(np.argmin(scores))
            rho, how = float(grid[best]), "validation"
            weights = every[:, best * n_classes : (best + 1) * n_classes]
        return _fitted_state(classes, mean, weights, rho, scores, how, "dual")

    def _solve(
        self,
        stats: RowStats,
        classes: np.ndarray,
        grid: np.ndarray,
        *,
        validation: tuple | None = None,
        keep: tuple | None = None,
    ) -> dict[str, Any]:
        empty = classes[stats.class_counts == 0]
        if len(empty):
            raise ValueError(f"classes {empty[:10].tolist()} have no labelled rows")
        mean = stats.feature_sum / stats.n_rows
        gram, targets = centred_system(stats, mean)
        # Divide and conquer (evd): every eigenvector is wanted, which is its best case.
        eigvals, eigvecs = scipy.linalg.eigh(gram, driver="evd")
        eigvals = eigvals.clip(min=0.0)  # G is PSD; negative values are rounding
        z = eigvecs.T @ targets
        kept_validation = {}
        if self.rho is not None:
            scores = gcv_scores(eigvals, z, stats.n_labelled, grid)
            rho, how = float(self.rho), "fixed"
        elif validation is not None and self.rho_criterion == "rate":
            scores = _validation_rates(eigvals, eigvecs, z, mean, grid, classes, *validation)
            rho, how = float(grid[np.argmax(scores)]), "validation"
        elif validation is not None and validation[0].n_labelled > 0:
            scores = validation_errors(eigvals, eigvecs, z, mean, grid, classes, *validation)
            rho, how = float(grid[np.argmin(scores)]), "validation"
            kept_validation = _validation_attributes(*validation)
        elif keep is not None:
            (rho, scores), how = keep, "validation"
        else:
            scores = gcv_scores(eigvals, z, stats.n_labelled, grid)
            rho, how = float(grid[np.argmin(scores)]), "gcv"
        weights = eigvecs @ (z / (eigvals + rho)[:, None])
        return {
            **_fitted_state(classes, mean, weights, rho, scores, how, "primal"),
            **row_stats_attributes(stats),
            **kept_validation,
        }

    def _set_state(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            setattr(self, name, value)


def _validation_rates(
    eigvals: np.ndarray,
    eigvecs: np.ndarray,
    z: np.ndarray,
    mean: np.ndarray,
    grid: np.ndarray,
    classes: np.ndarray,
    X_val: Any,
    y_val: Any,
) -> np.ndarray:
    """Mean per-class rate on the validation rows for every ρ, in one pass over them."""
    # All grid weights side by side, D × (R·C): one GEMM scores every ρ at once.
    weights = eigvecs @ np.hstack([z / (eigvals + rho)[:, None] for rho in grid])
    intercepts = -(mean @ weights)
    return grid_rates(weights, intercepts, classes, X_val, y_val)


def _fitted_state(
    classes: np.ndarray,
    mean: np.ndarray,
    weights: np.ndarray,
    rho: float,
    scores: Any,
    how: str,
    solver: str,
) -> dict[str, Any]:
    """The fitted attributes both forms set: W as float32 coefficients, the intercept that
    centres on ``mean``, and how ρ was chosen."""
    return {
        "classes_": classes,
        "mean_": mean,
        "coef_": np.ascontiguousarray(weights.T, dtype=np.float32),
        "intercept_": (-(mean @ weights)).astype(np.float32),
        "rho_": rho,
        "rho_scores_": np.asarray(scores, dtype=np.float64),
        "rho_selection_": how,
        "solver_": solver,
    }


def _validation_attributes(stats: RowStats, labels: np.ndarray) -> dict[str, Any]:
    """The validation statistics as the fitted attributes `RidgeClassifier` keeps them."""
    named = {f"validation_{name}": value for name, value in row_stats_attributes(stats).items()}
    return {**named, "validation_classes_": labels}


_ROW_STATS_ATTRIBUTES = ("n_rows_", "feature_sum_", "gram_", "class_sums_", "class_counts_")

_VALIDATION_ATTRIBUTES = (
    "validation_n_rows_",
    "validation_feature_sum_",
    "validation_gram_",
    "validation_class_sums_",
    "validation_class_counts_",
    "validation_classes_",
)


def grid_rates(
    weights: np.ndarray, intercepts: np.ndarray, classes: np.ndarray, X_val: Any, y_val: Any
) -> np.ndarray:
    """Mean per-class rate on the validation rows for every grid value, in one pass.

    `weights` (D, R·C) and `intercepts` (R·C,) hold the C class columns of each of the R grid
    values side by side, so that one GEMM per block scores every grid value.
    """
    if not isinstance(y_val, da.Array):
        y_val = np.asarray(y_val).ravel()
    hits = reduce_rows(
        grid_hits_chunk,
        [X_val, encode_labels_lazy(y_val, classes)],
        weights.astype(np.float32),
        intercepts.astype(np.float32),
        len(classes),
    )
    hits = compute(hits)[0]
    totals = hits[-1]
    present = totals > 0
    if not present.any():
        raise ValueError("y_val has no labelled rows")
    return (hits[:-1, present] / totals[present]).mean(axis=1)
