"""Classifiers trained by reductions over rows; numpy or row-chunked dask input.

Each name is imported from its module on first use (PEP 562): a command that fits one method
does not import the others (local learning alone imports scikit-learn's linear models).
"""

from imgscale.exports import lazy_exports

# Exported name → the module of this package defining it.
_EXPORTS = {
    "top_k_columns": "_base",
    "Validation": "_optimisers",
    "watch_validations": "_optimisers",
    "ExemplarHOPE": "hope",
    "MetricKNeighborsClassifier": "knn",
    "PredictedNeighbourhoodClassifier": "local",
    "NearestClassMean": "ncm",
    "MetricNearestClassMean": "ncm_metric",
    "RidgeClassifier": "ridge",
    "EigenvalueRidgeClassifier": "ssl",
    "SemiSupervisedEigenSolver": "ssl",
    "prior_means": "zero_shot",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
