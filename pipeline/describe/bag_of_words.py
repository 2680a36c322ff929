"""Bag of visual words: dense SIFT quantised to a k-means dictionary, with a spatial pyramid."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from imgscale.pipeline.describe._images import check_images
from imgscale.pipeline.describe.dense_sift import (
    DenseSift,
    check_grid_params,
    check_window,
    patch_centres,
    patch_grid,
)
from imgscale.pipeline.describe.vocabulary import (
    Chunk,
    DescriptorChunks,
    InMemoryChunks,
    fit_kmeans,
    nearest,
)
from imgscale.pipeline.fitted import Shape

CHANNEL = "sift"


class BagOfWords(TransformerMixin, BaseEstimator):
    """Histogram of the visual words of an image's dense SIFT descriptors, each descriptor
    assigned to its nearest word (hard assignment), L1-normalised.

    Paper 000 §4: SIFT of 16×16 patches every 8 pixels, a 400-word dictionary learned by
    k-means. With ``pyramid_levels`` L > 1 the image is also cut into 2×2, 4×4, ... cells
    (levels l = 0..L−1) and the histograms of all cells are concatenated, level l weighted
    1/2^(L−l) and level 0 weighted 1/2^(L−1), as the pyramid match kernel (Lazebnik et al. 2006,
    eq. 3); each level's cells together count every descriptor once, and the whole vector sums
    to 1. A descriptor belongs to the cell holding its patch's centre.

    The dictionary is learned by `fit` on images in memory, or by `fit_chunks` over local
    descriptors held elsewhere (``imgscale fit-features``: chunks on the Dask workers), one
    pass an iteration.

    Parameters
    ----------
    n_words : int, default=400
    patch_sizes, step, root :
        The dense SIFT grid and RootSIFT (`DenseSift`).
    sift_window : float, default=1.0
        Side of the window each SIFT descriptor covers, in patch sides (`DenseSift`'s window;
        1 is the patch alone, as saved vocabularies without it were fitted).
    pyramid_levels : int, default=1
        1: one histogram of the whole image; 3: 1×1 + 2×2 + 4×4 (21 histograms).
    image_size : int, default=128
        Side of the square grey images `transform` takes.
    max_iter : int, default=50
        k-means iterations (passes) at most.
    tol : float, default=1e-4
        k-means stops when the words' squared moves sum to at most tol × the descriptors' mean
        variance (scikit-learn's ``KMeans`` criterion).
    random_state : int, default=0
        Seeds the k-means++ seeding and its sample.

    Attributes
    ----------
    words_ : ndarray (n_words, 128), float32
    n_iter_ : int
    n_features_out_ : int
        n_words × (1 + 4 + ... + 4^(L−1)).

    References
    ----------
    Sivic & Zisserman, "Video Google", ICCV 2003; Csurka et al., "Visual categorization with bags
    of keypoints", ECCV workshops 2004.
    Lazebnik, Schmid & Ponce, "Beyond bags of features: spatial pyramid matching", CVPR 2006.
    Gong & Lazebnik, "Comparing data-dependent and data-independent embeddings for
    classification and ranking of Internet images", CVPR 2011, §4 (paper 000).
    """

    # W: the width of a SIFT descriptor (128).
    _fitted_shapes: ClassVar[dict[str, Shape]] = {"words_": ("n_words", "W")}

    def __init__(
        self,
        n_words: int = 400,
        patch_sizes: tuple[int, ...] = (16,),
        step: int = 8,
        root: bool = False,
        sift_window: float = 1.0,
        pyramid_levels: int = 1,
        image_size: int = 128,
        max_iter: int = 50,
        tol: float = 1e-4,
        random_state: int = 0,
    ):
        self.n_words = n_words
        self.patch_sizes = patch_sizes
        self.step = step
        self.root = root
        self.sift_window = sift_window
        self.pyramid_levels = pyramid_levels
        self.image_size = image_size
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state

    @property
    def image_request(self) -> tuple[str, tuple[int, int]]:
        """What the decoder hands `transform`: grey images of image_size × image_size."""
        return "L", (self.image_size, self.image_size)

    def local_descriptors(self, images: Any) -> Chunk:
        """The SIFT descriptors of a batch of images, all rows together: {"sift": (n·P, 128)}."""
        self.check_params()
        images = check_images(images, "L", self.image_size, "BagOfWords")
        return {CHANNEL: self._sift(images).reshape(-1, 128)}

    def fit(self, images: Any, y: Any = None) -> BagOfWords:
        """Learn the dictionary from the dense SIFT of ``images`` (n, image_size, image_size)."""
        chunk = self.local_descriptors(images)
        return self.fit_chunks(InMemoryChunks([chunk]), len(chunk[CHANNEL]))

    def fit_chunks(self, chunks: DescriptorChunks, n_descriptors: int) -> BagOfWords:
        """Learn the dictionary from local descriptors in ``chunks`` (`local_descriptors` of
        batches of images), ``n_descriptors`` in all."""
        self.check_params()
        result = fit_kmeans(
            chunks,
            CHANNEL,
            None,
            int(self.n_words),
            n_descriptors=n_descriptors,
            max_iter=int(self.max_iter),
            tol=float(self.tol),
            random_state=self.random_state,
        )
        self.words_ = result.centres.astype(np.float32)
        self.n_iter_ = result.n_iter
        self.n_features_out_ = int(self.n_words) * sum(4**level for level in self._levels())
        return self

    def transform(self, images: Any) -> np.ndarray:
        """Histograms of grey uint8 images (n, image_size, image_size): float32 rows summing
        to 1."""
        check_is_fitted(self)
        images = check_images(images, "L", self.image_size, "BagOfWords")
        descriptors = self._sift(images)
        n, n_patches, _ = descriptors.shape
        words = nearest(descriptors.reshape(-1, 128), self.words_).reshape(n, n_patches)
        K = len(self.words_)
        grid = patch_grid(self.image_size, self.image_size, tuple(self.patch_sizes), self.step)
        centres = patch_centres(grid)
        levels = self._levels()
        top = len(levels) - 1
        parts = []
        for level in levels:
            cells = 2**level
            # The cell of each patch centre: floor(centre · cells / size), centres in [0, size).
            row, col = (np.floor((centres[:, a] + 0.5) * cells / self.image_size) for a in (0, 1))
            cell = (row * cells + col).astype(np.int64)
            index = (np.arange(n)[:, None] * cells**2 + cell[None, :]) * K + words
            counts = np.bincount(index.ravel(), minlength=n * cells**2 * K)
            weight = 1 / 2**top if level == 0 else 1 / 2 ** (top - level + 1)
            parts.append(counts.reshape(n, -1) * (weight / n_patches))
        histogram = np.hstack(parts)
        histogram /= histogram.sum(axis=1, keepdims=True)
        return histogram.astype(np.float32)

    def _levels(self) -> range:
        return range(int(self.pyramid_levels))

    def _sift(self, images: np.ndarray) -> np.ndarray:
        sift = DenseSift(tuple(self.patch_sizes), self.step, self.root, self.sift_window).fit()
        return sift.transform(np.asarray(images, np.uint8))

    def check_params(self) -> None:
        """Refuse parameters no image can be described with, before any image is read."""
        check_grid_params(self.patch_sizes, self.step, "BagOfWords", self.image_size)
        check_window(self.sift_window, "BagOfWords", "sift_window")
        if not isinstance(self.n_words, int | np.integer) or self.n_words < 1:
            raise ValueError(f"BagOfWords: n_words must be an integer >= 1, got {self.n_words!r}")
        levels = self.pyramid_levels
        if not isinstance(levels, int | np.integer) or not 1 <= levels <= 4:
            raise ValueError(f"BagOfWords: pyramid_levels must be in [1, 4], got {levels!r}")
