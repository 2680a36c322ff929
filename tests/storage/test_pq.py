"""PQ codec and PQ stores: faiss is the reference for training/encoding/decoding, and a PQ store
reads back exactly the rows the codec decodes, chunk by chunk, through the usual store verbs."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import faiss
import numpy as np
import pytest

from imgscale.pipeline.pq import KSUB, PQCodec, random_rotation
from imgscale.storage import StoreError, create_coded_store, open_store
from imgscale.storage.layout import read_record
from imgscale.storage.writer import CopyWriter, write_row_chunk

DIM, M = 16, 4


def blobs(n: int, seed: int = 0, dim: int = DIM) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(20, dim)) * 3
    return (centres[rng.integers(0, 20, n)] + rng.normal(size=(n, dim))).astype(np.float32)


@pytest.fixture(scope="module")
def codec() -> PQCodec:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return PQCodec.train(blobs(3000), M, seed=0, niter=10)


def test_codebook_has_m_sub_quantizers_of_256_centroids(codec):
    assert codec.codebook.shape == (M, KSUB, DIM // M) and codec.codebook.dtype == np.float32


def test_encode_and_decode_match_faiss_product_quantizer(codec):
    X = blobs(500, seed=1)
    pq = faiss.ProductQuantizer(DIM, M, 8)
    faiss.copy_array_to_vector(codec.codebook.ravel(), pq.centroids)
    codes = codec.encode(X)
    np.testing.assert_array_equal(codes, pq.compute_codes(X))
    np.testing.assert_array_equal(codec.decode(codes), pq.decode(codes))


def test_training_is_faiss_k_means_searching_by_blas_and_leaves_faiss_settings_as_they_were():
    X = blobs(3000, seed=11)
    before = (faiss.cvar.distance_compute_blas_threshold, faiss.cvar.distance_compute_blas_query_bs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        codec = PQCodec.train(X, M, seed=2, niter=5)
    after = (faiss.cvar.distance_compute_blas_threshold, faiss.cvar.distance_compute_blas_query_bs)
    assert after == before
    pq = faiss.ProductQuantizer(DIM, M, 8)
    pq.cp.niter, pq.cp.seed, pq.cp.min_points_per_centroid = 5, 2, 1
    faiss.cvar.distance_compute_blas_threshold = 1
    faiss.cvar.distance_compute_blas_query_bs = 1024
    try:
        pq.train(X)
    finally:
        faiss.cvar.distance_compute_blas_threshold, faiss.cvar.distance_compute_blas_query_bs = (
            before
        )
    expected = faiss.vector_to_array(pq.centroids).reshape(M, KSUB, DIM // M)
    np.testing.assert_array_equal(codec.codebook, expected)


def test_encode_picks_the_nearest_centroid_of_each_sub_vector(codec):
    X = blobs(200, seed=2)
    sub = X.reshape(len(X), M, -1)
    d = ((sub[:, :, None, :] - codec.codebook[None]) ** 2).sum(-1)  # (n, M, 256)
    codes = codec.encode(X)
    chosen = np.take_along_axis(d, codes[:, :, None].astype(int), axis=2)[..., 0]
    np.testing.assert_allclose(chosen, d.min(axis=2), rtol=1e-5, atol=1e-5)


def test_encode_errors_are_each_rows_squared_distance_to_its_decoding(codec):
    X = blobs(300, seed=6)
    for c in (codec, PQCodec(codec.codebook, random_rotation(DIM, seed=7))):
        codes, errors = c.encode_with_errors(X)
        np.testing.assert_array_equal(codes, c.encode(X))
        exact = ((X.astype(np.float64) - c.decode(codes)) ** 2).sum(axis=1)
        np.testing.assert_allclose(errors, exact, rtol=1e-4, atol=1e-4)


def test_rotation_is_orthogonal_and_undone_by_decode():
    R = random_rotation(DIM, seed=3)
    np.testing.assert_allclose(R @ R.T, np.eye(DIM), atol=1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        codec = PQCodec.train(blobs(3000), M, rotate=True, niter=10)
    X = blobs(300, seed=4)
    plain = PQCodec(codec.codebook)
    np.testing.assert_allclose(
        codec.decode(codec.encode(X)),
        plain.decode(plain.encode(X @ codec.rotation)) @ codec.rotation.T,
        rtol=1e-4,
        atol=1e-4,
    )


def test_m_not_dividing_d_is_an_error():
    with pytest.raises(ValueError, match="do not divide D=16"):
        PQCodec.train(blobs(3000), 5)


def test_too_few_training_rows_warns_with_the_number():
    with pytest.warns(UserWarning, match="1000 rows"):
        PQCodec.train(blobs(1000), M, niter=2)
    with pytest.raises(ValueError, match="100 rows"):
        PQCodec.train(blobs(100), M)


# -- PQ stores ----------------------------------------------------------------------------


@pytest.fixture
def pq_store(tmp_path, codec):
    store = create_coded_store(
        tmp_path / "pq.zarr", codec, class_names=["a", "b", "c"], rows_per_chunk=64
    )
    X = blobs(150, seed=5)
    store.append("b0", codec.encode(X), labels=np.arange(150) % 3, split="train")
    return store, X


def test_features_of_a_pq_store_are_the_decoded_codes_chunk_by_chunk(pq_store, codec):
    store, X = pq_store
    x = store.features()
    assert x.dtype == np.float32 and x.chunks == ((64, 64, 22), (DIM,))
    np.testing.assert_array_equal(x.compute(), codec.decode(codec.encode(X)))


def test_codes_are_a_uint8_dask_array_chunked_like_features(pq_store, codec):
    store, X = pq_store
    codes = store.codes()
    assert codes.dtype == np.uint8 and codes.chunks == ((64, 64, 22), (M,))
    np.testing.assert_array_equal(codes.compute(), codec.encode(X))
    np.testing.assert_array_equal(store.codec.codebook, codec.codebook)
    assert store.codec.rotation is None


def test_reopened_pq_store_keeps_rows_labels_and_split(pq_store):
    store, _ = pq_store
    again = open_store(store.path)
    assert again.encoding == "pq" and again.committed_rows == 150 and again.dim == DIM
    np.testing.assert_array_equal(again.labels("train"), np.arange(150) % 3)
    assert again.features("train").shape == (150, DIM)


def test_info_reports_m_and_compression(pq_store):
    store, _ = pq_store
    info = store.info()
    assert info["encoding"] == "pq" and info["pq_m"] == M and info["pq_dsub"] == DIM // M
    assert info["raw_float32_bytes"] == 150 * DIM * 4
    assert info["compression_ratio"] == pytest.approx(
        info["raw_float32_bytes"] / info["bytes_on_disk"]
    )
    json.dumps(info)


def test_pq_store_verifies(pq_store):
    pq_store[0].verify()


# -- bad input ----------------------------------------------------------------------------


def _record(store) -> dict:
    return json.loads((Path(store.path) / "zarr.json").read_text())


def test_float_rows_appended_to_a_pq_store_are_refused_and_nothing_written(pq_store):
    store, X = pq_store
    before = _record(store)
    with pytest.raises(StoreError, match="dtype float32; expected uint8"):
        store.append("b1", X[:10])
    with pytest.raises(StoreError, match="dtype int64; expected uint8"):
        store.append("b1", np.full((10, M), 300))
    with pytest.raises(StoreError, match=r"shape \(10, 3\); expected \(n, 4\)"):
        store.append("b1", np.zeros((10, 3), np.uint8))
    assert _record(store) == before


def test_codebook_of_the_wrong_shape_is_a_clear_error(pq_store):
    import zarr

    store, _ = pq_store
    zarr.create_array(
        str(store.path), name="codebook", shape=(M, 128, DIM // M), dtype="float32", overwrite=True
    )
    with pytest.raises(
        StoreError, match=r"codebook of shape \(4, 128, 4\).*expected \(4, 256, 4\)"
    ):
        store.features().compute()


def test_codes_array_of_another_dtype_is_a_clear_error(pq_store):
    import zarr

    store, _ = pq_store
    # What a corrupted codes array that holds values ≥ 256 looks like: not uint8.
    bad = zarr.create_array(
        str(store.path),
        name="codes",
        shape=(150, M),
        chunks=(64, M),
        dtype="uint16",
        overwrite=True,
    )
    bad[...] = 300
    with pytest.raises(StoreError, match=r"uint16; expected \(n, 4\) uint8"):
        store.features().compute()


def test_codebook_mismatching_the_store_dimension_is_refused_at_create(tmp_path, codec):
    bad = PQCodec(codec.codebook[:, :100])
    with pytest.raises(StoreError, match="codebook of shape"):
        create_coded_store(tmp_path / "x.zarr", bad)
    assert not (tmp_path / "x.zarr").exists()


def test_pq_store_has_its_own_schema_version_so_older_readers_refuse_it(pq_store, monkeypatch):
    import imgscale.storage.layout as layout

    store, _ = pq_store
    record = _record(store)["attributes"]["imgscale"]
    assert record["schema_version"] == layout.CODED_SCHEMA_VERSION != layout.SCHEMA_VERSION
    # An imgscale that predates PQ stores knew only version 1 and would say so.
    monkeypatch.setattr(layout, "CODED_SCHEMA_VERSION", layout.SCHEMA_VERSION)
    with pytest.raises(StoreError, match="schema_version 2, expected 1"):
        open_store(store.path)


def test_pq_record_with_an_older_schema_version_is_refused(pq_store):
    store, _ = pq_store
    meta = _record(store)
    meta["attributes"]["imgscale"]["schema_version"] = 1
    (store.path / "zarr.json").write_text(json.dumps(meta))
    with pytest.raises(StoreError, match="schema_version 1, expected 2"):
        open_store(store.path)


def test_raw_store_has_no_codes(tmp_path):
    from imgscale.storage import create_store

    store = create_store(tmp_path / "raw.zarr", DIM)
    with pytest.raises(StoreError, match="has no codes"):
        store.codes()


@pytest.mark.parametrize("damage", ["deleted", "truncated", "corrupted"])
def test_damaged_codes_chunk_is_reported_by_name(pq_store, damage):
    store, _ = pq_store
    file = store.path / "codes" / "c" / "1" / "0"
    data = bytearray(file.read_bytes())
    if damage == "deleted":
        file.unlink()
    elif damage == "truncated":
        file.write_bytes(bytes(data[: len(data) // 2]))
    else:
        data[len(data) // 2] ^= 0xFF
        file.write_bytes(bytes(data))
    with pytest.raises(StoreError, match=r"codes/c/1/0, rows 64–127"):
        store.features().compute()
    with pytest.raises(StoreError, match=r"codes/c/1/0"):
        store.verify()


# -- chunk-parallel copies (CopyWriter, used by `imgscale compress`) ----------------------


def _copy_into(store, codes, source, chunks=None):
    """Copy through a CopyWriter, writing chunk by chunk in reverse order (any order works)."""
    rpc = store.rows_per_chunk
    with CopyWriter(store, source) as writer:
        first = writer.first_chunk
        for i in reversed(range(-(-len(codes) // rpc) if chunks is None else chunks)):
            write_row_chunk(store.path, first + i, codes[i * rpc : (i + 1) * rpc])


def _empty_copy(source, codec, name="copy.zarr"):
    path = source.path.with_name(name)
    return create_coded_store(path, codec, class_names=source.class_names, rows_per_chunk=64)


def test_copy_writer_commits_batches_written_chunk_by_chunk(tmp_path, codec):
    # Three batches not aligned with the 64-row chunks: one commit covers them all.
    X = blobs(150, seed=5)
    source = create_coded_store(tmp_path / "three.zarr", codec, class_names=["a", "b", "c"])
    for b, s, e in [("x", 0, 50), ("y", 50, 120), ("z", 120, 150)]:
        source.append(b, codec.encode(X[s:e]), labels=np.arange(s, e) % 3, split="train")
    copy = _empty_copy(source, codec)
    _copy_into(copy, codec.encode(X), source)
    copy = open_store(copy.path)
    assert copy.rows().to_pylist() == source.rows().to_pylist()
    assert [copy.has_batch(b) for b in "xyz"] == [True] * 3
    np.testing.assert_array_equal(copy.codes().compute(), codec.encode(X))
    copy.verify()


def test_copy_into_an_empty_store_copies_rows_files_as_they_are_and_reads_no_ids(
    tmp_path, codec, monkeypatch
):
    """A copy's metadata never passes through memory: each batch's rows file is copied byte
    for byte, and the ids (most of a large store's metadata) are not read at all."""
    X = blobs(150, seed=6)
    source = create_coded_store(tmp_path / "two.zarr", codec, class_names=["a", "b", "c"])
    for b, s, e in [("x", 0, 100), ("y", 100, 150)]:
        source.append(b, codec.encode(X[s:e]), labels=np.arange(s, e) % 3, split="train")
    copy = _empty_copy(source, codec)

    def no_rows(*args, **kwargs):
        raise AssertionError("the source's row metadata was read whole")

    monkeypatch.setattr(source, "rows", no_rows)
    _copy_into(copy, codec.encode(X), source)
    copied, original = read_record(copy.path), read_record(source.path)
    assert [b["rows_file"] for b in copied["batches"]] == [
        b["rows_file"] for b in original["batches"]
    ]
    for batch in original["batches"]:
        name = batch["rows_file"]
        assert (copy.path / name).read_bytes() == (source.path / name).read_bytes()


def test_copy_writer_commits_nothing_on_failure_or_bad_input(pq_store, codec):
    source, X = pq_store
    copy = _empty_copy(source, codec)
    before = _record(copy)
    with pytest.raises(StoreError, match="64 rows for a chunk of 22"):
        _copy_into(copy, np.zeros((192, M), np.uint8), source)
    with pytest.raises(StoreError, match="uint8"):
        _copy_into(copy, X, source)
    with pytest.raises(RuntimeError, match="worker died"), CopyWriter(copy, source):
        write_row_chunk(copy.path, 0, codec.encode(X[:64]))
        raise RuntimeError("worker died")
    assert _record(copy) == before and open_store(copy.path).committed_rows == 0
    # Ids the store already holds (under another batch id), labels beyond its classes.
    holder = _empty_copy(source, codec, "holder.zarr")
    holder.append("other", codec.encode(X[:64]), ids=source.rows().column("id")[:64].to_pylist())
    before = _record(holder)
    with pytest.raises(StoreError, match="ids already in the store"):
        _copy_into(holder, codec.encode(X), source)
    assert _record(holder) == before
    fewer = create_coded_store(source.path.with_name("two.zarr"), codec, class_names=["a", "b"])
    with pytest.raises(StoreError, match="labels span"):
        _copy_into(fewer, codec.encode(X), source)
    assert open_store(fewer.path).committed_rows == 0
    # The store's own batch cannot be copied into it again; a mid-chunk end is refused too.
    with pytest.raises(StoreError, match=r"batches \['b0'\] are already committed"):
        _copy_into(source, codec.encode(X), source)
    mid = _empty_copy(source, codec, "mid.zarr")
    mid.append("m", codec.encode(X), ids=[f"m{i}" for i in range(len(X))])
    with pytest.raises(StoreError, match="150 committed rows end inside a chunk"):
        _copy_into(mid, codec.encode(X), source)
