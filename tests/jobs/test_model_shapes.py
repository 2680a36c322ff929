"""A saved model whose arrays disagree with its parameters is refused on load, in one line
naming the model, the array and the expected shape; every fitted model of every family loads."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from imgscale.jobs import models
from imgscale.jobs.methods import estimator_class
from imgscale.jobs.train import make_embedding
from imgscale.pipeline import classify, embed
from imgscale.pipeline.fitted import fitted_shapes
from imgscale.storage import StoreError

RNG = np.random.default_rng(0)
Y = RNG.integers(0, 4, 300)
X = (RNG.standard_normal((300, 16)) + Y[:, None]).astype(np.float32)
X_POSITIVE = np.abs(X)


def _eigen_features() -> tuple[np.ndarray, np.ndarray]:
    pcalap = embed.PCALap(n_components=8).fit(X)
    return pcalap.transform(X), pcalap.eigenvalues_


def _ssl():
    Z, eigenvalues = _eigen_features()
    return classify.SemiSupervisedEigenSolver(lam=1.0).fit(Z, Y, eigenvalues)


def _eigenvalue_ridge():
    Z, eigenvalues = _eigen_features()
    return classify.EigenvalueRidgeClassifier().fit(Z, Y, eigenvalues)


def _embedding(name: str, **params) -> Callable:
    return lambda: make_embedding(name, **params).fit(X_POSITIVE)


# family → (fit a small model, the array to damage: its last axis loses one entry)
FAMILIES: dict[str, tuple[Callable, str]] = {
    "ridge": (lambda: classify.RidgeClassifier(rho=1.0).fit(X, Y), "coef_"),
    "eigenvalue-ridge": (_eigenvalue_ridge, "coef_"),
    "ssl": (_ssl, "coef_"),
    "ncm": (lambda: classify.NearestClassMean().fit(X, Y), "means_"),
    "ncm-metric": (
        lambda: classify.MetricNearestClassMean(n_components=8, max_iter=20).fit(X, Y),
        "projected_means_",
    ),
    "knn": (
        lambda: classify.MetricKNeighborsClassifier(n_components=8, max_iter=20).fit(X, Y),
        "components_",
    ),
    "local": (
        lambda: classify.PredictedNeighbourhoodClassifier(
            n_neighbourhoods=20, sizes=(10, 20), n_samples=2, random_state=0
        ).fit(X, Y),
        "training_rows_",
    ),
    "hope": (
        lambda: classify.ExemplarHOPE(
            n_exemplars=8, n_factors=10, n_hidden=6, max_iter=5, random_state=0
        ).fit(X, Y),
        "output_weights_",
    ),
    "rff": (_embedding("rff", n_components=8), "random_weights_"),
    "hike": (_embedding("hike"), "max_"),
    "nystrom": (_embedding("nystrom", n_components=8), "projection_"),
    "addkpca": (_embedding("addkpca", n_components=8), "component_vectors_"),
    "pca": (_embedding("pca", n_components=8), "components_"),
    "random-projection": (_embedding("random-projection", n_components=8), "components_"),
    "pcalap": (_embedding("pcalap", n_components=8), "eigenfunctions_"),
    "rplap": (_embedding("rplap", n_components=8), "eigenfunctions_"),
    "ale": (_embedding("ale", n_components=8), "eigenfunctions_"),
}


def test_every_loadable_class_has_its_shapes():
    undeclared = [
        kind
        for kind, reference in models.MODEL_CLASSES.items()
        if fitted_shapes(estimator_class(reference)) is None
    ]
    assert undeclared == []


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_fitted_model_loads_and_a_mismatched_array_is_refused(family, tmp_path):
    fit, damaged = FAMILIES[family]
    estimator = fit()
    models.save(estimator, tmp_path / "good.model")
    loaded, _ = models.load(tmp_path / "good.model")
    np.testing.assert_array_equal(getattr(loaded, damaged), getattr(estimator, damaged))

    good = getattr(estimator, damaged)
    setattr(estimator, damaged, good[..., :-1])
    models.save(estimator, tmp_path / "bad.model")
    with pytest.raises(StoreError) as refused:
        models.load(tmp_path / "bad.model")
    message = str(refused.value)
    kind = type(estimator).__name__
    assert "\n" not in message
    assert message.startswith(
        f"model {tmp_path / 'bad.model'}: {kind} array {damaged!r} has shape "
        f"{good[..., :-1].shape}; expected {good.shape}"
    ), message
