"""Nonlinear (and linear) embeddings of feature rows; numpy or row-chunked dask input.

Data-independent: `RandomFourierFeatures`, `SquareRoot`, `HistogramIntersection`,
`GaussianRandomProjection`. Data-dependent: `Nystrom`, `AddKPCA`, `PCA`. Paper 000 §3.2.
"""

from pipeline.embed.add_kpca import AddKPCA
from pipeline.embed.gaussian_random_projection import GaussianRandomProjection
from pipeline.embed.histogram_intersection import HistogramIntersection
from pipeline.embed.nystrom import Nystrom
from pipeline.embed.pca import PCA
from pipeline.embed.random_fourier_features import RandomFourierFeatures
from pipeline.embed.square_root import SquareRoot

__all__ = [
    "PCA",
    "AddKPCA",
    "GaussianRandomProjection",
    "HistogramIntersection",
    "Nystrom",
    "RandomFourierFeatures",
    "SquareRoot",
]
