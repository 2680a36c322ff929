"""decode_image against Pillow as the reference decoder, on files the tests write."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
import simplejpeg
from PIL import Image, ImageOps

from imgscale.storage import ImageRejected, ImageRequest, decode_image

RGB = ImageRequest("RGB")
GREY = ImageRequest("L")
JPEG_TOLERANCE = 3  # two libjpeg-turbo builds, or DCT scaling against a resize, differ this much
QUALITY_95_ERROR = 8  # what JPEG at quality 95 loses of `photo`'s pixels (measured: 4)


def photo(height: int, width: int) -> np.ndarray:
    """A smooth colour image (gradients and slow waves): JPEG keeps it within a few levels."""
    y, x = np.mgrid[0:height, 0:width] / max(height, width)
    channels = [x, y, 0.5 + 0.4 * np.sin(6 * x) * np.cos(4 * y)]
    return (np.stack(channels, axis=-1) * 255).round().astype(np.uint8)


def encode(image: Image.Image | np.ndarray, fmt: str, **options) -> bytes:
    if isinstance(image, np.ndarray):
        image = Image.fromarray(image)
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def pillow(data: bytes, mode: str = "RGB") -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert(mode))


def max_error(a: np.ndarray, b: np.ndarray) -> int:
    assert a.shape == b.shape
    return int(np.abs(a.astype(int) - b.astype(int)).max())


def rejection(data: bytes, **options) -> str:
    with pytest.raises(ImageRejected) as caught:
        decode_image(data, [RGB], **options)
    reason = str(caught.value)
    assert "\n" not in reason
    return reason


def test_a_jpeg_decodes_as_pillow_decodes_it():
    data = encode(photo(48, 64), "JPEG", quality=90)
    (out,) = decode_image(data, [RGB])
    assert out.dtype == np.uint8
    assert max_error(out, pillow(data)) <= JPEG_TOLERANCE


def test_a_greyscale_jpeg_decodes_to_its_grey_values_in_both_modes():
    data = encode(Image.fromarray(photo(40, 40)).convert("L"), "JPEG", quality=90)
    grey, rgb = decode_image(data, [GREY, RGB])
    assert max_error(grey, pillow(data, "L")) <= JPEG_TOLERANCE
    np.testing.assert_array_equal(rgb, np.repeat(grey[:, :, None], 3, axis=2))


@pytest.mark.parametrize(
    ("fmt", "options"),
    [("PNG", {}), ("BMP", {}), ("TIFF", {}), ("WEBP", {"lossless": True}), ("GIF", {})],
)
def test_each_lossless_format_decodes_exactly_as_pillow_decodes_it(fmt, options):
    data = encode(photo(30, 20), fmt, **options)
    (out,) = decode_image(data, [RGB])
    np.testing.assert_array_equal(out, pillow(data))


def test_the_format_comes_from_the_bytes_not_a_name():
    png = encode(photo(20, 20), "PNG")
    (out,) = decode_image(png, [RGB])  # no name is given: nothing but the bytes can tell
    np.testing.assert_array_equal(out, photo(20, 20))


def test_grey_is_pillows_itu_601_luma_of_the_rgb_image():
    data = encode(photo(24, 36), "PNG")
    (out,) = decode_image(data, [GREY])
    np.testing.assert_array_equal(out, pillow(data, "L"))


def test_a_reduced_jpeg_decode_matches_a_full_decode_resized():
    data = encode(photo(256, 256), "JPEG", quality=95)
    (out,) = decode_image(data, [ImageRequest("RGB", (32, 32))])
    full = Image.open(io.BytesIO(data)).convert("RGB")
    reference = np.asarray(full.resize((32, 32), Image.Resampling.BILINEAR))
    assert max_error(out, reference) <= JPEG_TOLERANCE


def test_a_large_jpeg_is_never_decoded_at_full_size(monkeypatch):
    decoded_shapes = []
    decode_jpeg = simplejpeg.decode_jpeg

    def spy(*args, **kwargs):
        pixels = decode_jpeg(*args, **kwargs)
        decoded_shapes.append(pixels.shape[:2])
        return pixels

    monkeypatch.setattr(simplejpeg, "decode_jpeg", spy)
    data = encode(photo(512, 384), "JPEG")
    decode_image(data, [ImageRequest("L", (64, 48)), ImageRequest("RGB", (32, 32))])
    assert decoded_shapes == [(64, 48)]  # the 1/8 DCT scale, the smallest covering both


def resized_then_cropped(image: np.ndarray, scaled: tuple[int, int], size: tuple[int, int]):
    """LMgist's imresizecrop, step by step: resize the whole image, then cut out the centre."""
    whole = np.asarray(Image.fromarray(image).resize(scaled[::-1], Image.Resampling.BILINEAR))
    top, left = (scaled[0] - size[0]) // 2, (scaled[1] - size[1]) // 2
    return whole[top : top + size[0], left : left + size[1]]


def test_resize_crop_covers_the_size_and_keeps_the_centre():
    # 64 × 128: yellow | red | blue | yellow bands of 32 columns. Covering 32 × 32 scales by 1/2
    # (32 × 64) and the centre crop keeps the red and blue bands.
    bands = [(255, 255, 0), (255, 0, 0), (0, 0, 255), (255, 255, 0)]
    image = np.concatenate([np.full((64, 32, 3), colour, np.uint8) for colour in bands], axis=1)
    (out,) = decode_image(encode(image, "PNG"), [ImageRequest("RGB", (32, 32))])
    assert out.shape == (32, 32, 3)
    assert (out[:, 1:15] == (255, 0, 0)).all()
    assert (out[:, 17:31] == (0, 0, 255)).all()
    assert max_error(out, resized_then_cropped(image, (32, 64), (32, 32))) <= 1


def test_a_portrait_image_is_cropped_top_and_bottom():
    # 120 × 40: black rows 0-39, white rows 40-79, black rows 80-119; 20 × 20 keeps the white.
    image = np.zeros((120, 40), np.uint8)
    image[40:80] = 255
    (out,) = decode_image(encode(image, "PNG"), [ImageRequest("L", (20, 20))])
    assert out.shape == (20, 20)
    assert (out[1:-1] == 255).all()
    assert max_error(out, resized_then_cropped(image, (60, 20), (20, 20))) <= 1


def test_a_request_of_another_aspect_ratio_is_resized_then_cropped():
    image = photo(90, 120)
    (out,) = decode_image(encode(image, "PNG"), [ImageRequest("RGB", (30, 20))])
    assert max_error(out, resized_then_cropped(image, (30, 40), (30, 20))) <= 1


def test_several_requests_come_back_in_order_with_their_modes_and_sizes():
    data = encode(photo(60, 80), "PNG")
    out = decode_image(data, [ImageRequest("L", (16, 16)), RGB, ImageRequest("RGB", (30, 10))])
    assert [a.shape for a in out] == [(16, 16), (60, 80, 3), (30, 10, 3)]


def test_a_jpeg_taken_sideways_is_decoded_upright():
    upright = photo(48, 64)
    stored = Image.fromarray(upright).transpose(Image.Transpose.ROTATE_90)  # 64 × 48 on disk
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90° clockwise to view"
    data = encode(stored, "JPEG", quality=95, subsampling=0, exif=exif.tobytes())
    (out,) = decode_image(data, [RGB])
    assert max_error(out, upright) <= QUALITY_95_ERROR


@pytest.mark.parametrize("orientation", range(1, 9))
def test_each_exif_orientation_is_applied_as_pillows_exif_transpose(orientation):
    exif = Image.Exif()
    exif[0x0112] = orientation
    data = encode(photo(20, 30), "PNG", exif=exif.tobytes())
    (out,) = decode_image(data, [RGB])
    np.testing.assert_array_equal(
        out, np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(data))))
    )


def test_a_sideways_jpeg_is_reduced_to_cover_the_upright_request():
    upright = photo(256, 128)
    exif = Image.Exif()
    exif[0x0112] = 8
    stored = Image.fromarray(upright).transpose(Image.Transpose.ROTATE_270)  # 128 × 256 on disk
    data = encode(stored, "JPEG", quality=95, exif=exif.tobytes())
    (out,) = decode_image(data, [ImageRequest("RGB", (64, 32))])
    reference = np.asarray(Image.fromarray(upright).resize((32, 64), Image.Resampling.BILINEAR))
    assert max_error(out, reference) <= QUALITY_95_ERROR


# --- awkward and bad images -------------------------------------------------------------------


def test_an_empty_file_is_rejected():
    assert rejection(b"") == "empty file"


def test_html_saved_as_jpg_is_rejected_naming_its_start():
    page = b"<!DOCTYPE html><html><body>Not found</body></html>"
    assert rejection(page) == "not an image (starts with '<!DOCTYPE html><')"


def test_a_truncated_jpeg_is_rejected():
    data = encode(np.random.default_rng(0).integers(0, 256, (64, 64, 3), np.uint8), "JPEG")
    assert rejection(data[: len(data) * 2 // 3]) == "truncated JPEG"


def test_a_jpeg_with_corrupt_entropy_data_is_rejected():
    data = bytearray(
        encode(np.random.default_rng(1).integers(0, 256, (64, 64, 3), np.uint8), "JPEG")
    )
    middle = len(data) // 2
    data[middle : middle + 4] = b"\xff\xd3\xff\xd5"  # restart markers where none belong
    assert rejection(bytes(data)).startswith("corrupt JPEG")


def test_a_truncated_png_is_rejected():
    data = encode(np.random.default_rng(2).integers(0, 256, (64, 64, 3), np.uint8), "PNG")
    assert rejection(data[: len(data) // 2]).startswith("corrupt PNG")


def test_a_png_with_corrupt_pixel_data_is_rejected():
    data = bytearray(
        encode(np.random.default_rng(3).integers(0, 256, (64, 64, 3), np.uint8), "PNG")
    )
    start = data.index(b"IDAT") + 4
    data[start + 100 : start + 400] = bytes(300)
    assert rejection(bytes(data)).startswith("corrupt PNG")


def test_a_cmyk_jpeg_with_the_adobe_marker_is_inverted_and_converted_to_rgb():
    colour = photo(32, 32)
    data = encode(Image.fromarray(colour).convert("CMYK"), "JPEG", quality=95)
    assert b"Adobe" in data  # libjpeg marks CMYK as Photoshop does: inverted samples
    (out,) = decode_image(data, [RGB])
    assert max_error(out, colour) <= QUALITY_95_ERROR


def test_a_cmyk_jpeg_without_the_adobe_marker_is_read_as_plain_ink():
    colour = photo(32, 32)
    ink = 255 - colour  # C, M, Y = 255 - R, G, B; K = 0
    cmyk = np.concatenate([ink, np.zeros((32, 32, 1), np.uint8)], axis=2)
    # Pillow writes CMYK inverted, so writing the inverse stores plain ink; then drop APP14.
    data = encode(Image.fromarray(255 - cmyk, "CMYK"), "JPEG", quality=95)
    start = data.index(b"\xff\xee")
    length = struct.unpack(">H", data[start + 2 : start + 4])[0]
    data = data[:start] + data[start + 2 + length :]
    assert b"Adobe" not in data
    (out,) = decode_image(data, [RGB])
    assert max_error(out, colour) <= QUALITY_95_ERROR


@pytest.mark.parametrize("fmt", ["PNG", "TIFF"])
def test_16_bit_grey_is_scaled_to_8_bits_not_clipped(fmt):
    values = np.array([[0, 128, 129, 1000, 30000, 65535]] * 8, dtype=np.uint16)
    data = encode(Image.fromarray(values), fmt)
    (out,) = decode_image(data, [GREY], min_side=6)
    expected = [0, 0, 1, 4, 117, 255]  # round(v * 255 / 65535)
    np.testing.assert_array_equal(out, np.array([expected] * 8, np.uint8))


def test_a_palette_png_with_a_transparent_entry_is_composited_on_white():
    image = Image.new("P", (10, 10), 0)
    image.putpalette([0, 0, 0, 200, 30, 40] + [0] * 762)
    image.paste(1, (0, 0, 10, 5))  # top half palette entry 1, bottom half entry 0
    data = encode(image, "PNG", transparency=0)
    (out,) = decode_image(data, [RGB])
    assert (out[:5] == (200, 30, 40)).all()
    assert (out[5:] == (255, 255, 255)).all()


def test_grey_with_alpha_is_composited_on_white():
    grey = np.full((10, 10), 100, np.uint8)
    alpha = np.zeros((10, 10), np.uint8)
    alpha[:, 5:] = 255
    alpha[0, 0] = 51  # one fifth opaque: 100 * 0.2 + 255 * 0.8 = 224
    data = encode(Image.merge("LA", [Image.fromarray(grey), Image.fromarray(alpha)]), "PNG")
    (out,) = decode_image(data, [GREY])
    assert (out[:, 5:] == 100).all()
    assert (out[1:, :5] == 255).all()
    assert abs(int(out[0, 0]) - 224) <= 1


def test_an_animated_gif_gives_its_first_frame():
    frames = [Image.new("RGB", (16, 16), colour) for colour in [(255, 0, 0), (0, 0, 255)]]
    data = encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100)
    assert Image.open(io.BytesIO(data)).n_frames == 2
    (out,) = decode_image(data, [RGB])
    assert (out == (255, 0, 0)).all()


def test_a_1x1_image_is_rejected_as_below_the_minimum_side():
    reason = rejection(encode(Image.new("RGB", (1, 1)), "PNG"))
    assert reason == "image 1×1 is smaller than the 8×8 minimum"


def _png_header_only(width: int, height: int) -> bytes:
    """A PNG declaring width × height RGB whose pixel data is a few bytes of zlib."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body)
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(bytes(64)))
        + chunk(b"IEND", b"")
    )


def test_a_30000_square_png_is_rejected_from_its_header():
    reason = rejection(_png_header_only(30_000, 30_000))
    assert reason == "image 30000×30000 exceeds the 89,478,485-pixel limit"


def test_the_pixel_limit_admits_exactly_max_pixels():
    data = encode(photo(100, 100), "PNG")
    assert decode_image(data, [RGB], max_pixels=10_000)[0].shape == (100, 100, 3)
    assert rejection(data, max_pixels=9_999) == "image 100×100 exceeds the 9,999-pixel limit"
