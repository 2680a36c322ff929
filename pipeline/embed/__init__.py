"""Nonlinear (and linear) embeddings of feature rows; numpy or row-chunked dask input.

Data-independent: `RandomFourierFeatures`, `SquareRoot`, `HistogramIntersection`,
`GaussianRandomProjection`. Data-dependent: `Nystrom`, `AddKPCA`, `PCA`. Paper 000 §3.2.
Separable Laplacian eigenfunctions: `PCALap`, `RPLap` (paper 000 Table 1), `ALE` (paper 001).
"""

from imgscale.pipeline.embed.add_kpca import AddKPCA
from imgscale.pipeline.embed.ale import ALE
from imgscale.pipeline.embed.gaussian_random_projection import GaussianRandomProjection
from imgscale.pipeline.embed.histogram_intersection import HistogramIntersection
from imgscale.pipeline.embed.nystrom import Nystrom
from imgscale.pipeline.embed.pca import PCA
from imgscale.pipeline.embed.pcalap import PCALap
from imgscale.pipeline.embed.random_fourier_features import RandomFourierFeatures
from imgscale.pipeline.embed.rplap import RPLap
from imgscale.pipeline.embed.square_root import SquareRoot

__all__ = [
    "ALE",
    "PCA",
    "AddKPCA",
    "GaussianRandomProjection",
    "HistogramIntersection",
    "Nystrom",
    "PCALap",
    "RPLap",
    "RandomFourierFeatures",
    "SquareRoot",
]
