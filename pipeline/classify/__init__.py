"""Classifiers trained by reductions over rows; numpy or row-chunked dask input."""

from imgscale.pipeline.classify._base import top_k_columns
from imgscale.pipeline.classify.knn import MetricKNeighborsClassifier
from imgscale.pipeline.classify.local import PredictedNeighbourhoodClassifier
from imgscale.pipeline.classify.ncm import NearestClassMean
from imgscale.pipeline.classify.ncm_metric import MetricNearestClassMean
from imgscale.pipeline.classify.ridge import RidgeClassifier
from imgscale.pipeline.classify.ssl import EigenvalueRidgeClassifier, SemiSupervisedEigenSolver

__all__ = [
    "EigenvalueRidgeClassifier",
    "MetricKNeighborsClassifier",
    "MetricNearestClassMean",
    "NearestClassMean",
    "PredictedNeighbourhoodClassifier",
    "RidgeClassifier",
    "SemiSupervisedEigenSolver",
    "top_k_columns",
]
