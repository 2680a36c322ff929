"""The one input check every descriptor shares: a batch of decoded images of the requested shape."""

from __future__ import annotations

from typing import Any

import numpy as np


def check_images(images: Any, mode: str, size: int, what: str) -> np.ndarray:
    """`images` as numpy, of shape (n, size, size) for mode "L" or (n, size, size, 3) for "RGB".

    Any real dtype is accepted (decoders hand uint8); anything else is a one-line ValueError
    naming the expected shape.
    """
    images = np.asarray(images)
    expected = (size, size) if mode == "L" else (size, size, 3)
    shape_text = f"(n, {', '.join(map(str, expected))})"
    if images.ndim != len(expected) + 1 or images.shape[1:] != expected:
        raise ValueError(
            f"{what} expects {mode} images as an array of shape {shape_text}, "
            f"got shape {images.shape}"
        )
    if not (np.issubdtype(images.dtype, np.integer) or np.issubdtype(images.dtype, np.floating)):
        raise ValueError(f"{what} expects images of a real dtype (uint8), got {images.dtype}")
    return images


def check_image_size(size: Any, what: str, minimum: int = 1) -> int:
    if not isinstance(size, int | np.integer) or isinstance(size, bool) or size < minimum:
        raise ValueError(f"{what}: image_size must be an integer >= {minimum}, got {size!r}")
    return int(size)
