"""Resize-crop of every image size to every descriptor's working size, against a reference box
computed here in exact rational arithmetic."""

from __future__ import annotations

import io
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from imgscale.pipeline.describe import DESCRIPTORS
from imgscale.storage import ImageRequest, decode_image
from imgscale.storage.images.decode import crop_box

# The built-in descriptors' working sizes, fit-features' default --image-size for bow and
# fisher, and an ImageNet CNN's input (onnx:), all square; and two oblong requests.
WORKING_SIZES = sorted(
    {factory().image_request[1] for factory in DESCRIPTORS.values()}
    | {(128, 128), (224, 224), (32, 64), (64, 32)}
)
SIDES = st.integers(8, 5000)


def exact_box(image_size: tuple[int, int], size: tuple[int, int]) -> tuple[Fraction, ...]:
    """LMgist's imresizecrop as a box: scale s = max(h / H, w / W) makes the image cover the
    request, whose centred (w / s) × (h / s) window of the image is kept."""
    (image_height, image_width), (height, width) = image_size, size
    scale = max(Fraction(height, image_height), Fraction(width, image_width))
    box_width, box_height = width / scale, height / scale
    left, top = (image_width - box_width) / 2, (image_height - box_height) / 2
    return (left, top, left + box_width, top + box_height)


def reference_resize_crop(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    box = tuple(float(v) for v in exact_box(image.shape[:2], size))
    resized = Image.fromarray(image).resize(size[::-1], Image.Resampling.BILINEAR, box=box)
    return np.asarray(resized)


@settings(max_examples=500, deadline=None)
@given(SIDES, SIDES, st.sampled_from(WORKING_SIZES))
def test_the_box_is_the_exact_centred_cover_and_never_leaves_the_image(height, width, size):
    box = crop_box((height, width), size)
    left, top, right, bottom = box
    assert 0 <= left <= right <= width and 0 <= top <= bottom <= height
    exact = exact_box((height, width), size)
    assert all(
        abs(Fraction(got) - want) <= Fraction(1, 10**9)
        for got, want in zip(box, exact, strict=True)
    )


@pytest.mark.parametrize("size", WORKING_SIZES)
def test_every_shape_of_one_side_up_to_5000_gets_a_box_inside_it(size):
    """The sweep that found negative offsets (52 of 790 common photo shapes), over every width
    with the common heights of photos and their sideways twins."""
    for height in (107, 427, 480, 683, 768, 1080, 2448, 3024, 3456, 4000):
        for width in range(8, 5001):
            for shape in ((height, width), (width, height)):
                left, top, right, bottom = crop_box(shape, size)
                assert 0 <= left and 0 <= top and right <= shape[1] and bottom <= shape[0], shape


@settings(max_examples=60, deadline=None)
@given(st.integers(8, 5000), st.integers(8, 400), st.booleans(), st.sampled_from(WORKING_SIZES))
def test_decoding_any_size_serves_the_reference_resize_crop(long, short, tall, size):
    shape = (long, short) if tall else (short, long)
    rng = np.random.default_rng(long * 7919 + short)
    image = rng.integers(0, 256, (*shape, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, "PNG", compress_level=0)
    (rgb,) = decode_image(buffer.getvalue(), [ImageRequest("RGB", size)])
    np.testing.assert_array_equal(rgb, reference_resize_crop(image, size))


@pytest.mark.parametrize("shape", [(107, 142), (427, 640), (142, 107), (640, 427)])
@pytest.mark.parametrize("size", WORKING_SIZES)
def test_ordinary_photo_sizes_decode_for_every_working_size(shape, size):
    """142×107 and 640×427 JPEGs stopped every ingest with "box offset can't be negative"."""
    image = np.random.default_rng(0).integers(0, 256, (*shape, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, "JPEG", quality=95)
    grey, rgb = decode_image(
        buffer.getvalue(), [ImageRequest("L", size), ImageRequest("RGB", size)]
    )
    assert grey.shape == size and rgb.shape == (*size, 3)
