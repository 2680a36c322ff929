"""Rows given as codes and the codec that decodes them: the statistics of the decoded rows.

A coded store keeps its rows as uint8 codes beside a codec (storage/row_codecs.py, `RowCodec`,
found by the ``imgscale.codecs`` entry point). The pipeline layer imports no storage module, so
what a classifier needs of such a codec is stated here as its own protocol, which every store
codec meets: `RowDecoder`, the dimension of a decoded row, the codes a row is kept as, and
``decode``. A codec that computes the statistics of a pass on the codes themselves, never
decoding a row, is a `RowStatsOnCodes` (product quantization gathers each row's centroids into
its class's sum: `pipeline.pq`); any other codec's codes are decoded one block at a time inside
the pass, so no decoded copy of the rows is ever whole.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import dask.array as da
import numpy as np

from imgscale.pipeline.reductions import RowStats, row_stats


@runtime_checkable
class RowDecoder(Protocol):
    """What a classifier needs of any codec: rows of `dim` values kept as `code_width` uint8
    codes, which `decode` turns back into float32 rows."""

    @property
    def dim(self) -> int: ...

    @property
    def code_width(self) -> int: ...

    def decode(self, codes: np.ndarray) -> np.ndarray: ...


@runtime_checkable
class RowStatsOnCodes(RowDecoder, Protocol):
    """A codec that computes `row_stats` on its codes: class sums and counts and the feature sum
    of the rows the codes decode to, without decoding them."""

    def row_stats(self, codes: Any, y_index: Any, n_classes: int) -> RowStats:
        """RowStats (no Gram) of the rows numpy or row-chunked dask ``codes`` decode to;
        ``y_index`` in [-1, n_classes), -1 counting towards the feature sum only."""
        ...


def check_codes(codes: Any, codec: RowDecoder) -> Any:
    """``codes`` as (n, `code_width`) uint8, numpy or dask with whole rows a chunk; ValueError
    naming the shape expected otherwise."""
    width = codec.code_width
    if codes.ndim != 2 or codes.shape[1] != width or codes.dtype != np.uint8:
        raise ValueError(f"codes of shape {codes.shape} {codes.dtype}; expected (n, {width}) uint8")
    return codes.rechunk({1: -1}) if isinstance(codes, da.Array) else np.asarray(codes)


def decoded(codes: Any, codec: RowDecoder) -> Any:
    """The float32 rows ``codes`` stand for: numpy, or dask decoded one block per task."""
    if not isinstance(codes, da.Array):
        return codec.decode(codes)
    return codes.map_blocks(
        codec.decode, dtype=np.float32, chunks=(codes.chunks[0], (codec.dim,)), token="decode"
    )


def coded_row_stats(codes: Any, y_index: Any, n_classes: int, codec: RowDecoder) -> RowStats:
    """RowStats (no Gram) of the rows checked ``codes`` decode to: the codec's own `row_stats`
    on the codes if it has one, else a pass decoding each block as it is summed."""
    if isinstance(codec, RowStatsOnCodes):
        return codec.row_stats(codes, y_index, n_classes)
    return row_stats(decoded(codes, codec), y_index, n_classes, gram=False)
