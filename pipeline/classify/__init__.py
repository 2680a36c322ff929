"""Classifiers trained by reductions over rows; numpy or row-chunked dask input."""

from pipeline.classify.knn import MetricKNeighborsClassifier
from pipeline.classify.ncm import NearestClassMean
from pipeline.classify.ncm_metric import MetricNearestClassMean
from pipeline.classify.ridge import RidgeClassifier
from pipeline.classify.ssl import EigenvalueRidgeClassifier, SemiSupervisedEigenSolver

__all__ = [
    "EigenvalueRidgeClassifier",
    "MetricKNeighborsClassifier",
    "MetricNearestClassMean",
    "NearestClassMean",
    "RidgeClassifier",
    "SemiSupervisedEigenSolver",
]
