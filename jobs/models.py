"""Save and load fitted estimators (or pipelines of them) without pickle, via
``storage.saved_models``.

Only classes named in :data:`MODEL_CLASSES` can be loaded: a model file picks a class from this
allow-list by name and supplies its JSON parameters and numeric arrays, nothing else, whose
shapes must agree with its parameters (the fitted arrays the class declares, `pipeline.fitted`).
The class must accept every parameter by name, and every fitted attribute must be a fitted
attribute's name (``name_``) that the class does not define, so a record naming another class,
or an edited one, is refused in one line instead of failing inside a constructor or setting a
method. The allow-list is every class the method and embedding tables of `jobs.methods` name; a
class is imported only once a model file names it.
"""

from __future__ import annotations

import datetime as dt
import os
from importlib.metadata import version

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.pipeline import Pipeline, make_pipeline

from imgscale.jobs.feature_records import described_by, same_features
from imgscale.jobs.methods import estimator_class, model_classes
from imgscale.pipeline.fitted import check_fitted_shapes, fitted_shapes
from imgscale.storage import FeatureStore, SavedStep, StoreError, load_model, save_model

# Class name → "module:Class" (`jobs.methods.estimator_class` imports it).
MODEL_CLASSES: dict[str, str] = {ref.split(":")[1]: ref for ref in model_classes()}


def model_steps(model: BaseEstimator) -> list[BaseEstimator]:
    """The estimators of a model in order: a pipeline's steps, or the model itself."""
    return [step for _, step in model.steps] if isinstance(model, Pipeline) else [model]


class ClassifierPipeline(Pipeline):
    """A Pipeline (embeddings, then a classifier) that also offers the classifier's top-k.

    sklearn's Pipeline already exposes ``classes_``, ``predict`` and ``decision_function`` of
    its last step; ``jobs.evaluate`` and ``jobs.predict`` also call ``predict_top_k``. Each
    embedding's ``transform`` is lazy on dask input, so rows are embedded chunk by chunk on the
    fly, never stored.
    """

    def predict_top_k(self, X, k: int = 5):
        for _, _, step in self._iter(with_final=False):
            X = step.transform(X)
        return self.steps[-1][1].predict_top_k(X, k=k)


def classifier_pipeline(*estimators: BaseEstimator) -> ClassifierPipeline:
    """``make_pipeline`` (same step names) returning a :class:`ClassifierPipeline`."""
    return ClassifierPipeline(make_pipeline(*estimators).steps)


def save(
    model: BaseEstimator, path: str | os.PathLike, *, replace: bool = False, **provenance
) -> None:
    """Save a fitted estimator or pipeline with provenance (store, rows, time, version).

    With ``replace``, an existing model at ``path`` is swapped for this one atomically.
    """
    steps = [_to_step(estimator) for estimator in model_steps(model)]
    provenance = {
        "imgscale_version": version("imgscale"),
        "saved_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        **provenance,
    }
    save_model(path, steps, provenance, replace=replace)


def store_provenance(store: FeatureStore) -> dict:
    """What a model records of the store it is trained on: the store's creation stamp and its
    live batches (id, content digest and rows forgotten so far), so `store_changes` can tell
    later which of them the store no longer holds as they were and `imgscale update` which rows
    it gained and lost (`storage.changes`), and what described its rows (None for vectors), so
    `check_store_features` can refuse a store described otherwise."""
    return {
        "store_created": store.created,
        "store_batches": [[b["batch_id"], b["digest"], b["forgotten"]] for b in store.batches()],
        "store_descriptor": store.descriptor,
    }


def store_changes(provenance: dict, store: FeatureStore, path: str | os.PathLike) -> str | None:
    """One line naming the batches of ``store`` that the model at ``path`` was trained with and
    that it no longer holds as they were (removed, or ingested again with other rows), or None.

    A warning, not a refusal: the model is still the model it was, and scoring it on the store
    as it is now is a fair question (how does the model that learned from a mislabelled batch
    do without it?), but its rows no longer are the rows it learned from, so it is said each
    time. Batches added since are not named: a store that grows is scored by the same model
    every scheduled run. A model trained on another store, or saved without the record (before
    models recorded it, or from Python), is not compared.
    """
    recorded = provenance.get("store_batches")
    if recorded is None or provenance.get("store_created") != store.created:
        return None
    now = {b["batch_id"]: b["digest"] for b in store.batches()}
    removed = [batch for batch, *_ in recorded if batch not in now]
    changed = [batch for batch, digest, *_ in recorded if batch in now and now[batch] != digest]
    if not removed and not changed:
        return None
    what = []
    if removed:
        what.append(f"removed since: {_names(removed)}")
    if changed:
        what.append(f"ingested again with other rows since: {_names(changed)}")
    return (
        f"model {path} was trained when store {store.path} held batches it no longer holds as "
        f"they were ({'; '.join(what)}); train it again to learn from the store as it is"
    )


def check_store_features(provenance: dict, store: FeatureStore, path: str | os.PathLike) -> None:
    """Refuse to apply the model at ``path`` to a store of images described otherwise than the
    rows it learned from (another vocabulary, descriptor or parameters): its scores would be
    numbers about nothing. A store of vectors on either side, or a model saved before models
    recorded the descriptor, cannot be compared and is not."""
    trained, now = provenance.get("store_descriptor"), store.descriptor
    if not (trained and now):
        return
    if not same_features(trained, now):
        raise StoreError(
            f"model {path} learned from rows described by {described_by(trained)}; store "
            f"{store.path} holds rows described by {described_by(now)}: use a store of the "
            "same features, or train a model on this one"
        )


def _names(batches: list[str]) -> str:
    more = f" and {len(batches) - 5} more" if len(batches) > 5 else ""
    return ", ".join(map(repr, batches[:5])) + more


def load(path: str | os.PathLike) -> tuple[BaseEstimator, dict]:
    """Load a model saved by :func:`save`; returns the estimator (or pipeline) and provenance."""
    steps, provenance = load_model(path)
    estimators = [_from_step(i, step, path) for i, step in enumerate(steps)]
    model = estimators[0] if len(estimators) == 1 else classifier_pipeline(*estimators)
    return model, provenance


def _to_step(estimator: BaseEstimator) -> SavedStep:
    kind = type(estimator).__name__
    if kind not in MODEL_CLASSES or estimator_class(MODEL_CLASSES[kind]) is not type(estimator):
        raise TypeError(f"cannot save {kind}: not one of {sorted(MODEL_CLASSES)}")
    arrays, scalars = {}, {}
    for name, value in vars(estimator).items():
        if not _is_fitted_name(name):
            continue
        if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
            arrays[name] = value
        else:
            scalars[name] = value
    return SavedStep(kind, estimator.get_params(deep=False), arrays, scalars)


def _from_step(index: int, step: SavedStep, path) -> BaseEstimator:
    if step.kind not in MODEL_CLASSES:
        raise StoreError(
            f"model {path}: unknown estimator {step.kind!r}; expected one of "
            f"{sorted(MODEL_CLASSES)}"
        )
    cls = estimator_class(MODEL_CLASSES[step.kind])
    accepted = cls._get_param_names()
    unknown = sorted(set(step.params) - set(accepted))
    if unknown:
        raise StoreError(
            f"model {path}: step {index} ({step.kind}) has parameters {unknown} that {step.kind} "
            f"does not take; expected some of {accepted}"
        )
    for name in [*step.scalars, *step.arrays]:
        if not _is_fitted_name(name) or hasattr(cls, name):
            raise StoreError(
                f"model {path}: step {index} ({step.kind}) has fitted value {name!r}; expected "
                f"names ending in '_' that {step.kind} does not define"
            )
    try:
        check_fitted_shapes(
            step.kind, fitted_shapes(cls) or {}, step.params, step.scalars, step.arrays
        )
    except ValueError as exc:
        raise StoreError(f"model {path}: {exc}") from None
    estimator = cls(**step.params)
    for name, value in {**step.scalars, **step.arrays}.items():
        setattr(estimator, name, value)
    return estimator


def _is_fitted_name(name: str) -> bool:
    """``name_``, the form :func:`_to_step` saves: an identifier ending in one underscore."""
    return name.isidentifier() and name.endswith("_") and not name.startswith("_")
