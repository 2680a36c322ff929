"""Dense SIFT: the patch OpenCV describes at size = patch / 6, the grid, RootSIFT, bad input."""

import cv2
import numpy as np
import pytest

from imgscale.pipeline.describe import DenseSift
from imgscale.pipeline.describe.dense_sift import patch_centres, patch_grid

from .conftest import photos


def opencv_descriptor(image: np.ndarray, y: float, x: float, size: float) -> np.ndarray:
    """OpenCV's SIFT of one upright keypoint, the reference."""
    keypoints, descriptors = cv2.SIFT_create().compute(image, [cv2.KeyPoint(x, y, size, 0)])
    assert len(keypoints) == 1
    return descriptors[0]


def test_a_patch_is_described_by_its_pixels_at_size_patch_over_six():
    # A 16-px patch at 24..39 of a noise image: pixels further than half a cell (2 px) and the
    # σ = 1.6 blur (3σ ≈ 5 px) from it leave the descriptor as it is; zeroing the patch's own
    # outer ring (inside it) changes it a lot. So size = patch / 6 describes the patch.
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (64, 64), dtype=np.uint8)
    sift = DenseSift(patch_sizes=(16,), step=8).fit()
    grid = patch_grid(64, 64, (16,), 8)
    at = int(np.flatnonzero((grid[:, 0] == 24) & (grid[:, 1] == 24))[0])
    base = sift.transform(image[None])[0, at]

    outside = image.copy()
    keep = np.zeros_like(image, bool)
    keep[24 - 7 : 40 + 7, 24 - 7 : 40 + 7] = True
    outside[~keep] = 0
    assert np.abs(sift.transform(outside[None])[0, at] - base).max() < 2 / 512

    inside = image.copy()
    inside[24:40, 24:40][:3] = 0
    assert np.abs(sift.transform(inside[None])[0, at] - base).max() > 40 / 512


def test_descriptors_are_opencvs_at_the_grid_centres_unit_l2():
    image = photos(64, grey=True)[0]
    descriptors = DenseSift(patch_sizes=(16, 24), step=8).fit().transform(image[None])[0]
    grid = patch_grid(64, 64, (16, 24), 8)
    assert descriptors.shape == (len(grid), 128) == (7 * 7 + 6 * 6, 128)
    for row in (0, 20, 48, 49, 84):
        top, left, size = grid[row]
        y, x = top + (size - 1) / 2, left + (size - 1) / 2
        expected = opencv_descriptor(image, y, x, size / 6) / 512
        np.testing.assert_allclose(descriptors[row], expected, rtol=0, atol=1e-7)
    np.testing.assert_allclose(np.linalg.norm(descriptors, axis=1), 1, atol=0.01)


def test_the_grid_is_every_step_pixels_wholly_inside_the_image():
    grid = patch_grid(40, 32, (16,), 8)
    assert sorted(set(grid[:, 0])) == [0, 8, 16, 24] and sorted(set(grid[:, 1])) == [0, 8, 16]
    np.testing.assert_array_equal(patch_centres(grid[:1]), [[7.5, 7.5]])


def test_rootsift_is_the_square_root_of_the_l1_normalised_descriptor():
    images = photos(48, grey=True)
    plain = DenseSift().fit().transform(images).astype(np.float64)
    root = DenseSift(root=True).fit().transform(images)
    expected = np.sqrt(plain / plain.sum(axis=2, keepdims=True))
    np.testing.assert_allclose(root, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(root, axis=2), 1, rtol=1e-5)


def test_an_image_smaller_than_one_patch_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"12×12 pixels are smaller than one 16-pixel patch") as e:
        DenseSift().fit().transform(np.zeros((1, 12, 12), np.uint8))
    assert "\n" not in str(e.value)


def test_colour_images_and_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="grey uint8 images"):
        DenseSift().fit().transform(np.zeros((1, 32, 32, 3), np.uint8))
    with pytest.raises(ValueError, match="patch_sizes"):
        DenseSift(patch_sizes=(2,)).fit()
    with pytest.raises(ValueError, match="step"):
        DenseSift(step=0).fit()


def test_opencv_describes_on_one_thread_and_its_setting_is_restored(monkeypatch):
    # Every worker process has OpenCV's pool of a thread per core; the tasks already use them.
    threads_seen = []
    create = cv2.SIFT_create

    class Recording:
        def __init__(self):
            self.sift = create()

        def compute(self, image, keypoints):
            threads_seen.append(cv2.getNumThreads())
            return self.sift.compute(image, keypoints)

    monkeypatch.setattr(cv2, "SIFT_create", Recording)
    before = cv2.getNumThreads()
    cv2.setNumThreads(2)
    try:
        DenseSift().fit().transform(photos(32, grey=True))
        assert threads_seen == [1, 1]  # two photos
        assert cv2.getNumThreads() == 2
    finally:
        cv2.setNumThreads(before)


def test_a_wider_window_is_opencvs_descriptor_at_window_times_patch_over_six():
    rng = np.random.default_rng(3)
    image = rng.integers(0, 256, (64, 64), dtype=np.uint8)
    descriptors = DenseSift(patch_sizes=(16,), step=8, window=2.25).fit().transform(image[None])
    centres = patch_centres(patch_grid(64, 64, (16,), 8))
    for at in (0, 24, 48):
        y, x = centres[at]
        expected = opencv_descriptor(image, float(y), float(x), 6.0) / 512
        np.testing.assert_allclose(descriptors[0, at], expected, atol=1e-6)
    # Pixels 8 px beyond the patch, unseen by the patch alone, change the wider descriptor.
    at = 24
    top, left = patch_grid(64, 64, (16,), 8)[at, :2]
    outside = image.copy()
    keep = np.zeros_like(image, bool)
    keep[top - 7 : top + 16 + 7, left - 7 : left + 16 + 7] = True
    outside[~keep] = 0
    changed = DenseSift(window=2.25).fit().transform(outside[None])[0, at]
    assert np.abs(changed - descriptors[0, at]).max() > 20 / 512


@pytest.mark.parametrize("window", [0, -1.0, True, "2", 20])
def test_a_window_outside_its_range_is_refused(window):
    with pytest.raises(ValueError, match="window"):
        DenseSift(window=window).fit()
