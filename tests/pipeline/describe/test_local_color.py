"""Local colour statistics: means and standard deviations of R, G, B in 4×4 cells of a patch."""

import numpy as np
import pytest

from imgscale.pipeline.describe import LocalColor
from imgscale.pipeline.describe.dense_sift import patch_grid

from .conftest import photos


def reference(image: np.ndarray, top: int, left: int, size: int, cells: int) -> np.ndarray:
    """Paper 002 §5.1 in loops: every cell's pixels, their mean and standard deviation."""
    means, stds = [], []
    edges = [round(c * size / cells) for c in range(cells + 1)]
    for r in range(cells):
        for c in range(cells):
            block = (
                image[
                    top + edges[r] : top + edges[r + 1], left + edges[c] : left + edges[c + 1]
                ].reshape(-1, 3)
                / 255.0
            )
            means.extend(block.mean(axis=0))
            stds.extend(block.std(axis=0))
    return np.array(means + stds)


@pytest.mark.parametrize(("sizes", "cells"), [((16,), 4), ((16, 24), 4), ((12,), 3)])
def test_statistics_match_a_loop_over_each_cell(sizes, cells):
    images = photos(48, grey=False)
    out = LocalColor(patch_sizes=sizes, step=8, cells=cells).fit().transform(images)
    grid = patch_grid(48, 48, sizes, 8)
    assert out.shape == (2, len(grid), 6 * cells**2) and out.dtype == np.float32
    for i in range(2):
        for p in range(0, len(grid), 5):
            np.testing.assert_allclose(
                out[i, p], reference(images[i], *grid[p], cells), rtol=1e-5, atol=2e-6
            )


def test_the_default_is_96_dimensional():
    assert LocalColor().fit().n_features_out_ == 96


def test_an_image_smaller_than_one_patch_is_refused():
    with pytest.raises(ValueError, match="smaller than one 16-pixel patch"):
        LocalColor().fit().transform(np.zeros((1, 8, 20, 3), np.uint8))


def test_grey_images_and_too_many_cells_are_refused():
    with pytest.raises(ValueError, match="RGB uint8 images"):
        LocalColor().fit().transform(np.zeros((1, 32, 32), np.uint8))
    with pytest.raises(ValueError, match="cells"):
        LocalColor(patch_sizes=(8,), cells=9).fit()
