"""Each row's content digest is the first 16 bytes of its sha256, so a PQ store stays small beside
its float32 rows; stores written with whole 32-byte digests keep working, and an imgscale that
knows only whole digests refuses a store holding short ones.

tests/fixtures/store-sha256-32 was written at 8a5dace (rows files with 32-byte digests): a raw
store of D = 8, 16 rows a chunk, classes "a" and "b", with a batch of 40 vectors ingested from
a .npy file (split train, each row's digest the sha256 of its float32 values) and a batch
"images-1" of 6 rows (split test, ids ``photo/{i}.jpg``, digests ``sha256(b"image-{i}")``).
store-sha256-32-features.npy holds its 46 rows as written.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from imgscale.jobs.ingest import ingest_file
from imgscale.pipeline.pq import PQCodec
from imgscale.storage import (
    StoreError,
    compact_store,
    create_coded_store,
    open_store,
)
from imgscale.storage.writer import CopyWriter, write_row_chunk

FIXTURES = Path(__file__).parents[1] / "fixtures"
IMAGE_DIGESTS = [hashlib.sha256(f"image-{i}".encode()).digest() for i in range(6)]


@pytest.fixture
def old_store(tmp_path):
    path = tmp_path / "store-sha256-32"
    shutil.copytree(FIXTURES / "store-sha256-32", path)
    return path


def _record(path: Path) -> dict:
    return json.loads((path / "zarr.json").read_text())["attributes"]["imgscale"]


def _digest_widths(path: Path) -> list[int]:
    """The width of the digest column of each rows file the record names, in row order."""
    return [
        pq.read_schema(path / b["rows_file"]).field("sha256").type.byte_width
        for b in _record(path)["batches"]
    ]


def test_a_store_written_with_whole_digests_reads_as_it_was_written(old_store):
    store = open_store(old_store)
    assert _record(old_store)["schema_version"] == 1
    assert _digest_widths(old_store) == [32, 32]
    expected = np.load(FIXTURES / "store-sha256-32-features.npy")
    np.testing.assert_array_equal(store.features().compute(scheduler="synchronous"), expected)
    assert store.split_counts() == {"train": 40, "test": 6}
    hashes = store.content_hashes()
    vectors = [hashlib.sha256(row.tobytes()).digest()[:16] for row in expected[:40]]
    images = [d[:16] for d in IMAGE_DIGESTS]
    assert hashes.column("sha256").to_pylist() == vectors + images
    assert hashes.column("id").to_pylist()[40:] == [f"photo/{i}.jpg" for i in range(6)]


def test_forget_by_a_whole_sha256_finds_rows_stored_with_whole_and_with_short_digests(
    old_store, tmp_path
):
    store = open_store(old_store)
    rng = np.random.default_rng(7)
    with store.writer("images-2") as writer:
        writer.write(
            rng.normal(size=(2, 8)).astype(np.float32),
            [0, 1],
            ["photo/new-0.jpg", "photo/new-1.jpg"],
            "test",
            sha256=[hashlib.sha256(b"new-0").digest(), hashlib.sha256(b"new-1").digest()],
        )
    assert _digest_widths(old_store) == [32, 32, 16]
    whole_digests = [IMAGE_DIGESTS[3].hex(), hashlib.sha256(b"new-1").hexdigest()]
    result = subprocess.run(
        [sys.executable, "-m", "imgscale", "forget", str(old_store), "--sha256", whole_digests[0],
         "--sha256", whole_digests[1], "--json"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    ids = open_store(old_store).rows(columns=["id"]).column("id").to_pylist()
    assert "photo/3.jpg" not in ids and "photo/new-1.jpg" not in ids
    assert len(ids) == 46
    # A digest of no row's content, whole, still names no row.
    with pytest.raises(StoreError, match="names no live row"):
        open_store(old_store).forget(sha256=[hashlib.sha256(b"image-9").hexdigest()])


def test_rows_of_an_old_store_given_again_in_another_file_are_counted_as_repeated(
    old_store, tmp_path
):
    expected = np.load(FIXTURES / "store-sha256-32-features.npy")
    order = np.random.default_rng(3).permutation(40)
    again = np.concatenate([expected[:40][order].astype(np.float64), np.full((2, 8), 0.5)])
    np.save(tmp_path / "again.npy", again)
    result = ingest_file(tmp_path / "again.npy", old_store, split="test")
    assert result.repeated == {"train": 40}
    assert result.rows == 42
    assert _digest_widths(old_store) == [32, 32, 16]
    record = _record(old_store)
    # The store now holds short digests: it takes the later version.
    assert record["row_digest_bytes"] == 16 and record["schema_version"] == 3
    # And the new batch's rows are known by their short digests in turn.
    np.save(tmp_path / "third.npy", again[-2:])
    assert ingest_file(tmp_path / "third.npy", old_store, split="train").repeated == {"test": 2}


def test_compaction_of_an_old_store_keeps_each_rows_digest_and_writes_short_ones(old_store):
    store = open_store(old_store)
    before = store.content_hashes()
    store.forget(["photo/2.jpg"])
    compact_store(old_store)
    store = open_store(old_store)
    after = store.content_hashes()
    kept = [i for i, name in enumerate(before.column("id").to_pylist()) if name != "photo/2.jpg"]
    assert after.column("id").to_pylist() == before.column("id").take(kept).to_pylist()
    assert after.column("sha256").to_pylist() == before.column("sha256").take(kept).to_pylist()
    assert _digest_widths(old_store) == [16, 16]
    assert _record(old_store)["schema_version"] == 3
    store.forget(sha256=[IMAGE_DIGESTS[4].hex()])
    assert "photo/4.jpg" not in store.rows(columns=["id"]).column("id").to_pylist()


def test_an_imgscale_knowing_only_whole_digests_refuses_a_store_with_short_ones(
    old_store, tmp_path, monkeypatch
):
    np.save(tmp_path / "more.npy", np.ones((3, 8), np.float32))
    ingest_file(tmp_path / "more.npy", old_store)
    import imgscale.storage.layout as layout

    # That imgscale's versions are those of today's without the step short digests take.
    monkeypatch.setattr(layout, "ROW_DIGESTS_VERSION_STEP", 0)
    with pytest.raises(StoreError, match="schema_version 3, expected 1; this imgscale cannot"):
        open_store(old_store)


def test_a_store_of_short_digests_forgetting_rows_takes_the_tombstone_version_after_it(
    old_store, tmp_path
):
    np.save(tmp_path / "more.npy", np.ones((3, 8), np.float32))
    ingest_file(tmp_path / "more.npy", old_store)
    open_store(old_store).forget(["photo/0.jpg"])
    assert _record(old_store)["schema_version"] == 4
    assert open_store(old_store).split_counts() == {"train": 43, "test": 5}


# -- the PQ store's size -----------------------------------------------------------------------

# The store: 28 x 28 rows (784-D) in M = 112 code bytes a row. Its rows fill two chunks
# of the float32 store (64 MiB, 21,399 rows each), which the PQ store's codes follow: a store's
# last chunk is stored whole, so a store whose rows end early in a chunk holds up to a chunk of
# zero codes more, a cost of chunking and not of metadata. 42,798 rows make one batch whose rows
# file's fixed parquet overhead (footer, page headers) is under 0.1 byte a row, as in a real
# store, and whose codebook (256 x 784 float32, 0.8 MB) is shared by as many rows as the 60,000
# of Fashion-MNIST's training split would share it with, within 30%.
DIM, M, ROWS = 784, 112, 2 * 21_399


def test_a_pq_store_of_112_code_bytes_a_row_is_20_times_smaller_than_its_float32_rows(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.random((ROWS, DIM), dtype=np.float32)
    np.save(tmp_path / "rows.npy", X)
    np.save(tmp_path / "labels.npy", rng.integers(0, 10, ROWS))
    source = ingest_file(
        tmp_path / "rows.npy", tmp_path / "float.zarr", labels_path=tmp_path / "labels.npy"
    ).store
    (tmp_path / "rows.npy").unlink()
    with warnings.catch_warnings():  # few rows a centroid: the codes' quality is not measured
        warnings.simplefilter("ignore")
        codec = PQCodec.train(X[:2560], M, seed=0, niter=2)
    store = create_coded_store(
        tmp_path / "pq.zarr", codec, class_names=source.class_names,
        rows_per_chunk=source.rows_per_chunk,
    )  # fmt: skip
    rpc = store.rows_per_chunk
    assert ROWS % rpc == 0
    with CopyWriter(store, source):
        for i in range(-(-ROWS // rpc)):
            write_row_chunk(store.path, i, codec.encode(X[i * rpc : (i + 1) * rpc]))
    del X

    # The copied rows files hold short digests: the PQ store takes their version (2 + 2).
    assert _record(tmp_path / "pq.zarr")["schema_version"] == 4
    float_bytes = _du(tmp_path / "float.zarr")
    pq_bytes = _du(tmp_path / "pq.zarr")
    info = open_store(tmp_path / "pq.zarr").info()
    assert info["raw_float32_bytes"] == ROWS * DIM * 4
    # Against its float32 rows as `imgscale info` counts them, and against the float32 store.
    assert info["compression_ratio"] >= 20, info["compression_ratio"]
    assert float_bytes / pq_bytes >= 20, float_bytes / pq_bytes
    # Of a row's metadata, its 16-byte digest is nearly all.
    rows_file = next((tmp_path / "pq.zarr" / "rows").iterdir())
    assert info["metadata_bytes_per_row"] == round(rows_file.stat().st_size / ROWS, 2)
    assert 16 <= info["metadata_bytes_per_row"] < 18


def _du(path: Path) -> int:
    """Bytes of the files under ``path``, as `du -sb` counts them."""
    result = subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=True)
    return int(result.stdout.split()[0])


def test_info_reports_the_metadata_bytes_a_row_takes(old_store):
    from click.testing import CliRunner

    from imgscale.jobs.cli import cli

    rows_files = sum(f.stat().st_size for f in (old_store / "rows").iterdir())
    result = CliRunner().invoke(cli, ["info", str(old_store), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["metadata_bytes_per_row"] == round(rows_files / 46, 2)
    result = CliRunner().invoke(cli, ["info", str(old_store)])
    assert f"metadata_bytes_per_row: {round(rows_files / 46, 2)}" in result.stdout
