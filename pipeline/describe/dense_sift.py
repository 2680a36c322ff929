"""SIFT descriptors of square patches on a regular grid (dense SIFT), through OpenCV.

OpenCV's SIFT describes a keypoint of size s by a 4×4 grid of cells 1.5·s pixels wide: a window
of 6·s pixels around the keypoint (``calcSIFTDescriptor``: bin width SIFT_DESCR_SCL_FCTR = 3 times
the scale s/2). A patch of p pixels is therefore described with s = p / 6; pixels further out
reach the edge cells only through the bilinear weights of half a cell and the σ = 1.6 blur of
the base image (tests/pipeline/describe/test_dense_sift.py measures it).

A descriptor may look past its patch: with ``window`` w the keypoint's size is w·p / 6, a window
of w·p pixels centred on the patch, its 4×4 cells w·p / 4 pixels wide. Wider windows describe
dense grids better than the patch alone: on CIFAR-10 upsampled to 64×64 (16-pixel patches every
8, a 400-word dictionary, an exact intersection-kernel SVM) w = 2.25 (OpenCV size 6) scored 10
points above w = 1, as it did on a set of natural scenes (docs/findings/cifar10-bow-fisher.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import cv2
import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from imgscale.pipeline.describe._images import check_image_size

# OpenCV's descriptor is unit-L2 scaled by SIFT_INT_DESCR_FCTR = 512 (then clipped to 255).
_OPENCV_SCALE = np.float32(1 / 512)


@contextmanager
def _one_opencv_thread() -> Iterator[None]:
    """OpenCV on one thread meanwhile (as ``threadpool_limits`` does for BLAS).

    Images are spread over the cores by the tasks that describe them; OpenCV's own pool (a
    thread per core in every worker process, which Dask's OMP_NUM_THREADS=1 does not reach)
    would spread each image's keypoints over the same cores again.
    """
    threads = cv2.getNumThreads()
    cv2.setNumThreads(1)
    try:
        yield
    finally:
        cv2.setNumThreads(threads)


def patch_grid(height: int, width: int, patch_sizes: tuple[int, ...], step: int) -> np.ndarray:
    """Patches of each size every ``step`` pixels, wholly inside a height × width image, as rows
    (top, left, size) (int64, sizes in the order given, then row-major)."""
    if min(patch_sizes) > min(height, width):
        raise ValueError(
            f"images of {height}×{width} pixels are smaller than one {min(patch_sizes)}-pixel "
            "patch; expected images at least as large as the patch"
        )
    parts = []
    for size in patch_sizes:
        tops = np.arange(0, height - size + 1, step)
        lefts = np.arange(0, width - size + 1, step)
        top, left = np.meshgrid(tops, lefts, indexing="ij")
        parts.append(np.stack([top.ravel(), left.ravel(), np.full(top.size, size)], axis=1))
    return np.concatenate(parts).astype(np.int64)


def patch_centres(grid: np.ndarray) -> np.ndarray:
    """(y, x) centre of each patch of `patch_grid`, in pixel coordinates (pixel i spans i ± ½)."""
    return grid[:, :2] + (grid[:, 2:] - 1) / 2


def grid_keypoints(grid: np.ndarray, window: float = 1.0) -> np.ndarray:
    """Each patch of `patch_grid` as the OpenCV keypoint that describes it: rows of (x, y, size),
    size = window · patch / 6 (the module's note)."""
    centres = patch_centres(grid)
    return np.column_stack([centres[:, 1], centres[:, 0], window * grid[:, 2] / 6])


def check_window(window: Any, what: str, name: str = "window") -> float:
    """The SIFT window (in patch sides) as a float, after refusing one outside (0, 16]."""
    if isinstance(window, bool) or not isinstance(window, int | float | np.number):
        raise ValueError(f"{what}: {name} must be a number in (0, 16], got {window!r}")
    if not 0 < window <= 16:
        raise ValueError(f"{what}: {name} must be in (0, 16] patch sides, got {window!r}")
    return float(window)


def check_grid_params(
    patch_sizes: Any, step: Any, what: str, image_size: Any = None
) -> tuple[int, ...]:
    """The patch sizes as a tuple of ints, after refusing a grid that no image_size × image_size
    image (when given) can hold."""
    sizes = tuple(patch_sizes)
    if not sizes or not all(isinstance(s, int | np.integer) and s >= 4 for s in sizes):
        raise ValueError(f"{what}: patch_sizes must be integers >= 4, got {patch_sizes!r}")
    if not isinstance(step, int | np.integer) or isinstance(step, bool) or step < 1:
        raise ValueError(f"{what}: step must be an integer >= 1, got {step!r}")
    if image_size is None:
        return tuple(int(s) for s in sizes)
    size = check_image_size(image_size, what)
    if max(sizes) > size:
        raise ValueError(
            f"{what}: image_size {size} is smaller than one {max(sizes)}-pixel patch; "
            "expected image_size >= every patch size"
        )
    return tuple(int(s) for s in sizes)


class DenseSift(TransformerMixin, BaseEstimator):
    """128-D SIFT of every patch of a regular grid: gradient orientation histograms, 8 bins in
    each cell of a 4×4 grid over the patch, upright (no dominant orientation), never a detector.

    Paper 000 §4 (after Lazebnik et al. 2006): 16×16 patches every 8 pixels. Several patch sizes
    describe the image at several scales (paper 002 §5.1). With ``root=True`` each descriptor is
    L1-normalised and square-rooted (RootSIFT, Arandjelović & Zisserman 2012), which makes the
    Euclidean distance the Hellinger kernel; else it is OpenCV's unit-L2 descriptor (clipped at
    0.2 and renormalised, Lowe 2004 §6.1).

    Parameters
    ----------
    patch_sizes : tuple of int, default=(16,)
        Sides of the square patches, in pixels of the image.
    step : int, default=8
        Grid spacing in pixels, for every patch size.
    root : bool, default=False
        RootSIFT.
    window : float, default=1.0
        Side of the window each descriptor covers, in patch sides, centred on the patch: 1 is
        the patch alone; ``imgscale fit-features`` uses 2.25 (the module's note).

    Attributes
    ----------
    n_features_out_ : int
        128.

    References
    ----------
    Lowe, "Distinctive image features from scale-invariant keypoints", IJCV 60(2), 2004.
    Lazebnik, Schmid & Ponce, "Beyond bags of features", CVPR 2006 (dense grid, §5).
    """

    def __init__(
        self,
        patch_sizes: tuple[int, ...] = (16,),
        step: int = 8,
        root: bool = False,
        window: float = 1.0,
    ):
        self.patch_sizes = patch_sizes
        self.step = step
        self.root = root
        self.window = window

    def fit(self, images: Any = None, y: Any = None) -> DenseSift:
        """Check the parameters; nothing is learned."""
        check_grid_params(self.patch_sizes, self.step, "DenseSift")
        check_window(self.window, "DenseSift")
        self.n_features_out_ = 128
        return self

    def transform(self, images: Any) -> np.ndarray:
        """Descriptors of grey uint8 images (n, h, w): float32 (n, patches, 128), patches in
        `patch_grid` order."""
        check_is_fitted(self)
        images = np.asarray(images)
        if images.ndim != 3 or images.dtype != np.uint8:
            raise ValueError(
                f"DenseSift expects grey uint8 images (n, h, w), got {images.dtype} "
                f"of shape {images.shape}"
            )
        grid = patch_grid(images.shape[1], images.shape[2], tuple(self.patch_sizes), self.step)
        points = grid_keypoints(grid, float(self.window))
        keypoints = [cv2.KeyPoint(float(x), float(y), float(size), 0) for x, y, size in points]
        sift = cv2.SIFT_create()
        out = np.empty((len(images), len(grid), 128), np.float32)
        with _one_opencv_thread():
            for i, image in enumerate(images):
                found, descriptors = sift.compute(image, keypoints)
                if len(found) != len(keypoints):  # OpenCV keeps them all; else misaligned
                    raise RuntimeError(f"OpenCV described {len(found)} of {len(keypoints)} patches")
                out[i] = descriptors
        if self.root:
            out /= np.maximum(out.sum(axis=2, keepdims=True), np.float32(1e-12))
            np.sqrt(out, out=out)
        else:
            out *= _OPENCV_SCALE
        return out
