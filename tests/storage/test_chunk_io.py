"""The direct chunk reader returns exactly what zarr decodes, and refuses layouts it cannot read."""

from __future__ import annotations

import numpy as np
import pytest
import zarr
from zarr.codecs import Crc32cCodec, ZstdCodec

from imgscale.storage import create_store
from imgscale.storage.chunk_io import direct_checksum, read_chunk_file
from imgscale.storage.layout import CODECS


@pytest.mark.parametrize("dtype", [np.float32, np.uint8])
@pytest.mark.parametrize("compressors", [(), (Crc32cCodec(),)])
def test_direct_read_equals_zarr_read(tmp_path, dtype, compressors):
    values = (np.random.default_rng(0).random((50, 7)) * 200).astype(dtype)
    array = zarr.create_array(
        store=str(tmp_path / "a"),
        shape=values.shape,
        chunks=(16, 7),
        dtype=dtype,
        compressors=compressors,
        fill_value=0,
    )
    array[:] = values
    checksum = direct_checksum(array)
    assert checksum is bool(compressors)
    for index in range(4):
        chunk = read_chunk_file(tmp_path / "a" / "c" / str(index) / "0", (16, 7), dtype, checksum)
        # zarr stores whole chunks; the last one is padded with the fill value.
        expected = np.zeros((16, 7), dtype)
        expected[: len(values[index * 16 : (index + 1) * 16])] = values[
            index * 16 : index * 16 + 16
        ]
        np.testing.assert_array_equal(chunk, expected)


def test_compressed_layouts_are_left_to_zarr(tmp_path):
    array = zarr.create_array(
        store=str(tmp_path / "a"),
        shape=(4, 4),
        chunks=(2, 4),
        dtype="f4",
        compressors=(ZstdCodec(), Crc32cCodec()),
    )
    assert direct_checksum(array) is None


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_stores_of_every_codec_read_back_the_rows(tmp_path, codec):
    X = np.random.default_rng(1).standard_normal((300, 9)).astype(np.float32)
    store = create_store(tmp_path / "s", 9, rows_per_chunk=64, codec=codec)
    store.append("b", X[:100])
    store.append("c", X[100:])
    np.testing.assert_array_equal(store.features().compute(), X)
