"""Direct reads of uncompressed zarr v3 chunks: a memory map and a crc32c check.

zarr-python's codec pipeline spends most of an uncompressed chunk read in an event loop, buffer
wrappers and copies, well below what ``np.fromfile`` reaches from the page cache. For the layout
imgscale writes by default, the bytes codec followed by an optional crc32c, a chunk file is the
little-endian array followed by its checksum, so we map it and verify the checksum
(google-crc32c, hardware accelerated). The files are exactly what zarr writes, so any zarr reader
still opens the store; arrays with any other codec chain are read through zarr (``imgscale bench
io`` measures both paths).
"""

from __future__ import annotations

import math
import mmap
import os
import sys

import google_crc32c
import numpy as np
import zarr
from zarr.codecs import BytesCodec, Crc32cCodec

from imgscale.storage.fs import Location, is_local

CHECKSUM_BYTES = 4


def direct_checksum(array: zarr.Array) -> bool | None:
    """Whether ``array`` chunks end in a crc32c (True/False), or None if not directly readable."""
    codecs = array.metadata.codecs
    if not codecs or not isinstance(codecs[0], BytesCodec):
        return None
    endian = codecs[0].endian
    if array.dtype.itemsize > 1 and endian is not None and endian.value != sys.byteorder:
        return None
    rest = codecs[1:]
    if not rest:
        return False
    if len(rest) == 1 and isinstance(rest[0], Crc32cCodec):
        return True
    return None


def read_chunk_file(
    file: Location, chunk_shape: tuple[int, ...], dtype, checksum: bool
) -> np.ndarray:
    """The chunk in ``file`` as a read-only array; ValueError on a wrong size or checksum.

    A local file is memory-mapped rather than copied: the checksum pass faults its pages in from
    the page cache and consumers read them in place, with no copy into fresh memory (``imgscale
    bench io`` measures both). Chunk files are only ever replaced
    by rename, never rewritten in place, so a mapping always sees one complete version. An
    object is fetched whole in one GET.
    """
    dtype = np.dtype(dtype)
    n_bytes = math.prod(chunk_shape) * dtype.itemsize
    expected = n_bytes + (CHECKSUM_BYTES if checksum else 0)
    if is_local(file):
        with open(file, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            _check_size(size, expected)
            buffer = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    else:
        buffer = file.read_bytes()
        _check_size(len(buffer), expected)
    data = np.frombuffer(buffer, np.uint8)
    if checksum:
        stored = int.from_bytes(data[n_bytes:].tobytes(), "little")
        if google_crc32c.value(data[:n_bytes]) != stored:
            raise ValueError("crc32c checksum mismatch (corrupt chunk)")
    return data[:n_bytes].view(dtype).reshape(chunk_shape)


def _check_size(size: int, expected: int) -> None:
    if size != expected:
        raise ValueError(f"{size} bytes on disk; expected {expected} (truncated or foreign file?)")
