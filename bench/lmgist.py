"""LMgist (Oliva & Torralba 2001; Torralba's LMgist.m) written from its equations in dense
float64, one full complex FFT per Gabor filter: what a person writes from the paper and the
MATLAB code, with none of the descriptor's shortcuts (real FFTs, matrix products, float32,
filters cropped to their support).

It is the reference the descriptor (``imgscale.pipeline.describe.Gist``) is tested against and
the plain loop the ``images`` benchmark measures ingest beside, so both compare with one
transcription.
"""

from __future__ import annotations

import numpy as np


def reference_gist(
    image: np.ndarray,
    orientations: tuple[int, ...],
    n_blocks: int,
    fc: float = 4.0,
    boundary: int = 32,
) -> np.ndarray:
    """The GIST of one square grey image: ``sum(orientations) * n_blocks**2`` values.

    prefilt.m (cut-off ``fc``, 5-pixel symmetric padding): I ↦ log(I + 1), minus its Gaussian
    low-pass exp(-|f|²/s²) (s = fc/√log 2), divided by 0.2 + the square root of the low-passed
    square. createGabor.m on the image padded by ``boundary`` pixels (n = size + 2 boundary):
    filter (i, j) is exp(-3.5 (|f|/(n·0.3/1.85^i) - 1)² - 2π (16 oᵢ²/32²) θ²) with θ the angle
    of f plus πj/oᵢ wrapped to [-π, π]. gistGabor + downN: |IFFT(FFT(padded) · G)| cropped to
    the image, averaged over the blocks bounded by floor(linspace(0, size, N + 1)), stacked
    column-major per filter. The image is first scaled to [0, 255] by its own range.
    """
    img = image.astype(np.float64)
    img -= img.min()
    if img.max() > 0:
        img *= 255 / img.max()
    pad = 5
    s1 = fc / np.sqrt(np.log(2))
    img = np.pad(np.log(img + 1), pad, mode="symmetric")
    fy, fx = _centred_grid(img.shape[0])
    lowpass = np.fft.ifftshift(np.exp(-(fx**2 + fy**2) / s1**2))
    white = img - np.real(np.fft.ifft2(np.fft.fft2(img) * lowpass))
    local_std = np.sqrt(np.abs(np.fft.ifft2(np.fft.fft2(white**2) * lowpass)))
    out = (white / (0.2 + local_std))[pad:-pad, pad:-pad]

    size = out.shape[0]
    n = size + 2 * boundary
    fy, fx = _centred_grid(n)
    radius = np.fft.ifftshift(np.hypot(fx, fy))
    angle = np.fft.ifftshift(np.arctan2(fy, fx))
    spectrum = np.fft.fft2(np.pad(out, boundary, mode="symmetric"))
    edges = np.floor(np.linspace(0, size, n_blocks + 1)).astype(int)
    crop = slice(boundary, boundary + size)
    features = []
    for scale, n_orient in enumerate(orientations):
        for j in range(n_orient):
            theta = angle + np.pi / n_orient * j
            theta = theta + 2 * np.pi * (theta < -np.pi) - 2 * np.pi * (theta > np.pi)
            gabor = np.exp(
                -3.5 * (radius / n / (0.3 / 1.85**scale) - 1) ** 2
                - 2 * np.pi * (16 * n_orient**2 / 32**2) * theta**2
            )
            energy = np.abs(np.fft.ifft2(spectrum * gabor))[crop, crop]
            blocks = np.empty((n_blocks, n_blocks))
            for by in range(n_blocks):
                for bx in range(n_blocks):
                    rows = slice(edges[by], edges[by + 1])
                    blocks[by, bx] = energy[rows, edges[bx] : edges[bx + 1]].mean()
            features.extend(blocks.ravel(order="F"))
    return np.asarray(features)


def _centred_grid(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(fy, fx) = meshgrid(-n/2 : n/2 - 1), centred as LMgist builds its filters."""
    f = np.arange(-n // 2, n // 2, dtype=np.float64)
    fx, fy = np.meshgrid(f, f)
    return fy, fx
