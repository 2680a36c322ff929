"""A PQ store's codebook and rotation decide every decoded value, so a damaged one is refused by
name: a deleted chunk used to read as zeros, every row then decoded to zeros and a classifier
trained on them scored at chance with exit 0."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr
from click.testing import CliRunner

from imgscale.jobs.cli import cli
from imgscale.pipeline.pq import PQCodec, random_rotation
from imgscale.storage import StoreError, create_coded_store

DIM, M = 16, 4


def _blobs(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 4, n)
    centres = np.random.default_rng(99).normal(size=(4, DIM)) * 3
    return (centres[labels] + rng.normal(size=(n, DIM))).astype(np.float32), labels


@pytest.fixture
def pq_store(tmp_path: Path):
    X, y = _blobs(3000, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = PQCodec.train(X, M, seed=0, niter=5)
    codec = PQCodec(plain.codebook, random_rotation(DIM, seed=1))
    store = create_coded_store(tmp_path / "pq.zarr", codec, rows_per_chunk=64)
    store.append("b0", codec.encode(X[:150]), labels=y[:150], split="train")
    return store


def _only_chunk(store, name: str) -> Path:
    (chunk,) = [p for p in (Path(store.path) / name / "c").rglob("*") if p.is_file()]
    return chunk


def _delete(chunk: Path) -> None:
    chunk.unlink()


def _flip_a_byte(chunk: Path) -> None:
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0xFF
    chunk.write_bytes(bytes(data))


@pytest.mark.parametrize("name", ["codebook", "rotation"])
@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (_delete, r"has 0 of its 1 chunks; expected all \(a chunk file was deleted\)"),
        (_flip_a_byte, r"unreadable \(.*\); expected .* float32 with intact checksummed chunks"),
    ],
)
def test_a_damaged_side_array_is_refused_by_name(pq_store, name, damage, expected) -> None:
    damage(_only_chunk(pq_store, name))
    where = rf"^store {pq_store.path}: {pq_store.path / name} "
    with pytest.raises(StoreError, match=where + expected):
        pq_store.features().compute()
    with pytest.raises(StoreError, match=where + expected):
        pq_store.verify()


def test_a_side_array_without_checksums_is_refused(pq_store) -> None:
    codebook = pq_store.codec.codebook
    rewritten = zarr.create_array(
        str(pq_store.path), name="codebook", shape=codebook.shape, dtype="float32", overwrite=True
    )
    rewritten[...] = codebook
    with pytest.raises(StoreError, match=r"codebook is not checksummed; expected chunks ending"):
        pq_store.features().compute()


def test_train_refuses_a_pq_store_whose_codebook_chunk_was_deleted(tmp_path: Path) -> None:
    X, y = _blobs(3000, seed=2)
    np.savez(tmp_path / "rows.npz", X=X, y=y)
    raw, pq = tmp_path / "raw.zarr", tmp_path / "pq.zarr"
    runner = CliRunner()
    assert runner.invoke(cli, ["ingest", str(tmp_path / "rows.npz"), str(raw)]).exit_code == 0
    compress = runner.invoke(cli, ["compress", str(raw), str(pq), "--m", str(M), "--rotate"])
    assert compress.exit_code == 0, compress.output
    (pq / "codebook" / "c" / "0" / "0" / "0").unlink()
    model = tmp_path / "ncm.model"
    result = runner.invoke(cli, ["train", str(pq), str(model), "--method", "ncm"])
    assert result.exit_code == 1, result.output
    assert str(result.exception).startswith(f"store {pq}: {pq / 'codebook'} has 0 of its 1 chunks")
    assert not model.exists()
