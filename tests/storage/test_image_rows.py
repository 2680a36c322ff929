"""Rows made from images: each keeps the sha256 of its image, refused images are committed to a
table of rejects, and the store records what described its rows."""

import hashlib

import numpy as np
import pytest

from imgscale.storage import StoreError, create_store, open_store


def digest(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


@pytest.fixture
def store(tmp_path):
    return create_store(tmp_path / "images.zarr", 3, descriptor={"features": [], "dim": 3})


def test_rows_keep_the_first_16_bytes_of_their_images_sha256(store):
    with store.writer("b") as writer:
        writer.write(np.ones((2, 3), np.float32), ["cat", "dog"], ["a.jpg", "b.jpg"],
                     sha256=[digest(b"a"), digest(b"b")])  # fmt: skip
    table = open_store(store.path).content_hashes()
    assert table.column("id").to_pylist() == ["a.jpg", "b.jpg"]
    assert table.column("sha256").to_pylist() == [digest(b"a")[:16], digest(b"b")[:16]]


def test_batches_of_vectors_have_no_content_hashes(store):
    store.append("vectors", np.ones((2, 3), np.float32), ids=["v0", "v1"])
    assert open_store(store.path).content_hashes().num_rows == 0
    assert open_store(store.path).rows().column("id").to_pylist() == ["v0", "v1"]


def test_sha256_on_some_blocks_of_a_batch_only_is_refused(store):
    with pytest.raises(StoreError, match="sha256 given for some blocks"):
        with store.writer("b") as writer:
            writer.write(np.ones((1, 3), np.float32), ids=["a"], sha256=[digest(b"a")])
            writer.write(np.ones((1, 3), np.float32), ids=["b"])
    assert open_store(store.path).committed_rows == 0


def test_a_digest_of_the_wrong_length_is_refused(store):
    with pytest.raises(StoreError, match="sha256 digests of 32 bytes"):
        with store.writer("b") as writer:
            writer.write(np.ones((1, 3), np.float32), ids=["a"], sha256=[b"short"])


def test_rejects_are_committed_with_the_batch_and_alone(store):
    with store.writer("b1") as writer:
        writer.write(np.ones((1, 3), np.float32), ids=["good.jpg"], sha256=[digest(b"g")])
        writer.reject(["bad.jpg"], [digest(b"x")], ["truncated JPEG"])
    with store.writer("b2") as writer:
        writer.reject(["empty.jpg"], [digest(b"")], ["empty file"])
    reopened = open_store(store.path)
    assert reopened.committed_rows == 1
    assert [b["batch_id"] for b in reopened.info()["batches"]] == ["b1"]
    rejected = reopened.rejected().to_pylist()
    assert [(r["key"], r["reason"]) for r in rejected] == [
        ("bad.jpg", "truncated JPEG"),
        ("empty.jpg", "empty file"),
    ]
    assert reopened.info()["rejected"] == 2


def test_a_rejected_image_committed_later_is_no_longer_rejected(store):
    with store.writer("b1") as writer:
        writer.reject(["fixed.jpg"], [digest(b"broken")], ["truncated JPEG"])
    with store.writer("b2") as writer:
        writer.write(np.ones((1, 3), np.float32), ids=["fixed.jpg"], sha256=[digest(b"fixed")])
    assert open_store(store.path).rejected().num_rows == 0


def test_a_failed_batch_commits_none_of_its_rejects(store):
    with pytest.raises(RuntimeError):
        with store.writer("b") as writer:
            writer.reject(["bad.jpg"], [digest(b"x")], ["truncated JPEG"])
            raise RuntimeError("killed")
    reopened = open_store(store.path)
    assert reopened.rejected().num_rows == 0
    assert not list((store.path / "rejected").glob("*.parquet"))


def test_has_ids_is_exact(store):
    store.append("b", np.ones((2, 3), np.float32), ids=["a.jpg", "b.jpg"])
    found = open_store(store.path).has_ids(["b.jpg", "c.jpg", "a.jpg"])
    assert found.tolist() == [True, False, True]


def test_the_descriptor_is_recorded(store):
    assert open_store(store.path).descriptor == {"features": [], "dim": 3}
    assert open_store(store.path).info()["descriptor"] == {"features": [], "dim": 3}
