"""ColorHistogram against np.histogramdd of skimage's HSV, per image."""

import colorsys

import numpy as np
import pytest
from skimage.color import rgb2hsv

from imgscale.pipeline.describe import DESCRIPTORS, ColorHistogram

from .conftest import photos


def reference_histogram(image, bins):
    """Hue shifted by half a bin so bin 0 is centred on red, then histogramdd over [0, 1]³.

    HSV of uint8 colours are fractions with small denominators; a colour exactly on a bin edge
    (s = 129/172 = 0.75) can come out of float arithmetic a hair below it, so the reference
    adds 1e-9 (far below the gap between distinct values) before binning.
    """
    hsv = rgb2hsv(image).reshape(-1, 3) + 1e-9
    hsv[:, 0] = (hsv[:, 0] + 0.5 / bins[0]) % 1.0
    np.minimum(hsv, 1, out=hsv)
    counts, _ = np.histogramdd(hsv, bins=bins, range=[(0, 1)] * 3)
    return counts.ravel() / len(hsv)


@pytest.fixture
def rgb_images():
    rng = np.random.default_rng(2)
    noise = rng.integers(0, 256, (3, 32, 32, 3), dtype=np.uint8)
    return np.concatenate([noise, photos(32, grey=False)])


def test_histograms_match_histogramdd_of_skimage_hsv(rgb_images):
    got = DESCRIPTORS["color"]().fit().transform(rgb_images)
    want = np.stack([reference_histogram(image, (8, 4, 4)) for image in rgb_images])
    np.testing.assert_allclose(got, want, atol=1e-7)


def test_other_bins_and_rgb_match_histogramdd(rgb_images):
    got = ColorHistogram(bins=(6, 3, 5)).fit().transform(rgb_images)
    want = np.stack([reference_histogram(image, (6, 3, 5)) for image in rgb_images])
    np.testing.assert_allclose(got, want, atol=1e-7)
    got = ColorHistogram(bins=(4, 2, 3), space="rgb").fit().transform(rgb_images)
    for image, row in zip(rgb_images, got, strict=True):
        counts, _ = np.histogramdd(image.reshape(-1, 3), bins=(4, 2, 3), range=[(0, 256)] * 3)
        np.testing.assert_allclose(row, counts.ravel() / 32**2, atol=1e-7)


def test_rows_are_float32_and_sum_to_one(rgb_images):
    rows = DESCRIPTORS["color"]().fit().transform(rgb_images)
    assert rows.dtype == np.float32 and rows.shape == (len(rgb_images), 128)
    np.testing.assert_allclose(rows.sum(axis=1), 1, rtol=1e-6)
    assert DESCRIPTORS["color"]().fit().transform(np.zeros((0, 32, 32, 3), np.uint8)).shape == (
        0,
        128,
    )


@pytest.mark.parametrize(
    ("rgb", "hsv_bin"),
    [
        ((255, 0, 0), (0, 3, 3)),  # pure red: hue bin 0, full saturation and value
        ((255, 0, 20), (0, 3, 3)),  # a red just past 0° the other way shares its bin
        ((0, 255, 0), (3, 3, 3)),  # green at 120° sits at 8 · 1/3 = 2.67, rounded to 3
        ((128, 128, 128), (0, 0, 2)),  # grey: hue 0, saturation 0
        ((0, 0, 0), (0, 0, 0)),
    ],
)
def test_a_uniform_image_lands_in_the_bin_its_colour_names(rgb, hsv_bin):
    image = np.broadcast_to(np.array(rgb, np.uint8), (1, 32, 32, 3))
    row = DESCRIPTORS["color"]().fit().transform(image)[0]
    assert row[np.ravel_multi_index(hsv_bin, (8, 4, 4))] == 1
    h, s, v = colorsys.rgb_to_hsv(*(c / 255 for c in rgb))
    assert hsv_bin == (round(h * 8) % 8, min(int(s * 4), 3), min(int(v * 4), 3))


def test_images_of_another_shape_or_dtype_are_refused():
    color = DESCRIPTORS["color"]().fit()
    with pytest.raises(ValueError, match=r"shape \(n, 32, 32, 3\), got shape \(2, 32, 32\)"):
        color.transform(np.zeros((2, 32, 32), np.uint8))
    with pytest.raises(ValueError, match="uint8"):
        color.transform(np.zeros((2, 32, 32, 3), np.float32))


@pytest.mark.parametrize("params", [{"bins": (8, 4)}, {"bins": (8, 0, 4)}, {"space": "lab"}])
def test_bad_parameters_are_refused_at_fit(params):
    with pytest.raises(ValueError, match="ColorHistogram"):
        ColorHistogram(**params).fit()
