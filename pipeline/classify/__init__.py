"""Classifiers trained by reductions over rows; numpy or row-chunked dask input."""

from pipeline.classify.knn import MetricKNeighborsClassifier
from pipeline.classify.ncm import NearestClassMean
from pipeline.classify.ncm_metric import MetricNearestClassMean
from pipeline.classify.ridge import RidgeClassifier

__all__ = [
    "MetricKNeighborsClassifier",
    "MetricNearestClassMean",
    "NearestClassMean",
    "RidgeClassifier",
]
