"""Classifiers trained by reductions over rows; numpy or row-chunked dask input."""

from pipeline.classify.ncm import NearestClassMean
from pipeline.classify.ridge import RidgeClassifier

__all__ = ["NearestClassMean", "RidgeClassifier"]
