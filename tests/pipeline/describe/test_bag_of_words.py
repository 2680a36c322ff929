"""Bags of words: hard-assignment histograms and the spatial pyramid against a reference
written from Lazebnik et al. 2006, the dictionary, bad input."""

import numpy as np
import pytest

from imgscale.pipeline.describe import BagOfWords, DenseSift
from imgscale.pipeline.describe.dense_sift import patch_grid

from .conftest import photos, scene


@pytest.fixture(scope="module")
def images():
    return np.concatenate([photos(64, grey=True), [scene(64, s) for s in range(4)]])


@pytest.fixture(scope="module")
def bow(images):
    return BagOfWords(n_words=12, pyramid_levels=3, image_size=64).fit(images)


def reference(image: np.ndarray, words: np.ndarray, levels: int) -> np.ndarray:
    """Per patch: its nearest word by brute force and its cell at each level by its centre;
    level l of L weighted 1/2^(L−l), level 0 1/2^(L−1) (Lazebnik et al. eq. 3)."""
    sift = DenseSift().fit().transform(image[None])[0]
    grid = patch_grid(64, 64, (16,), 8)
    parts = []
    for level in range(levels):
        cells = 2**level
        histogram = np.zeros((cells, cells, len(words)))
        for (top, left, size), x in zip(grid, sift, strict=True):
            word = min(range(len(words)), key=lambda k: np.sum((x - words[k]) ** 2))
            cy, cx = top + size / 2, left + size / 2  # centre, as a continuous position
            histogram[int(cy * cells // 64), int(cx * cells // 64), word] += 1
        weight = 1 / 2 ** (levels - 1) if level == 0 else 1 / 2 ** (levels - level)
        parts.append(weight * histogram.ravel() / len(grid))
    out = np.concatenate(parts)
    return out / out.sum()


def test_histograms_match_the_reference_with_a_pyramid(bow, images):
    out = bow.transform(images)
    assert out.shape == (len(images), 12 * 21) and out.dtype == np.float32
    for i in (0, 3):
        np.testing.assert_allclose(out[i], reference(images[i], bow.words_, 3), atol=1e-6)
    np.testing.assert_allclose(out.sum(axis=1), 1, rtol=1e-6)


def test_without_a_pyramid_the_histogram_counts_words_of_the_whole_image(images):
    bow = BagOfWords(n_words=12, image_size=64).fit(images)
    out = bow.transform(images[:2])
    assert out.shape == (2, 12)
    np.testing.assert_allclose(out[1], reference(images[1], bow.words_, 1), atol=1e-6)
    np.testing.assert_allclose(out * 49, np.rint(out * 49), atol=1e-4)  # counts of 7×7 patches


def test_the_dictionary_is_a_fixed_point_of_lloyds_iteration(bow, images):
    sift = DenseSift().fit().transform(images).reshape(-1, 128).astype(np.float64)
    nearest = np.argmin(((sift[:, None] - bow.words_[None]) ** 2).sum(axis=2), axis=1)
    for k in np.unique(nearest):
        np.testing.assert_allclose(bow.words_[k], sift[nearest == k].mean(axis=0), atol=2e-3)


def test_an_image_size_under_one_patch_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"image_size 12 is smaller than one 16-pixel patch"):
        BagOfWords(image_size=12).fit(np.zeros((2, 12, 12), np.uint8))


def test_images_of_another_size_are_refused(bow):
    with pytest.raises(ValueError, match=r"shape \(n, 64, 64\)"):
        bow.transform(np.zeros((1, 32, 32), np.uint8))


def test_the_sift_window_reaches_the_descriptors_and_a_bad_one_is_refused(images):
    bow = BagOfWords(n_words=4, image_size=64, sift_window=2.25)
    wide = DenseSift(window=2.25).fit().transform(images[:2]).reshape(-1, 128)
    np.testing.assert_array_equal(bow.local_descriptors(images[:2])["sift"], wide)
    with pytest.raises(ValueError, match="sift_window"):
        BagOfWords(image_size=64, sift_window=0).fit(images)
