"""Images for the descriptor tests: random noise, smooth gradients with edges, and real photos."""

import numpy as np
import pytest
from sklearn.datasets import load_sample_images


def scene(size: int, seed: int) -> np.ndarray:
    """A grey uint8 image of a smooth gradient, a bright disc and a dark oblique bar."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[:size, :size] / size
    image = 80 + 60 * x + 40 * y
    image += 90 * (np.hypot(x - rng.uniform(0.3, 0.7), y - 0.4) < 0.2)
    image -= 70 * (np.abs(x + 0.6 * y - rng.uniform(0.6, 1.0)) < 0.05)
    image += rng.normal(0, 3, image.shape)
    return np.clip(image, 0, 255).astype(np.uint8)


def photos(size: int, grey: bool) -> np.ndarray:
    """sklearn's two sample photos (427×640), centre-cropped and block-averaged to size×size."""
    out = []
    for photo in load_sample_images().images:
        side = (min(photo.shape[:2]) // size) * size
        top, left = (photo.shape[0] - side) // 2, (photo.shape[1] - side) // 2
        crop = photo[top : top + side, left : left + side].astype(np.float64)
        k = side // size
        small = crop.reshape(size, k, size, k, 3).mean(axis=(1, 3))
        out.append(small.mean(axis=2) if grey else small)
    return np.round(np.asarray(out)).astype(np.uint8)


@pytest.fixture
def grey_images():
    """Six grey 32×32 images: two of noise, two scenes, two photos."""
    rng = np.random.default_rng(1)
    noise = rng.integers(0, 256, (2, 32, 32), dtype=np.uint8)
    return np.concatenate([noise, [scene(32, 0), scene(32, 1)], photos(32, grey=True)])
