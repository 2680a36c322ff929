"""Local colour statistics of square patches on a regular grid (paper 002 §5.1's colour feature)."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from imgscale.pipeline.describe.dense_sift import check_grid_params, patch_grid

# Images whose integral images are held at once: two float64 (n, h+1, w+1, 3) arrays, 50 MiB
# at 128×128.
_SLICE = 64


class LocalColor(TransformerMixin, BaseEstimator):
    """Mean and standard deviation of R, G and B in each cell of a cells × cells grid over every
    patch of a regular grid: 2 · 3 · cells² values a patch (96-D for 4×4 cells).

    Paper 002 §5.1 (after Clinchant et al. 2007): "local color features ... the means and
    standard deviations of the three RGB channels in each of 4×4 sub-regions" of the patches SIFT
    describes. Channels are in [0, 1]; cell c of a p-pixel patch spans pixels
    [round(c·p/cells), round((c+1)·p/cells)). Statistics come from integral images of the pixels
    and their squares (float64), so every patch costs the same whatever its size.

    Parameters
    ----------
    patch_sizes : tuple of int, default=(16,)
    step : int, default=8
        The grid, as `DenseSift`'s (same patches, same order).
    cells : int, default=4
        Cells per side of a patch.

    Attributes
    ----------
    n_features_out_ : int
        6 · cells²: the means (cell row, cell column, channel), then the standard deviations.

    References
    ----------
    Clinchant, Csurka, Perronnin & Renders, "XRCE's participation to ImageEval", 2007.
    Mensink, Verbeek, Perronnin & Csurka, "Metric learning for large scale image classification",
    ECCV 2012, §5.1 (paper 002).
    """

    def __init__(self, patch_sizes: tuple[int, ...] = (16,), step: int = 8, cells: int = 4):
        self.patch_sizes = patch_sizes
        self.step = step
        self.cells = cells

    def fit(self, images: Any = None, y: Any = None) -> LocalColor:
        """Check the parameters; nothing is learned."""
        sizes = check_grid_params(self.patch_sizes, self.step, "LocalColor")
        if not isinstance(self.cells, int | np.integer) or not 1 <= self.cells <= min(sizes):
            raise ValueError(
                f"LocalColor: cells must be an integer in [1, {min(sizes)}], got {self.cells!r}"
            )
        self.n_features_out_ = 6 * int(self.cells) ** 2
        return self

    def transform(self, images: Any) -> np.ndarray:
        """Statistics of RGB uint8 images (n, h, w, 3): float32 (n, patches, n_features_out_)."""
        check_is_fitted(self)
        images = np.asarray(images)
        if images.ndim != 4 or images.shape[3] != 3 or images.dtype != np.uint8:
            raise ValueError(
                f"LocalColor expects RGB uint8 images (n, h, w, 3), got {images.dtype} "
                f"of shape {images.shape}"
            )
        grid = patch_grid(images.shape[1], images.shape[2], tuple(self.patch_sizes), self.step)
        y0, y1, x0, x1 = self._cell_bounds(grid)
        out = np.empty((len(images), len(grid), self.n_features_out_), np.float32)
        half = self.n_features_out_ // 2
        for start in range(0, len(images), _SLICE):
            pixels = images[start : start + _SLICE].astype(np.float64) / 255
            area = ((y1 - y0) * (x1 - x0))[None, :, :, None]
            mean = _box_sums(_integral(pixels), y0, y1, x0, x1) / area
            square = _box_sums(_integral(pixels * pixels), y0, y1, x0, x1) / area
            std = np.sqrt(np.maximum(square - mean * mean, 0))
            n = len(pixels)
            out[start : start + n, :, :half] = mean.reshape(n, len(grid), half)
            out[start : start + n, :, half:] = std.reshape(n, len(grid), half)
        return out

    def _cell_bounds(self, grid: np.ndarray) -> tuple[np.ndarray, ...]:
        """Pixel bounds (y0, y1, x0, x1) of every cell, each (patches, cells²), row-major."""
        cells = int(self.cells)
        edges = np.rint(np.arange(cells + 1)[None, :] * grid[:, 2:] / cells).astype(np.int64)
        top = grid[:, :1] + edges  # (patches, cells + 1)
        left = grid[:, 1:2] + edges
        row, col = np.divmod(np.arange(cells * cells), cells)
        return top[:, row], top[:, row + 1], left[:, col], left[:, col + 1]


def _integral(pixels: np.ndarray) -> np.ndarray:
    """Summed-area table of (n, h, w, 3) with a zero first row and column: (n, h+1, w+1, 3)."""
    table = np.zeros((pixels.shape[0], pixels.shape[1] + 1, pixels.shape[2] + 1, 3))
    np.cumsum(np.cumsum(pixels, axis=1), axis=2, out=table[:, 1:, 1:])
    return table


def _box_sums(table: np.ndarray, y0, y1, x0, x1) -> np.ndarray:
    """Sums over the boxes [y0, y1) × [x0, x1): (n, *y0.shape, 3)."""
    return table[:, y1, x1] - table[:, y0, x1] - table[:, y1, x0] + table[:, y0, x0]
