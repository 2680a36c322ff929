"""Decoding one encoded image into the arrays the descriptors ask for, once per image.

The format is sniffed from the leading bytes, never taken from a file name. JPEG goes through
libjpeg-turbo (simplejpeg) with reduced-size decoding: the DCT is scaled by the smallest factor
n/8 that still leaves the image at least as large as the largest request needs, so a 4000-pixel
photo bound for a 128×128 descriptor never exists at full size. Every other format (PNG, GIF,
WebP, BMP, TIFF) is decoded by Pillow. The header is read first (libjpeg-turbo's for JPEG,
Pillow's for the rest) and the size checked before any pixel buffer is allocated. The EXIF
orientation (parsed by Pillow, for a JPEG only when it has an EXIF segment) is applied to the
decoded array, so a photo taken sideways is described upright (simplejpeg ignores EXIF).

Policy, for each `ImageRequest`:

- ``size=(height, width)`` is "resize-crop", as LMgist's ``imresizecrop``: scale the image
  (keeping its aspect ratio) so that it covers height × width, then keep the centre. The scaling
  and the crop are one Pillow bilinear resize of the centred box: antialiased (the filter widens
  with the reduction), deterministic, and exact to the sub-pixel box instead of rounding the
  scaled size first. ``size=None`` keeps the decoded size.
- ``mode="L"`` is ITU-R 601 luma, as Pillow's ``convert("L")`` computes it from the RGB image;
  ``mode="RGB"`` repeats a grey image's value in three channels. A colour image is decoded to
  RGB whichever modes are asked, so an image's grey array does not depend on which other
  descriptors ran beside it.

What happens to awkward images (anything else that fails raises `ImageRejected` with the reason):

- Empty data, or data that is no image format (text or HTML saved as ``.jpg``): rejected.
- Truncated or corrupt JPEG or PNG: rejected. Both decoders run strict: libjpeg's recoverable
  warnings (premature end of data, corrupt entropy data) are errors, and Pillow is used with
  ``ImageFile.LOAD_TRUNCATED_IMAGES`` at its default, False. A half-decoded image is never
  returned.
- More than ``max_pixels`` pixels (Pillow's ``Image.MAX_IMAGE_PIXELS`` by default, compared the
  same way), or a side shorter than ``min_side``: rejected from the header, before decoding.
- CMYK (and YCCK) JPEG: converted as ``R = (255 - C)(255 - K) / 255`` (Pillow's formula, no
  colour profile). Photoshop writes CMYK inverted and marks such files with an Adobe APP14
  segment; the values are inverted exactly when that segment is present.
- 16-bit greyscale (PNG, TIFF): scaled to 8 bits by value, ``round(v · 255 / 65535)``, never
  clipped. 16-bit RGB PNG: Pillow keeps the high byte of each sample.
- Transparency (RGBA, grey + alpha, a palette with a transparent entry): composited on white.
- Animated GIF or WebP: the first frame.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import simplejpeg
from PIL import (
    BmpImagePlugin,
    ExifTags,
    GifImagePlugin,
    Image,
    ImageFile,
    JpegImagePlugin,
    PngImagePlugin,
    TiffImagePlugin,
    WebPImagePlugin,
)

# Pillow's default Image.MAX_IMAGE_PIXELS: a quarter GiB of 3-channel pixels.
MAX_PIXELS = 1024 * 1024 * 1024 // 4 // 3
MIN_SIDE = 8

MODES = ("L", "RGB")

# Leading bytes of each format but JPEG → Pillow's reader for it. The readers are used directly, not
# through Image.open, so that the size check is ours (an ImageRejected, never Pillow's
# DecompressionBombWarning) and the format cannot come from anything but the bytes.
_JPEG = b"\xff\xd8\xff"
_SIGNATURES: tuple[tuple[bytes, type[ImageFile.ImageFile]], ...] = (
    (b"\x89PNG\r\n\x1a\n", PngImagePlugin.PngImageFile),
    (b"GIF87a", GifImagePlugin.GifImageFile),
    (b"GIF89a", GifImagePlugin.GifImageFile),
    (b"BM", BmpImagePlugin.BmpImageFile),
    (b"II*\x00", TiffImagePlugin.TiffImageFile),
    (b"MM\x00*", TiffImagePlugin.TiffImageFile),
)

# EXIF orientation → how the stored array becomes upright (as ImageOps.exif_transpose does it).
_UPRIGHT = {
    2: lambda a: a[:, ::-1],
    3: lambda a: a[::-1, ::-1],
    4: lambda a: a[::-1],
    5: lambda a: a.swapaxes(0, 1),
    6: lambda a: np.rot90(a, -1),
    7: lambda a: a[::-1, ::-1].swapaxes(0, 1),
    8: lambda a: np.rot90(a, 1),
}
_SIDEWAYS = (5, 6, 7, 8)  # orientations that swap height and width

WHITE = 255


@dataclass(frozen=True)
class ImageRequest:
    """What one descriptor needs from each image: a mode ("L" grey or "RGB") and a working size
    ``(height, width)`` reached by resize-crop, or None for the size as decoded."""

    mode: str
    size: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"image mode {self.mode!r}: expected one of {', '.join(MODES)}")
        if self.size is not None and (len(self.size) != 2 or min(self.size) < 1):
            raise ValueError(f"image size {self.size!r}: expected (height, width), both ≥ 1")


class ImageRejected(ValueError):
    """An image that cannot be decoded as it is; ``str(exc)`` is the reason, in one line."""


def decode_image(
    data: bytes,
    requests: Sequence[ImageRequest],
    *,
    max_pixels: int = MAX_PIXELS,
    min_side: int = MIN_SIDE,
) -> list[np.ndarray]:
    """One uint8 array per request, (h, w) for "L" and (h, w, 3) for "RGB", from one decode.

    Raises `ImageRejected` for an image that is not one, is damaged, too large or too small
    (see the module docstring for what is read and what is rejected).
    """
    if not data:
        raise ImageRejected("empty file")
    if data.startswith(_JPEG):
        stored, orientation = _read_jpeg(data, requests, max_pixels, min_side)
    else:
        header = _open(data)
        _check_size(*header.size, max_pixels, min_side)
        stored = _decode_with_pillow(header)
        orientation = _orientation(header)  # after the pixels: a PNG's eXIf may follow them
    upright = _UPRIGHT[orientation](stored) if orientation in _UPRIGHT else stored
    return _serve(np.ascontiguousarray(upright), requests)


def _serve(pixels: np.ndarray, requests: Sequence[ImageRequest]) -> list[np.ndarray]:
    """A new array per request: ``pixels`` in the request's mode, resize-cropped by Pillow
    where the size differs (each mode converted once)."""
    in_mode = {"L" if pixels.ndim == 2 else "RGB": pixels}
    served = []
    for request in requests:
        if request.mode not in in_mode:
            in_mode[request.mode] = _luma(pixels) if request.mode == "L" else _grey_to_rgb(pixels)
        converted = in_mode[request.mode]
        if request.size in (None, converted.shape[:2]):
            served.append(converted.copy())
        else:
            resized = _resize_crop(Image.fromarray(converted), request.size)
            served.append(np.array(resized))
    return served


def _luma(rgb: np.ndarray) -> np.ndarray:
    """ITU-R 601 luma in Pillow's fixed point (its ``convert("L")``, exactly)."""
    wide = rgb.astype(np.uint32)
    luma = wide[:, :, 0] * 19595 + wide[:, :, 1] * 38470 + wide[:, :, 2] * 7471 + 0x8000
    return (luma >> 16).astype(np.uint8)


def _grey_to_rgb(grey: np.ndarray) -> np.ndarray:
    return np.repeat(grey[:, :, None], 3, axis=2)


def _check_size(width: int, height: int, max_pixels: int, min_side: int) -> None:
    if width * height > max_pixels:
        raise ImageRejected(f"image {width}×{height} exceeds the {max_pixels:,}-pixel limit")
    if min(width, height) < min_side:
        raise ImageRejected(
            f"image {width}×{height} is smaller than the {min_side}×{min_side} minimum"
        )


def _read_jpeg(
    data: bytes, requests: Sequence[ImageRequest], max_pixels: int, min_side: int
) -> tuple[np.ndarray, int]:
    """The stored pixels (grey or RGB, DCT-scaled for ``requests``) and the EXIF orientation.
    libjpeg-turbo reads the size; Pillow parses the EXIF block only when there is one."""
    try:
        height, width, colorspace, _ = simplejpeg.decode_jpeg_header(data)
    except ValueError as exc:
        raise ImageRejected(f"corrupt JPEG header ({_one_line(exc)})") from None
    _check_size(width, height, max_pixels, min_side)
    exif, adobe = _jpeg_markers(data)
    orientation = _jpeg_orientation(data) if exif else 1
    needed = _stored_size_needed(requests, orientation)
    return _decode_jpeg(data, colorspace, adobe, needed), orientation


def _jpeg_orientation(data: bytes) -> int:
    try:
        header = JpegImagePlugin.JpegImageFile(io.BytesIO(data))
    except Exception:  # EXIF Pillow cannot parse is no reason to reject the pixels
        return 1
    return _orientation(header)


def _jpeg_markers(data: bytes) -> tuple[bool, bool]:
    """Whether the segments before the JPEG's first scan hold EXIF (APP1 "Exif") and an Adobe
    APP14 segment."""
    exif = adobe = False
    at = 2
    while at + 4 <= len(data) and data[at] == 0xFF:
        marker = data[at + 1]
        if marker == 0xFF:  # a fill byte before a marker
            at += 1
            continue
        if marker in (0xDA, 0xD9):  # start of scan, end of image
            break
        length = int.from_bytes(data[at + 2 : at + 4], "big")
        body = data[at + 4 : at + 2 + length]
        exif = exif or (marker == 0xE1 and body.startswith(b"Exif\x00\x00"))
        adobe = adobe or (marker == 0xEE and body.startswith(b"Adobe"))
        at += 2 + length
    return exif, adobe


def _open(data: bytes) -> ImageFile.ImageFile:
    """The image's header, parsed by Pillow's reader for the format its bytes announce."""
    reader = _reader(data)
    try:
        return reader(io.BytesIO(data))
    except Exception as exc:  # Pillow raises many types on malformed headers
        raise ImageRejected(f"corrupt {reader.format} header ({_one_line(exc)})") from None


def _reader(data: bytes) -> type[ImageFile.ImageFile]:
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return WebPImagePlugin.WebPImageFile
    for signature, reader in _SIGNATURES:
        if data.startswith(signature):
            return reader
    start = data[:16].decode("latin-1")
    raise ImageRejected(f"not an image (starts with {start!r})")


def _orientation(header: ImageFile.ImageFile) -> int:
    """The EXIF orientation (1 = upright); a damaged EXIF block counts as upright."""
    try:
        value = header.getexif().get(ExifTags.Base.Orientation, 1)
    except Exception:  # EXIF is optional metadata: damage there does not reject the pixels
        return 1
    return value if value in range(1, 9) else 1


def _stored_size_needed(
    requests: Sequence[ImageRequest], orientation: int
) -> tuple[int, int] | None:
    """The least (height, width) of the stored image that serves every request without
    upsampling, or None when a request wants the full size. Covering (H, W) by scaling needs
    both sides of the scaled image ≥ (H, W), so the largest request in each dimension decides."""
    if any(r.size is None for r in requests):
        return None
    height = max(r.size[0] for r in requests)
    width = max(r.size[1] for r in requests)
    return (width, height) if orientation in _SIDEWAYS else (height, width)


def _decode_jpeg(
    data: bytes, colorspace: str, adobe: bool, needed: tuple[int, int] | None
) -> np.ndarray:
    """libjpeg-turbo's decode, DCT-scaled to the smallest size ≥ ``needed``, strict."""
    min_height, min_width = needed or (0, 0)
    output = {"Gray": "GRAY", "CMYK": "CMYK", "YCCK": "CMYK"}.get(colorspace, "RGB")
    try:
        pixels = simplejpeg.decode_jpeg(
            data, output, min_height=min_height, min_width=min_width, strict=True
        )
    except ValueError as exc:
        message = _one_line(exc)
        if "Premature end" in message:
            raise ImageRejected("truncated JPEG") from None
        raise ImageRejected(f"corrupt JPEG ({message})") from None
    if output == "GRAY":
        return pixels[:, :, 0]
    if output == "CMYK":
        return _cmyk_to_rgb(pixels, inverted=adobe)
    return pixels


def _cmyk_to_rgb(cmyk: np.ndarray, *, inverted: bool) -> np.ndarray:
    """RGB = (255 - C)(255 - K) / 255 per channel; ``inverted`` samples hold 255 - ink."""
    paper = cmyk.astype(np.uint16) if inverted else 255 - cmyk.astype(np.uint16)
    return ((paper[:, :, :3] * paper[:, :, 3:] + 127) // 255).astype(np.uint8)


def _decode_with_pillow(header: ImageFile.ImageFile) -> np.ndarray:
    """Pillow's full decode (the first frame), as grey or RGB uint8."""
    try:
        header.load()
    except Exception as exc:  # Pillow's decoders raise OSError, SyntaxError, ValueError...
        raise ImageRejected(f"corrupt {header.format} ({_one_line(exc)})") from None
    image: Image.Image = header
    if image.mode == "I" or image.mode.startswith("I;16"):
        wide = np.asarray(image).astype(np.int64).clip(0, 65535)
        return ((wide + 128) // 257).astype(np.uint8)  # round(v * 255 / 65535)
    if image.has_transparency_data:
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (WHITE, WHITE, WHITE, 255))
        return np.asarray(Image.alpha_composite(background, rgba).convert("RGB"))
    if image.mode in ("L", "RGB"):
        return np.asarray(image)
    return np.asarray(image.convert("RGB"))


def _resize_crop(image: Image.Image, size: tuple[int, int]) -> Image.Image:
    """``image`` scaled to cover ``size`` (height, width) and centre-cropped to it."""
    height, width = size
    box = crop_box((image.height, image.width), size)
    return image.resize((width, height), Image.Resampling.BILINEAR, box=box)


def crop_box(
    image_size: tuple[int, int], size: tuple[int, int]
) -> tuple[float, float, float, float]:
    """The centred (left, top, right, bottom) box of an image of ``image_size`` (height, width)
    that scales to ``size`` (height, width) by covering it: the side that limits the scale is
    kept whole and the other is cut evenly on both ends. Which side limits is decided in
    integers and the cut side computed as one division, so the box never leaves the image by a
    rounding (a scale computed first, then divided back, gives offsets of -1e-14 for some
    ordinary photo shapes, which Pillow refuses).
    """
    image_height, image_width = image_size
    height, width = size
    if height * image_width >= width * image_height:  # the height limits: all rows kept
        left = (image_width - width * image_height / height) / 2
        top = 0.0
    else:
        left = 0.0
        top = (image_height - height * image_width / width) / 2
    return (left, top, image_width - left, image_height - top)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
