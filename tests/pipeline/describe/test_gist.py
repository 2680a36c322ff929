"""Gist against the dense float64 transcription of LMgist (createGabor, prefilt, gistGabor, downN)
shared with the images benchmark (imgscale.bench.lmgist)."""

import pickle

import numpy as np
import pytest

from imgscale.bench.lmgist import reference_gist
from imgscale.pipeline.describe import DESCRIPTORS, Gist

from .conftest import photos, scene


def relative_error(a, b):
    return np.abs(a - b).max() / np.abs(b).max()


@pytest.fixture(params=["matrices", "ffts"])
def gabor_form(request, monkeypatch):
    """Runs a test with each form of the Gabor stage: matrix products (small images, the
    default up to 32 MiB of matrices) and FFTs (forced by allowing no matrices)."""
    if request.param == "ffts":
        monkeypatch.setattr("imgscale.pipeline.describe.gist._MATRIX_BYTES", 0)
    return request.param


def test_tiny_gist_matches_the_dense_reference(grey_images, gabor_form):
    gist = DESCRIPTORS["gist-tiny"]().fit()
    got = gist.transform(grey_images)
    for image, row in zip(grey_images, got, strict=True):
        assert relative_error(row, reference_gist(image, (8, 8, 4), 4)) < 1e-4


def test_gist_matches_the_dense_reference_at_other_settings(gabor_form):
    """Odd block boundaries (48/5), a small boundary extension and another prefilter cut-off."""
    images = np.stack([scene(48, 3), photos(48, grey=True)[1]])
    gist = Gist((6, 4, 2), n_blocks=5, image_size=48, prefilter_fc=3, boundary_extension=8)
    got = gist.fit().transform(images)
    for image, row in zip(images, got, strict=True):
        want = reference_gist(image, (6, 4, 2), 5, fc=3, boundary=8)
        assert relative_error(row, want) < 1e-4


def test_default_gist_matches_the_dense_reference_at_128():
    images = np.stack([scene(128, 4), photos(128, grey=True)[0]])
    got = Gist().fit().transform(images)
    for image, row in zip(images, got, strict=True):
        assert relative_error(row, reference_gist(image, (8, 8, 8, 8), 4)) < 1e-4


def test_shapes_and_dtype_of_the_named_settings():
    assert DESCRIPTORS["gist"]().fit().n_features_out_ == 512
    assert DESCRIPTORS["gist-tiny"]().fit().n_features_out_ == 320
    assert DESCRIPTORS["gist"]().image_request == ("L", (128, 128))
    assert DESCRIPTORS["gist-tiny"]().image_request == ("L", (32, 32))
    out = DESCRIPTORS["gist-tiny"]().fit().transform(np.zeros((3, 32, 32), np.uint8))
    assert out.shape == (3, 320) and out.dtype == np.float32
    empty = DESCRIPTORS["gist"]().fit().transform(np.zeros((0, 128, 128), np.uint8))
    assert empty.shape == (0, 512) and empty.dtype == np.float32


def test_a_constant_image_has_the_zero_descriptor(gabor_form):
    images = np.full((2, 32, 32), 77, np.uint8)
    assert not DESCRIPTORS["gist-tiny"]().fit().transform(images).any()


def test_the_descriptor_ignores_brightness_and_contrast(grey_images):
    """Images are scaled to [0, 255] by their own range first."""
    gist = DESCRIPTORS["gist-tiny"]().fit()
    images = grey_images.astype(np.float32)
    assert np.allclose(gist.transform(images / 4 + 10), gist.transform(images), rtol=1e-4)


def test_a_batch_equals_its_images_one_by_one(grey_images, gabor_form, monkeypatch):
    """Also across the slices a large batch is cut into (here 4 and 2 images)."""
    slice_bytes = 4 * 8 * 96 * 96 if gabor_form == "ffts" else 2 * 8 * 20 * 96 * 32
    monkeypatch.setattr("imgscale.pipeline.describe.gist._SLICE_BYTES", slice_bytes)
    gist = DESCRIPTORS["gist-tiny"]().fit()
    batch = gist.transform(grey_images)
    one_by_one = np.concatenate([gist.transform(image[None]) for image in grey_images])
    np.testing.assert_allclose(batch, one_by_one, rtol=1e-5, atol=1e-6)


def test_transposing_the_image_maps_the_orientations_as_the_filters_say(grey_images, gabor_form):
    """Transposing swaps fx and fy (angle t ↦ π/2 − t), so filter j, centred on the angle
    −πj/8, sees what filter k = 12 − j saw: for j = 5, 6, 7 that is filter 7, 6, 5 of the bank,
    exactly, with the block grid transposed. (For j ≤ 4, k ≥ 8 is the mirror G(−f) of filter
    k − 8, which gives the same modulus only off the Nyquist row and column: LMgist's grid has
    −n/2 and no +n/2.)"""
    gist = Gist((8,), image_size=32).fit()
    rows = gist.transform(grey_images).reshape(-1, 8, 4, 4)
    transposed = gist.transform(grey_images.transpose(0, 2, 1)).reshape(-1, 8, 4, 4)
    np.testing.assert_allclose(
        transposed[:, [5, 6, 7]], rows[:, [7, 6, 5]].transpose(0, 1, 3, 2), rtol=1e-3
    )


def test_images_of_another_shape_are_refused():
    gist = DESCRIPTORS["gist-tiny"]().fit()
    with pytest.raises(ValueError, match=r"shape \(n, 32, 32\), got shape \(2, 32, 32, 3\)"):
        gist.transform(np.zeros((2, 32, 32, 3), np.uint8))
    with pytest.raises(ValueError, match=r"shape \(n, 32, 32\), got shape \(2, 64, 64\)"):
        gist.transform(np.zeros((2, 64, 64), np.uint8))


@pytest.mark.parametrize(
    "params",
    [
        {"image_size": 31},
        {"orientations_per_scale": ()},
        {"orientations_per_scale": (8, 0)},
        {"n_blocks": 0},
        {"prefilter_fc": 0},
        {"boundary_extension": -1},
    ],
)
def test_bad_parameters_are_refused_at_fit(params):
    with pytest.raises(ValueError, match="Gist"):
        Gist(**params).fit()


def test_parameters_are_stored_unchanged_and_the_filters_are_not_pickled(grey_images):
    gist = DESCRIPTORS["gist-tiny"]().fit()
    before = gist.transform(grey_images)
    assert gist.get_params()["orientations_per_scale"] == (8, 8, 4)
    copy = pickle.loads(pickle.dumps(gist))
    assert len(pickle.dumps(gist)) < 10_000
    np.testing.assert_array_equal(copy.transform(grey_images), before)
