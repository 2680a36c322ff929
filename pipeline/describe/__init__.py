"""Descriptors: scikit-learn-style transformers from a batch of decoded images to float32 rows.

Each takes the images its `image_request` names — ``(mode, (height, width))``, mode "L" for grey
arrays (n, h, w) or "RGB" for (n, h, w, 3), uint8 — and has `fit` (checks the parameters, sets
`n_features_out_`) and `transform` (float32 rows (n, n_features_out_)). Parameters are
JSON-able, so `get_params()` records the descriptor a store was built with.

- `Gist`: Gabor energy over a grid (Oliva & Torralba 2001, as LMgist computes it; paper 000).
- `ColorHistogram`: joint HSV (or RGB) histogram.
- `OnnxFeatures`: activations of a user's CNN exported to ONNX (the ``onnx`` extra).
- `DenseSift`, `LocalColor`: local descriptors of the patches of a regular grid, (n, patches, d).
- `BagOfWords`, `FisherVector`: encodings of the local descriptors against a vocabulary they
  learn (k-means; PCA + diagonal GMM), by `fit` on images or `fit_chunks` over local
  descriptors held elsewhere (`InMemoryChunks`, or the cluster's chunks in
  ``jobs.fit_vocabulary``); `watch_passes` shows each pass of such a fit (a `FitPass`).
- `DESCRIPTORS`: the named settings, ``DESCRIPTORS[name]()`` builds one.
"""

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from sklearn.base import BaseEstimator

from imgscale.exports import declared_exports, lazy_exports
from imgscale.pipeline.describe.color_histogram import ColorHistogram
from imgscale.pipeline.describe.gist import Gist

# The other descriptors, imported from their modules when first used (imgscale.exports): a worker
# describing GIST or colour does not pay for numba, OpenCV or scikit-learn's k-means.
if TYPE_CHECKING:
    from imgscale.pipeline.describe.bag_of_words import BagOfWords as BagOfWords
    from imgscale.pipeline.describe.dense_sift import DenseSift as DenseSift
    from imgscale.pipeline.describe.fisher_vector import FisherVector as FisherVector
    from imgscale.pipeline.describe.local_color import LocalColor as LocalColor
    from imgscale.pipeline.describe.onnx_features import OnnxFeatures as OnnxFeatures
    from imgscale.pipeline.describe.vocabulary import FitPass as FitPass
    from imgscale.pipeline.describe.vocabulary import InMemoryChunks as InMemoryChunks
    from imgscale.pipeline.describe.vocabulary import watch_passes as watch_passes

DESCRIPTORS: dict[str, Callable[[], BaseEstimator]] = {
    # LMgist's defaults: 4 scales × 8 orientations on a 4×4 grid, 512-D.
    "gist": partial(Gist, orientations_per_scale=(8, 8, 8, 8), n_blocks=4, image_size=128),
    # Tiny images (32×32 CIFAR-10): paper 000 §4.1 reports 320-D grey GIST ("8 orientations
    # and 4 scales" would be 512-D); 320-D is the tiny-images bank (8, 8, 4) on a 4×4 grid.
    "gist-tiny": partial(Gist, orientations_per_scale=(8, 8, 4), n_blocks=4, image_size=32),
    "color": partial(ColorHistogram, bins=(8, 4, 4), space="hsv", image_size=32),
}

_EXPORTS = declared_exports(__name__, __file__)

__all__ = sorted(["DESCRIPTORS", "ColorHistogram", "Gist", *_EXPORTS])

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
