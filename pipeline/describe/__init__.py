"""Descriptors: scikit-learn-style transformers from a batch of decoded images to float32 rows.

Each takes the images its `image_request` names — ``(mode, (height, width))``, mode "L" for grey
arrays (n, h, w) or "RGB" for (n, h, w, 3), uint8 — and has `fit` (checks the parameters, sets
`n_features_out_`) and `transform` (float32 rows (n, n_features_out_)). Parameters are
JSON-able, so `get_params()` records the descriptor a store was built with.

- `Gist`: Gabor energy over a grid (Oliva & Torralba 2001, as LMgist computes it; paper 000).
- `ColorHistogram`: joint HSV (or RGB) histogram.
- `OnnxFeatures`: activations of a user's CNN exported to ONNX (the ``onnx`` extra).
- `DESCRIPTORS`: the named settings, ``DESCRIPTORS[name]()`` builds one.
"""

from collections.abc import Callable
from functools import partial

from sklearn.base import BaseEstimator

from imgscale.pipeline.describe.color_histogram import ColorHistogram
from imgscale.pipeline.describe.gist import Gist
from imgscale.pipeline.describe.onnx_features import OnnxFeatures

DESCRIPTORS: dict[str, Callable[[], BaseEstimator]] = {
    # LMgist's defaults: 4 scales × 8 orientations on a 4×4 grid, 512-D.
    "gist": partial(Gist, orientations_per_scale=(8, 8, 8, 8), n_blocks=4, image_size=128),
    # Tiny images (32×32 CIFAR-10): paper 000 §4.1 reports 320-D grey GIST ("8 orientations
    # and 4 scales" would be 512-D); 320-D is the tiny-images bank (8, 8, 4) on a 4×4 grid.
    "gist-tiny": partial(Gist, orientations_per_scale=(8, 8, 4), n_blocks=4, image_size=32),
    "color": partial(ColorHistogram, bins=(8, 4, 4), space="hsv", image_size=64),
}

__all__ = ["DESCRIPTORS", "ColorHistogram", "Gist", "OnnxFeatures"]
