"""GIST: Gabor energy averaged over a coarse grid (Oliva & Torralba 2001, as Torralba's LMgist)."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import scipy.fft
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from imgscale.pipeline.describe._images import check_image_size, check_images

# LMgist's prefilter pads by 5 pixels before whitening and normalising local contrast.
_PREFILTER_PAD = 5
# Complex bytes of one Gabor pass per slice of images: the slice's spectrum and one filtered
# copy (FFT form) or the first pass of every filter (matrix form) stay a few MiB, whatever the
# batch size.
_SLICE_BYTES = 8 * 2**20
# Largest bank of per-column matrices (complex64) for which the Gabor stage runs as matrix
# products rather than FFTs: 15 MiB for 32×32 images with orientations (8, 8, 4).
_MATRIX_BYTES = 32 * 2**20


class Gist(TransformerMixin, BaseEstimator):
    """GIST descriptor: Gabor filter energy at several scales and orientations, averaged over an
    N×N grid of blocks, computed as Torralba's reference code LMgist computes it.

    Each grey image is scaled to [0, 255] by its own minimum and maximum, then prefiltered:
    log(I + 1) is whitened by subtracting a Gaussian low-pass (exp(-|f|²/s²) in the frequency
    domain, s = fc/√log 2) and divided by 0.2 + the local standard deviation (the square root of
    the low-passed square). It is then padded symmetrically by `boundary_extension` pixels and
    filtered by LMgist's bank of Gabor transfer functions: filter (i, j) (scale i from fine to
    coarse, orientation j < oᵢ) is

        G(f) = exp(-3.5 (|f| / (n·0.3/1.85^i) - 1)² - 2π (16 oᵢ²/32²) θⱼ(f)²),

    with n the padded size and θⱼ(f) the angle of f plus πj/oᵢ, wrapped to [-π, π]. The bank is
    one-sided in frequency (G(f) ≠ G(-f)), so each response is complex; its modulus, cropped to
    the image, is averaged over the blocks bounded by floor(linspace(0, size, N + 1)) along each
    axis. A constant image (nothing to scale) has the zero descriptor.

    Features are ordered as LMgist orders them: filter-major (scales fine to coarse, orientations
    within a scale), then block column, then block row.

    Parameters
    ----------
    orientations_per_scale : tuple of int, default=(8, 8, 8, 8)
        Number of orientations at each scale, finest first.
    n_blocks : int, default=4
        Blocks per side of the averaging grid.
    image_size : int, default=128
        Side of the square grey images `transform` takes (even, as LMgist's filters assume).
    prefilter_fc : float, default=4
        Cut-off of the prefilter's Gaussian, in cycles per image.
    boundary_extension : int, default=32
        Symmetric padding before the Gabor filters, in pixels.

    Attributes
    ----------
    n_features_out_ : int
        sum(orientations_per_scale) · n_blocks².

    References
    ----------
    Oliva & Torralba, "Modeling the shape of the scene: a holistic representation of the spatial
    envelope", IJCV 42(3), 2001, §4 (the windowed Fourier transform and its spatial averaging).
    Torralba, LMgist.m, createGabor.m, prefilt.m (the reference implementation followed here).
    Gong & Lazebnik, CVPR 2011, §4.1: grey GIST as the global descriptor ("gist-tiny" in
    `DESCRIPTORS`: orientations (8, 8, 4) on a 4×4 grid, 320-D).
    """

    def __init__(
        self,
        orientations_per_scale: tuple[int, ...] = (8, 8, 8, 8),
        n_blocks: int = 4,
        image_size: int = 128,
        prefilter_fc: float = 4,
        boundary_extension: int = 32,
    ):
        self.orientations_per_scale = orientations_per_scale
        self.n_blocks = n_blocks
        self.image_size = image_size
        self.prefilter_fc = prefilter_fc
        self.boundary_extension = boundary_extension

    @property
    def image_request(self) -> tuple[str, tuple[int, int]]:
        """What the decoder hands `transform`: grey images of image_size × image_size."""
        return "L", (self.image_size, self.image_size)

    def fit(self, images: Any = None, y: Any = None) -> Gist:
        """Check the parameters and set `n_features_out_`; nothing is learned from `images`."""
        size = check_image_size(self.image_size, "Gist", minimum=2)
        if size % 2:
            raise ValueError(f"Gist: image_size must be even, got {size}")
        orientations = tuple(self.orientations_per_scale)
        if not orientations or not all(
            isinstance(o, int | np.integer) and o >= 1 for o in orientations
        ):
            raise ValueError(
                "Gist: orientations_per_scale must be positive integers, "
                f"got {self.orientations_per_scale!r}"
            )
        if not isinstance(self.n_blocks, int | np.integer) or not 1 <= self.n_blocks <= size:
            raise ValueError(f"Gist: n_blocks must be in [1, image_size], got {self.n_blocks!r}")
        if not self.prefilter_fc > 0:
            raise ValueError(f"Gist: prefilter_fc must be positive, got {self.prefilter_fc!r}")
        be = self.boundary_extension
        if not isinstance(be, int | np.integer) or be < 0:
            raise ValueError(f"Gist: boundary_extension must be an integer >= 0, got {be!r}")
        self.n_features_out_ = int(sum(orientations)) * int(self.n_blocks) ** 2
        return self

    def transform(self, images: Any) -> np.ndarray:
        """GIST of each image: float32 (n, n_features_out_)."""
        check_is_fitted(self)
        images = check_images(images, "L", self.image_size, "Gist")
        bank = self._bank()
        out = np.empty((len(images), self.n_features_out_), np.float32)
        for start in range(0, len(images), bank.slice_rows):
            stop = start + bank.slice_rows
            out[start:stop] = bank.describe(images[start:stop])
        return out

    def _bank(self) -> _GistBank:
        """The filters for the current parameters, built once per process (`_built_bank`)."""
        return _built_bank(
            int(self.image_size),
            tuple(int(o) for o in self.orientations_per_scale),
            int(self.n_blocks),
            float(self.prefilter_fc),
            int(self.boundary_extension),
        )


@functools.lru_cache(maxsize=8)
def _built_bank(*setting: Any) -> _GistBank:
    """One `_GistBank` per setting and process, shared by every `Gist` of that setting: a worker
    builds the filters (and the matrices of the matrix form) once, not once per descriptor it is
    sent."""
    return _GistBank(*setting)


def _frequencies(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(fy, fx) in cycles per image, in FFT order: LMgist's fftshift(meshgrid(-n/2:n/2-1))."""
    f = np.fft.fftfreq(n, 1.0 / n)
    return np.meshgrid(f, f, indexing="ij")


def gabor_bank(orientations_per_scale: tuple[int, ...], n: int) -> np.ndarray:
    """LMgist's createGabor: real transfer functions of shape (n_filters, n, n), FFT order."""
    fy, fx = _frequencies(n)
    radius = np.hypot(fx, fy)
    angle = np.arctan2(fy, fx)
    filters = []
    for scale, n_orient in enumerate(orientations_per_scale):
        peak = 0.3 / 1.85**scale
        angular = 16 * n_orient**2 / 32**2
        for j in range(n_orient):
            theta = angle + np.pi / n_orient * j
            theta = theta + 2 * np.pi * (theta < -np.pi) - 2 * np.pi * (theta > np.pi)
            filters.append(
                np.exp(-10 * 0.35 * (radius / n / peak - 1) ** 2 - 2 * angular * np.pi * theta**2)
            )
    return np.asarray(filters, dtype=np.float32)


class _GistBank:
    """The prefilter's Gaussian and the Gabor stage for one setting, and the batch computation.

    The Gabor stage of image q (size s, padded to n = s + 2·boundary) is, per filter G,
    E = |A (G ∘ X) Aᵀ| with X = M q Mᵀ the spectrum of the padded image (M: n×s, the DFT of the
    symmetric padding) and A: s×n the inverse DFT onto the cropped rows. The bank is not
    Hermitian, so the inverse is a full complex transform either way. Two exact forms:

    - matrices, for small images: column l of A (G ∘ X) is T_l (q Mᵀ)_l with
      T_l = A diag(G[:, l]) M, an s×s matrix per filter and column, kept for the bank
      (n_filters·n·s² complex numbers). Both passes are then batched matrix products, which
      on small images outrun the n + s length-n transforms per filter of the FFT form;
    - FFTs, for the rest: one forward transform of the padded image, then per filter the
      inverse along each of the n rows and along each of the s cropped columns only.
    """

    def __init__(
        self,
        size: int,
        orientations: tuple[int, ...],
        n_blocks: int,
        prefilter_fc: float,
        boundary_extension: int,
    ):
        self.size = size
        self.boundary_extension = boundary_extension
        n = size + 2 * _PREFILTER_PAD
        fy, fx = _frequencies(n)
        s1 = prefilter_fc / np.sqrt(np.log(2))
        # exp(-|f|²/s1²) is real and even, so it acts on the half-plane of a real transform.
        lowpass = np.exp(-(fx**2 + fy**2) / s1**2)[:, : n // 2 + 1]
        self.lowpass = lowpass.astype(np.float32)
        n = size + 2 * boundary_extension
        gabor = gabor_bank(orientations, n)
        self.n_filters = len(gabor)
        edges = np.floor(np.linspace(0, size, n_blocks + 1)).astype(np.intp)
        self.block_starts = edges[:-1]
        self.block_areas = np.outer(np.diff(edges), np.diff(edges)).astype(np.float32)
        if self.n_filters * n * size**2 * 8 <= _MATRIX_BYTES:
            self.gabor = None
            self._build_matrices(gabor, n)
            self.slice_rows = max(1, _SLICE_BYTES // (self.n_filters * n * size * 8))
        else:
            self.gabor = gabor
            self.slice_rows = max(1, _SLICE_BYTES // (8 * n**2))

    def _build_matrices(self, gabor: np.ndarray, n: int) -> None:
        size, pad = self.size, self.boundary_extension
        k = np.arange(n)
        padding = np.zeros((n, size))
        padding[k, np.pad(np.arange(size), pad, mode="symmetric")] = 1
        spectrum = np.exp(-2j * np.pi * np.outer(k, k) / n) @ padding  # M: n × s
        inverse = np.exp(2j * np.pi * np.outer(np.arange(pad, pad + size), k) / n) / n  # A
        # transfer[f, l] = A diag(G[f, :, l]) M, one batched product per filter.
        self.transfer = np.stack(
            [(inverse[None] * g.T[:, None, :].astype(np.float64)) @ spectrum for g in gabor]
        ).astype(np.complex64)
        self.spectrum_t = spectrum.T.astype(np.complex64)
        self.inverse = inverse.astype(np.complex64)

    def describe(self, images: np.ndarray) -> np.ndarray:
        """GIST rows of a slice of images (m, size, size)."""
        x = self.prefilter(images)
        if self.gabor is None:
            blocks = self._block_means(self._energy_by_matrices(x), axes=(1, 2))
            # (filter, block column, block row, image): LMgist's column-major block order.
            return np.ascontiguousarray(np.moveaxis(blocks, -1, 0)).reshape(len(x), -1)
        return self._blocks_by_fft(x)

    def _energy_by_matrices(self, x: np.ndarray) -> np.ndarray:
        """|response| of every filter, (n_filters, column, row, image)."""
        m, s = len(x), self.size
        columns = np.ascontiguousarray((x @ self.spectrum_t).transpose(2, 1, 0))  # (q Mᵀ)_l
        rows = np.matmul(self.transfer, columns)  # (filter, l, row, image)
        response = np.matmul(self.inverse, rows.reshape(self.n_filters, -1, s * m))
        return np.abs(response).reshape(self.n_filters, s, s, m)

    def _blocks_by_fft(self, x: np.ndarray) -> np.ndarray:
        m, pad = len(x), self.boundary_extension
        x = np.pad(x, ((0, 0), (pad, pad), (pad, pad)), mode="symmetric")
        spectrum = scipy.fft.fft2(x, workers=1)
        crop = slice(pad, pad + self.size)
        blocks = np.empty((m, self.n_filters, *self.block_areas.shape), np.float32)
        for f, transfer in enumerate(self.gabor):
            response = spectrum * transfer
            response = scipy.fft.ifft(response, axis=-1, workers=1, overwrite_x=True)[..., crop]
            response = scipy.fft.ifft(response, axis=-2, workers=1, overwrite_x=True)[:, crop]
            blocks[:, f] = self._block_means(np.abs(response), axes=(1, 2))
        # LMgist stacks each filter's block means column-major: block column, then row.
        return blocks.transpose(0, 1, 3, 2).reshape(m, -1)

    def _block_means(self, energy: np.ndarray, axes: tuple[int, int]) -> np.ndarray:
        """Means over LMgist's downN blocks along two axes (the block areas are symmetric)."""
        sums = np.add.reduceat(energy, self.block_starts, axis=axes[0])
        sums = np.add.reduceat(sums, self.block_starts, axis=axes[1])
        shape = [1] * energy.ndim
        shape[axes[0]] = shape[axes[1]] = len(self.block_starts)
        return sums / self.block_areas.reshape(shape)

    def prefilter(self, images: np.ndarray) -> np.ndarray:
        """LMgist's scaling to [0, 255] and prefilt: whitening and local contrast normalisation."""
        x = images.astype(np.float32)
        x -= x.min(axis=(1, 2), keepdims=True)
        top = x.max(axis=(1, 2), keepdims=True)
        x *= np.divide(255, top, out=np.zeros_like(top), where=top > 0)
        np.log1p(x, out=x)
        pad = _PREFILTER_PAD
        x = np.pad(x, ((0, 0), (pad, pad), (pad, pad)), mode="symmetric")
        x -= self._lowpass(x)
        local_std = self._lowpass(x * x)
        np.abs(local_std, out=local_std)
        np.sqrt(local_std, out=local_std)
        local_std += 0.2
        x /= local_std
        return x[:, pad:-pad, pad:-pad]

    def _lowpass(self, x: np.ndarray) -> np.ndarray:
        spectrum = scipy.fft.rfft2(x, workers=1)
        spectrum *= self.lowpass
        return scipy.fft.irfft2(spectrum, s=x.shape[1:], workers=1, overwrite_x=True)
