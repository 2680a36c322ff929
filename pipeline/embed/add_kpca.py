"""Additive kernel PCA, AddKPCA (paper 000 §3.2.1, §4.1; after Perronnin et al.)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator

from imgscale.pipeline.embed._base import RowTransformerMixin, check_non_negative_block
from imgscale.pipeline.fitted import Shape
from imgscale.pipeline.params import Interval
from imgscale.pipeline.rows import sample_rows

# Eigenvalues below this fraction of the largest (over all dimensions) are numerically zero.
_RELATIVE_EIGENVALUE_FLOOR = 1e-10


class AddKPCA(RowTransformerMixin, BaseEstimator):
    """φ(x)ᵀφ(y) ≈ Σⱼ min(xⱼ, yⱼ): kernel PCA of the intersection kernel along each dimension.

    For each input dimension j, the 1-D kernel matrix Kʲ = [min(lᵢⱼ, lₖⱼ)] on m landmark values
    is eigendecomposed (uncentred: the goal is an explicit map whose dot products approximate the
    additive kernel; ridge centres afterwards). Over all dimensions, the d eigenpairs (λ, u) with
    the largest λ are kept, and a row is embedded by Nyström interpolation along each dimension
    separately: φ_(j,c)(x) = Σᵢ min(xⱼ, lᵢⱼ) uᵢ / √λ, which equals √λ uᵢ at a landmark (its
    kernel PCA projection). The same m sampled rows supply the landmark values of every dimension.

    Parameters
    ----------
    n_components : int or None, default=None
        d; None keeps two per input dimension on average (paper 000 §4.1: 800 for 400-D BoW).
    n_landmarks : int, default=128
        m, rows sampled for landmark values (paper 000 §4.1: 128 per dimension).
    random_state : int, RandomState instance or None, default=None

    Attributes
    ----------
    landmarks_ : ndarray of shape (m, n_features_in_), float32
    component_dims_ : ndarray of shape (n_components_,), int64
        Input dimension of each output coordinate (sorted, so a dimension's outputs are adjacent).
    component_vectors_ : ndarray of shape (m, n_components_), float32
        u/√λ of each kept eigenpair: output = min(x_dim, landmark values) @ this column.
    eigenvalues_ : ndarray of shape (n_components_,)
        λ of each kept eigenpair.
    n_components_ : int
    n_features_in_ : int

    References
    ----------
    Perronnin, Sánchez & Liu, "Large-scale image categorization with explicit data embedding",
    CVPR 2010. Gong & Lazebnik, CVPR 2011, §3.2.1 and §4.1.
    """

    # The fitted arrays and their shapes (`pipeline.fitted`): L landmarks, K components.
    _fitted_shapes: ClassVar[dict[str, Shape]] = {
        "landmarks_": ("L", "D"),
        "component_vectors_": ("L", "K"),
        "component_dims_": ("K",),
        "eigenvalues_": ("K",),
    }

    # What each parameter may be (`pipeline.params`), checked when fit reads its rows.
    _parameter_rules: ClassVar[dict[str, tuple]] = {
        "n_components": (Interval(int, 1, None), None),
        "n_landmarks": (Interval(int, 1, None),),
    }

    def __init__(self, n_components: int | None = None, n_landmarks: int = 128, random_state=None):
        self.n_components = n_components
        self.n_landmarks = n_landmarks
        self.random_state = random_state

    def fit(self, X: Any, y: Any = None) -> AddKPCA:
        """Sample the landmark rows, then one small eigendecomposition per dimension."""
        X = self._check_rows(X, reset=True)
        landmarks = sample_rows(X, self.n_landmarks, self.random_state)
        check_non_negative_block(landmarks, 0, "AddKPCA")
        self._fit_landmarks(landmarks)
        return self

    def _fit_landmarks(self, landmarks: np.ndarray) -> None:
        m, n_features = landmarks.shape
        values, vectors, dims = [], [], []
        for j in range(n_features):
            column = landmarks[:, j].astype(np.float64)
            lam, U = np.linalg.eigh(np.minimum(column[:, None], column[None, :]))
            values.append(lam)
            vectors.append(U)
            dims.append(np.full(m, j))
        values, dims = np.concatenate(values), np.concatenate(dims)
        wanted = 2 * n_features if self.n_components is None else int(self.n_components)
        if wanted < 1:
            raise ValueError(f"n_components must be positive, got {self.n_components}")
        usable = values > _RELATIVE_EIGENVALUE_FLOOR * max(values.max(), 0)
        order = np.argsort(-np.where(usable, values, -np.inf), kind="stable")
        keep = order[: min(wanted, int(usable.sum()))]
        if len(keep) == 0:
            raise ValueError("every landmark value is 0: the intersection kernel is 0")
        keep = keep[np.lexsort((-values[keep], dims[keep]))]
        columns = np.stack([vectors[dims[k]][:, k % m] for k in keep], axis=1)
        self.landmarks_ = landmarks
        self.component_dims_ = dims[keep].astype(np.int64)
        self.eigenvalues_ = values[keep]
        self.component_vectors_ = (columns / np.sqrt(values[keep])).astype(np.float32)
        self.n_components_ = len(keep)

    def _transform_params(self) -> tuple:
        return self.landmarks_, self.component_dims_, self.component_vectors_

    @staticmethod
    def _transform_block(
        X: np.ndarray,
        landmarks: np.ndarray,
        component_dims: np.ndarray,
        component_vectors: np.ndarray,
        row_start: int = 0,
    ) -> np.ndarray:
        check_non_negative_block(X, row_start, "AddKPCA")
        out = np.empty((len(X), len(component_dims)), dtype=np.float32)
        # component_dims is sorted: each dimension's outputs are one contiguous run of columns.
        dims, starts = np.unique(component_dims, return_index=True)
        stops = [*starts[1:], len(component_dims)]
        for j, start, stop in zip(dims, starts, stops, strict=True):
            K = np.minimum(X[:, j, None], landmarks[None, :, j])
            np.matmul(K, component_vectors[:, start:stop], out=out[:, start:stop])
        return out

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.positive_only = True
        return tags
