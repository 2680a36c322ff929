"""Joint colour histogram of each image, HSV (hue bins centred on the primaries) or RGB."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from imgscale.pipeline.describe._images import check_image_size, check_images

_SPACES = ("hsv", "rgb")
# Pixels whose bin indices are computed at once (int64 each): a few MiB of working set.
_SLICE_PIXELS = 2**19


class ColorHistogram(TransformerMixin, BaseEstimator):
    """Joint histogram of the pixels' colours, one row per image, L1-normalised (sums to 1).

    With ``space="hsv"`` (hue h in [0, 1), saturation s and value v in [0, 1], as
    `colorsys.rgb_to_hsv` and `skimage.color.rgb2hsv` define them) the bin of a pixel is

    - hue: round(h · bins[0]) mod bins[0]: hue is circular and bin 0 is centred on red, so bin k
      covers [(k − ½)/bins[0], (k + ½)/bins[0]) and reds either side of 0° share a bin;
    - saturation and value: floor(x · bins[i]), with x = 1 in the last bin (edges i/bins[i]).

    Greys (s = 0) have h = 0 and land in hue bin 0, saturation bin 0. With ``space="rgb"``, each
    channel c in 0..255 has bin floor(c · bins[i] / 256). Bins are computed in integer
    arithmetic from the uint8 channels, so no pixel changes bin by rounding. Rows index the bins
    C-order: (bin₀ · bins[1] + bin₁) · bins[2] + bin₂, as `np.histogramdd(...).ravel()`.

    Parameters
    ----------
    bins : tuple of 3 int, default=(8, 4, 4)
        Bins per channel: (hue, saturation, value) or (red, green, blue).
    space : {"hsv", "rgb"}, default="hsv"
    image_size : int, default=32
        Side of the square RGB images `transform` takes.

    Attributes
    ----------
    n_features_out_ : int
        bins[0] · bins[1] · bins[2].

    References
    ----------
    Swain & Ballard, "Color indexing", IJCV 7(1), 1991 (colour histograms as descriptors).
    Smith, "Color gamut transform pairs", SIGGRAPH 1978 (the HSV hexcone).
    """

    def __init__(self, bins: tuple[int, int, int] = (8, 4, 4), space: str = "hsv", image_size=32):
        self.bins = bins
        self.space = space
        self.image_size = image_size

    @property
    def image_request(self) -> tuple[str, tuple[int, int]]:
        """What the decoder hands `transform`: RGB images of image_size × image_size."""
        return "RGB", (self.image_size, self.image_size)

    def fit(self, images: Any = None, y: Any = None) -> ColorHistogram:
        """Check the parameters and set `n_features_out_`; nothing is learned from `images`."""
        check_image_size(self.image_size, "ColorHistogram")
        if self.space not in _SPACES:
            raise ValueError(f"ColorHistogram: space must be one of {_SPACES}, got {self.space!r}")
        bins = tuple(self.bins)
        if len(bins) != 3 or not all(
            isinstance(b, int | np.integer) and 1 <= b <= 256 for b in bins
        ):
            raise ValueError(
                f"ColorHistogram: bins must be 3 integers in [1, 256], got {self.bins!r}"
            )
        self.n_features_out_ = int(np.prod(bins))
        return self

    def transform(self, images: Any) -> np.ndarray:
        """Normalised histograms: float32 (n, n_features_out_)."""
        check_is_fitted(self)
        images = check_images(images, "RGB", self.image_size, "ColorHistogram")
        if images.dtype != np.uint8:
            raise ValueError(f"ColorHistogram expects uint8 images, got {images.dtype}")
        n_bins = self.n_features_out_
        n_pixels = self.image_size**2
        counts = np.empty((len(images), n_bins), np.float32)
        step = max(1, _SLICE_PIXELS // n_pixels)
        for start in range(0, len(images), step):
            rgb = images[start : start + step].reshape(-1, n_pixels, 3)
            index = self._bin_index(rgb)
            # One bincount for the slice: image i's bins are offset by i · n_bins.
            index += np.arange(len(rgb))[:, None] * n_bins
            counts[start : start + len(rgb)] = np.bincount(
                index.ravel(), minlength=len(rgb) * n_bins
            ).reshape(len(rgb), n_bins)
        counts *= np.float32(1 / n_pixels)
        return counts

    def _bin_index(self, rgb: np.ndarray) -> np.ndarray:
        """Joint bin of each pixel, int64 of shape rgb.shape[:-1]."""
        b0, b1, b2 = (int(b) for b in self.bins)
        r, g, b = (rgb[..., c].astype(np.int64) for c in range(3))
        if self.space == "rgb":
            return ((r * b0 >> 8) * b1 + (g * b1 >> 8)) * b2 + (b * b2 >> 8)
        top = np.maximum(np.maximum(r, g), b)
        delta = top - np.minimum(np.minimum(r, g), b)
        value = np.minimum(top * b2 // 255, b2 - 1)
        saturation = np.minimum(delta * b1 // np.maximum(top, 1), b1 - 1)
        # Hue in sixths of a turn: (sector + difference / delta) with sector 0, 2, 4 where red,
        # green or blue is the maximum; ties give the same hue whichever channel is chosen.
        sector = np.where(r == top, 0, np.where(g == top, 2, 4))
        difference = np.where(r == top, g - b, np.where(g == top, b - r, r - g))
        # round(h · b0) = floor((h6 / 6) · b0 + ½) = floor((2 b0 h6 + 6) / 12), exact in integers.
        span = np.maximum(delta, 1)
        hue = (2 * b0 * (sector * span + difference) + 6 * span) // (12 * span) % b0
        hue[delta == 0] = 0
        return (hue * b1 + saturation) * b2 + value
