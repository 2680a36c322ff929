"""The table of training methods and embeddings: every place that lists them reads it.

`imgscale train --method/--embedding` (its choices, its options and its ``--help``),
`jobs.train.train`, and model loading (`jobs.models.MODEL_CLASSES`, the allow-list of classes a
model file may name, which `evaluate`, `predict`, `embed` and `add-class` go through) are all
built from `METHODS` and `EMBEDDINGS` below. Nothing else names a method.

The table names estimator classes as ``"module:Class"`` strings, imported only when a model is
fitted or loaded (`estimator_class`): reading the table, as every command's ``--help`` does,
costs no import of scikit-learn, SciPy or numba.

How to add a method
-------------------
1. Write the estimator in ``pipeline/classify/<method>.py`` (an embedding in
   ``pipeline/embed/``) and export it from that package's ``__init__``. `evaluate` and
   `predict` need ``classes_``, ``decision_function(X)`` and ``predict_top_k(X, k)``, lazy on
   dask input; `jobs.models.save` keeps ``get_params()`` and the fitted attributes ending in
   ``_`` (numeric arrays or JSON).
2. Write its fit function in this module, ``_fit_<name>(data: TrainingData, options: dict)``,
   returning the fitted estimator (imported inside the function). `TrainingData` is everything
   a method may read from the store: ``data.X``/``data.y`` (the train split, lazy; label -1 =
   unlabelled), ``data.validation()`` (the validation split, or None when it has no labelled
   rows), ``data.stored()`` (the train split's rows as the store keeps them and the codec that
   decodes them, None for float rows: what NCM sums without decoding) and ``data.eigenvalues``
   (those of ``--embedding``, if any).
   ``options`` maps each `Option` the entry declares to its value (its default if not given).
3. Append one `Method` to `METHODS`, e.g.::

       N_EXEMPLARS = Option("n_exemplars", int, 100, "exemplars (paper 003 §3.2).")

       Method(
           "hope",
           "en-HOPE embedding, then kNN on it (paper 003 §3)",  # a line of `train --help`
           _fit_hope,
           estimators=(f"{CLASSIFY}:ExemplarHOPE",),  # every class the fitted model may hold
           options=(N_EXEMPLARS, MAX_ITER),  # method-specific options it reads
           uses_validation=True,  # reads the --val-split rows
       )

   Each `Option` becomes a flag of `imgscale train` (``n_exemplars`` → ``--n-exemplars``);
   reuse the shared `RHO`, `METRIC_DIM`, `MAX_ITER`, `GRAM_PRECISION` where they mean the same
   thing, so one flag serves every method that declares it. Giving an option (or
   ``--val-split``) to a method that does not declare it is refused, never ignored.
4. Nothing else to edit: ``--method`` choices, ``--help``, `train`, saving and loading pick the
   entry up. Add a test that trains the method through `imgscale train` and evaluates the
   reloaded model.

An embedding is one `EMBEDDINGS` entry: its ``"module:Class"``, the fixed parameters that
distinguish the entry, and its fitted class joins the allow-list; ``--n-components``/``--gamma``
apply where the class has that parameter.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    from sklearn.base import BaseEstimator

    from imgscale.storage import RowCodec

# The packages whose ``__init__`` exports the estimators this table names.
CLASSIFY = "imgscale.pipeline.classify"
EMBED = "imgscale.pipeline.embed"

# Classes from which ncm-metric validates W by the top-5 error rather than the top-1 error.
VALIDATE_TOP5_CLASSES = 100


@dataclass(frozen=True)
class Option:
    """A method parameter, given on the command line as ``--name-with-dashes``.

    ``type`` is ``int``, ``float``, ``str``, or a tuple of the accepted strings. ``help`` is
    one sentence; `imgscale train --help` prefixes the names of the methods that take it.
    """

    name: str
    type: Any
    default: Any
    help: str

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


RHO = Option(
    "rho", float, None, "fixed regulariser (ssl: λ = 1/ρ; default: chosen on --val-split)."
)
METRIC_DIM = Option("metric_dim", int, 64, "rows of the learned metric W (paper 002 §3).")
MAX_ITER = Option(
    "max_iter", int, None, "SGD iterations at most (default: ncm-metric 2000, knn 1000, hope 4000)."
)
PATIENCE = Option(
    "n_iter_no_change",
    int,
    None,
    "stop after this many validations in a row without a lower validation error, keeping the "
    "best (default: ncm-metric and knn run --max-iter, hope 10).",
)
# Choices spelled out rather than read from the estimators, whose modules `--help` must not
# import; tests/jobs/test_methods.py checks they are the estimators' own.
GRAM_PRECISION = Option(
    "gram_precision",
    ("float64", "float32"),
    "float64",
    "precision of the Gram products, summed in float64 (float32: faster, within float32 "
    "rounding of the row spread, as pipeline/gram.py states).",
)
RHO_CRITERION = Option(
    "rho_criterion",
    ("error", "rate"),
    "error",
    "what ρ is chosen by on --val-split: the squared error (from the validation rows' sums, "
    "kept in the model, so `update` reads only validation rows that changed) or the mean "
    "per-class rate (the rows scored at each ρ, so `update` reads them all again).",
)
NEIGHBOURHOODS = Option(
    "neighbourhoods", int, 2000, "training instances given a target neighbourhood (paper 004 §3.1)."
)
SIZES = Option(
    "sizes", str, "50,100,200,400", "candidate neighbourhood sizes, comma-separated (§3.1, §3.3)."
)
SAMPLES = Option("samples", int, 10, "candidate sets per size and instance (§3.1's S).")


# en-HOPE (paper 003). --n-components is the flag `train` already has for embeddings: without
# --embedding it sets the dimension of the en-HOPE embedding.
HOPE_DIM = Option("n_components", int, 2, "embedding dimension h (paper 003 §3.1).")
HOPE_EXEMPLARS = Option(
    "exemplars", int, 20, "exemplars z over all classes, ≥ 1 per class (paper 003 §3.2)."
)
HOPE_EXEMPLAR_INIT = Option(
    "exemplar_init",
    ("kmeans", "random", "learned"),
    "kmeans",
    "per-class k-means centres, random rows, or learned from k-means (paper 003 §3.2).",
)
HOPE_FACTORS = Option("factors", int, 800, "factors F of the high-order layer (paper 003 §4).")
HOPE_HIDDEN = Option("hidden_units", int, 400, "high-order hidden units m (paper 003 §4).")
HOPE_DROPOUT = Option(
    "input_dropout",
    float,
    0.2,
    "fraction of features dropped per Adam minibatch row (a regulariser, not in paper 003).",
)
HOPE_SOLVER = Option(
    "solver",
    ("adam", "lbfgs"),
    "adam",
    "minibatch Adam, or full-batch L-BFGS (one pass over the store per evaluation).",
)


class TrainingData:
    """What a method may read from a store: the train split, the validation split, the train
    split as stored.

    Rows stay lazy (row-chunked dask arrays); only labels are numpy. With a fitted
    ``embedding``, every row a method reads is embedded on the fly, chunk by chunk (and there
    are no codes to read).
    """

    def __init__(self, store, split: str, val_split: str | None, eigenvalues=None, embedding=None):
        self._store, self._split, self._val_split = store, split, val_split
        self._embedding = embedding
        self.eigenvalues = eigenvalues
        self.y = store.labels(split)

    def _features(self, split: str, where: Any = None) -> Any:
        X = self._store.features(split) if where is None else self._store.features(split, where)
        return X if self._embedding is None else self._embedding.transform(X)

    @property
    def X(self):
        return self._features(self._split)

    def validation(self, labelled_only: bool = False) -> tuple[Any, np.ndarray] | None:
        """(X_val, y_val) of the validation split, or None if it has no labelled rows.

        With ``labelled_only`` the unlabelled validation rows are left out of both.
        """
        if self._val_split is None:
            return None
        y_val = self._store.labels(self._val_split)
        labelled = y_val >= 0
        if not labelled.any():
            return None
        if labelled_only:
            return self._features(self._val_split, labelled), y_val[labelled]
        return self._features(self._val_split), y_val

    def stored(self) -> tuple[Any, RowCodec | None]:
        """The train split's rows as the store keeps them (lazy) and the codec that decodes
        them: a coded store's codes and codec, or float rows and None (a raw store's, or rows
        embedded on the fly). Class sums of codes are the codec's to compute."""
        if self._embedding is not None:
            return self.X, None
        return self._store.stored_rows(self._split), self._store.codec


@dataclass(frozen=True)
class Method:
    """One ``--method``: how it is fitted, what it reads, what its saved model may hold."""

    name: str
    help: str
    fit: Callable[[TrainingData, dict], BaseEstimator]
    estimators: tuple[str, ...]
    """Every class its fitted model may hold, as ``"module:Class"`` (see `estimator_class`)."""
    options: tuple[Option, ...] = ()
    uses_validation: bool = False
    needs_eigenvalues: bool = False
    parameters: dict[str, str] = field(default_factory=dict)
    """Estimator parameter → the option that sets it, where their names differ."""

    def flag_of(self, parameter: str) -> str | None:
        """The command-line flag that sets the estimator's ``parameter``, if an option does."""
        name = self.parameters.get(parameter, parameter)
        return next((option.flag for option in self.options if option.name == name), None)


def estimator_class(reference: str) -> type[BaseEstimator]:
    """The class a ``"module:Class"`` entry of the table names, imported now."""
    module, name = reference.split(":")
    return getattr(importlib.import_module(module), name)


def _fit_ridge(data: TrainingData, options: dict) -> BaseEstimator:
    from imgscale.pipeline.classify import RidgeClassifier

    # ρ on the validation split when it has labelled rows, else by GCV (paper 000 §4.1).
    model = RidgeClassifier(
        rho=options["rho"],
        gram_precision=options["gram_precision"],
        rho_criterion=options["rho_criterion"],
    )
    validation = data.validation() if options["rho"] is None else None
    if validation is not None:
        X_val, y_val = validation
        return model.fit(data.X, data.y, X_val=X_val, y_val=y_val)
    return model.fit(data.X, data.y)


def _fit_ncm(data: TrainingData, options: dict) -> BaseEstimator:
    from imgscale.pipeline.classify import NearestClassMean

    # On a coded store, class means from the codes (a PQ codec gathers centroids: no row is
    # decoded).
    rows, codec = data.stored()
    return NearestClassMean().fit(rows, data.y, codec=codec)


def _metric_params(options: dict) -> dict:
    params = {"n_components": options["metric_dim"], "random_state": 0}
    for name in ("max_iter", "n_iter_no_change"):
        if options[name] is not None:
            params[name] = options[name]
    return params


def _fit_ncm_metric(data: TrainingData, options: dict) -> BaseEstimator:
    # W by SGD (paper 002 §3), the best W chosen on the labelled validation rows. W is chosen
    # by the top-5 error (§4.1, 1,000 classes); with few classes nearly every W has a top-5
    # error of 0, so the top-1 error decides.
    import numpy as np

    from imgscale.pipeline.classify import MetricNearestClassMean

    n_classes = len(np.unique(data.y[data.y >= 0]))
    validation_k = 5 if n_classes >= VALIDATE_TOP5_CLASSES else 1
    model = MetricNearestClassMean(**_metric_params(options), validation_k=validation_k)
    X_val, y_val = data.validation(labelled_only=True) or (None, None)
    # On a coded store, class means from the codes; SGD decodes only the rows it samples.
    rows, codec = data.stored()
    return model.fit(rows, data.y, X_val, y_val, codec=codec)


def _fit_knn(data: TrainingData, options: dict) -> BaseEstimator:
    # W by SGD with dynamic targets (paper 002 §3); W and k chosen on the labelled val rows.
    from imgscale.pipeline.classify import MetricKNeighborsClassifier

    model = MetricKNeighborsClassifier(**_metric_params(options))
    X_val, y_val = data.validation(labelled_only=True) or (None, None)
    return model.fit(data.X, data.y, X_val, y_val)


def _fit_hope(data: TrainingData, options: dict) -> BaseEstimator:
    # The labelled validation rows choose the iteration (early stopping, paper 003 §4); without
    # them a tenth of the train rows is held out.
    from imgscale.pipeline.classify import ExemplarHOPE

    model = ExemplarHOPE(
        n_components=options["n_components"],
        n_factors=options["factors"],
        n_hidden=options["hidden_units"],
        n_exemplars=options["exemplars"],
        exemplar_init=options["exemplar_init"],
        solver=options["solver"],
        input_dropout=options["input_dropout"],
        random_state=0,
    )
    for name in ("max_iter", "n_iter_no_change"):
        if options[name] is not None:
            model.set_params(**{name: options[name]})
    X_val, y_val = data.validation(labelled_only=True) or (None, None)
    return model.fit(data.X, data.y, X_val, y_val)


def _fit_ssl(data: TrainingData, options: dict) -> BaseEstimator:
    # Paper 001 eq. 3; λ chosen on the validation split like ρ, a fixed ρ means λ = 1/ρ.
    from imgscale.pipeline.classify import SemiSupervisedEigenSolver

    model = SemiSupervisedEigenSolver(lam=None if options["rho"] is None else 1.0 / options["rho"])
    validation = data.validation()
    if validation is not None:
        X_val, y_val = validation
        return model.fit(data.X, data.y, data.eigenvalues, X_val=X_val, y_val=y_val)
    return model.set_params(lam=model.lam or 100.0).fit(data.X, data.y, data.eigenvalues)


def _fit_local(data: TrainingData, options: dict) -> BaseEstimator:
    # Paper 004: the N × K × S offline fits run as tasks on the command's cluster, the training
    # rows broadcast to each worker once (jobs.cluster); in this process without a cluster.
    from imgscale.pipeline.classify import PredictedNeighbourhoodClassifier
    from imgscale.pipeline.compute import current_executor

    try:
        sizes = tuple(int(k) for k in options["sizes"].split(","))
    except ValueError:
        raise ValueError(
            f"--sizes {options['sizes']!r}: expected integers like 50,100,200,400"
        ) from None
    # Compressed indicators (D = 15% of M, §4): on rare attributes they bring ours level with
    # Global B where the uncompressed regression is 5 points under it (docs/findings/rare-local.md).
    model = PredictedNeighbourhoodClassifier(
        n_neighbourhoods=options["neighbourhoods"], sizes=sizes, n_samples=options["samples"],
        compression=0.15, random_state=0,
    )  # fmt: skip
    return model.fit(data.X, data.y, current_executor().map)


METHODS: dict[str, Method] = {
    method.name: method
    for method in (
        Method(
            "ridge",
            "ridge regression, ρ on the validation split or by GCV (paper 000 §3.3)",
            _fit_ridge,
            estimators=(f"{CLASSIFY}:RidgeClassifier",),
            options=(RHO, GRAM_PRECISION, RHO_CRITERION),
            uses_validation=True,
        ),
        Method(
            "ncm",
            "nearest class mean (paper 002 §2)",
            _fit_ncm,
            estimators=(f"{CLASSIFY}:NearestClassMean",),
        ),
        Method(
            "ncm-metric",
            "NCM with a learned low-rank metric W (paper 002 eqs. 6-9)",
            _fit_ncm_metric,
            estimators=(f"{CLASSIFY}:MetricNearestClassMean",),
            options=(METRIC_DIM, MAX_ITER, PATIENCE),
            uses_validation=True,
            parameters={"n_components": "metric_dim"},
        ),
        Method(
            "knn",
            "kNN with a learned metric W (paper 002 eq. 2)",
            _fit_knn,
            estimators=(f"{CLASSIFY}:MetricKNeighborsClassifier",),
            options=(METRIC_DIM, MAX_ITER, PATIENCE),
            uses_validation=True,
            parameters={"n_components": "metric_dim"},
        ),
        Method(
            "hope",
            "en-HOPE 2-D embedding, kNN against exemplars (paper 003 §3)",
            _fit_hope,
            estimators=(f"{CLASSIFY}:ExemplarHOPE",),
            options=(
                HOPE_DIM,
                HOPE_EXEMPLARS,
                HOPE_EXEMPLAR_INIT,
                HOPE_FACTORS,
                HOPE_HIDDEN,
                HOPE_SOLVER,
                HOPE_DROPOUT,
                MAX_ITER,
                PATIENCE,
            ),
            uses_validation=True,
            parameters={
                "n_factors": "factors",
                "n_hidden": "hidden_units",
                "n_exemplars": "exemplars",
            },
        ),
        Method(
            "ssl",
            "semi-supervised solve on eigenfunctions of --embedding pcalap/rplap/ale "
            "(paper 001 eq. 3)",
            _fit_ssl,
            # The eigenvalue-regularised ridge of the same solve (paper 000 §4.1) is saved
            # from Python by the ALE benchmark.
            estimators=(
                f"{CLASSIFY}:SemiSupervisedEigenSolver",
                f"{CLASSIFY}:EigenvalueRidgeClassifier",
            ),
            options=(RHO,),
            uses_validation=True,
            needs_eigenvalues=True,
        ),
        Method(
            "local",
            "lazy local learning on predicted neighbourhoods (paper 004 §3)",
            _fit_local,
            estimators=(f"{CLASSIFY}:PredictedNeighbourhoodClassifier",),
            options=(NEIGHBOURHOODS, SIZES, SAMPLES),
            parameters={"n_neighbourhoods": "neighbourhoods", "n_samples": "samples"},
        ),
    )
}


# --embedding name → ("module:Class", fixed parameters); --n-components / --gamma apply where the
# class has that parameter. Defaults follow paper 000 §4.1.
EMBEDDINGS: dict[str, tuple[str, dict]] = {
    "rff": (f"{EMBED}:RandomFourierFeatures", {}),
    "sqrt": (f"{EMBED}:SquareRoot", {}),
    "hike": (f"{EMBED}:HistogramIntersection", {}),
    "nystrom": (f"{EMBED}:Nystrom", {"kernel": "gaussian"}),
    "nystrom-intersection": (f"{EMBED}:Nystrom", {"kernel": "intersection"}),
    "addkpca": (f"{EMBED}:AddKPCA", {}),
    "pca": (f"{EMBED}:PCA", {}),
    "random-projection": (f"{EMBED}:GaussianRandomProjection", {}),
    "pcalap": (f"{EMBED}:PCALap", {}),
    "rplap": (f"{EMBED}:RPLap", {}),
    "ale": (f"{EMBED}:ALE", {}),
}


def get_method(name: str) -> Method:
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; expected one of {', '.join(METHODS)}")
    return METHODS[name]


def method_options() -> list[Option]:
    """Every method's options, each once, in table order: the flags of `imgscale train`."""
    return list({option.name: option for m in METHODS.values() for option in m.options}.values())


def resolve_options(method: Method, given: dict[str, Any]) -> dict[str, Any]:
    """``method``'s options with ``given`` values over the defaults.

    An option the method does not declare is refused (naming the methods that take it), so no
    value is silently ignored.
    """
    declared = {option.name: option for option in method.options}
    for name in given:
        if name not in declared:
            raise ValueError(_not_for(method, name))
    return {name: given.get(name, option.default) for name, option in declared.items()}


def check_val_split(method: Method) -> None:
    """Refuse an explicit validation split for a method that reads none."""
    if not method.uses_validation:
        takers = [m.name for m in METHODS.values() if m.uses_validation]
        raise ValueError(f"--val-split applies to --method {', '.join(takers)} only")


def methods_taking(option: Option) -> list[str]:
    return [m.name for m in METHODS.values() if option in m.options]


def _not_for(method: Method, name: str) -> str:
    options = {option.name: option for option in method_options()}
    if name not in options:
        return f"method {method.name!r} has no option {name!r}"
    takers = ", ".join(methods_taking(options[name]))
    return f"{options[name].flag} applies to --method {takers} only"


# Vocabularies of local descriptors (`imgscale fit-features`), read by ``--features bow:`` and
# ``fisher:``.
VOCABULARIES = (
    "imgscale.pipeline.describe:BagOfWords",
    "imgscale.pipeline.describe:FisherVector",
)


def model_classes() -> Iterable[str]:
    """Every class a saved model may hold, as ``"module:Class"``: each method's estimators,
    each embedding and each vocabulary."""
    for method in METHODS.values():
        yield from method.estimators
    for reference, _ in EMBEDDINGS.values():
        yield reference
    yield from VOCABULARIES
