"""What a user feeds `ingest` by mistake or by habit: class tables, re-ingest, removed batches,
failed writes; each answer is right or a one-line refusal that changes nothing."""

from __future__ import annotations

import errno
import multiprocessing
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from imgscale.jobs.ingest import ingest_file
from imgscale.storage import StoreError, create_store, open_store, read_class_names
from imgscale.storage import writer as writer_module
from tests.storage.conftest import random_rows, snapshot

D = 4


def _npz(path: Path, n: int, seed: int, y) -> Path:
    np.savez(path, X=random_rows(n, seed, dim=D), y=np.asarray(y))
    return path


def _chunk_files(path: Path) -> list[str]:
    return sorted(
        str(p.relative_to(path)) for p in (path / "features" / "c").rglob("*") if p.is_file()
    )


# -- class tables (finding 1, finding 6: a label of 1e9) -------------------------------------


def test_integer_labels_get_a_class_table_named_by_number(tmp_path: Path) -> None:
    src = _npz(tmp_path / "a.npz", 30, 0, np.arange(30) % 4)
    store = ingest_file(src, tmp_path / "s.zarr").store
    assert store.class_names == ["0", "1", "2", "3"]
    # A later file with a new class number extends the table; committed labels keep their names.
    ingest_file(_npz(tmp_path / "b.npz", 5, 1, [4, 4, 0, -1, 2]), store.path, split="test")
    assert store.class_names == ["0", "1", "2", "3", "4"]
    np.testing.assert_array_equal(store.labels("test"), [4, 4, 0, -1, 2])


def test_a_label_typo_that_would_create_empty_classes_is_refused(tmp_path: Path) -> None:
    store = ingest_file(
        _npz(tmp_path / "a.npz", 20, 0, np.arange(20) % 3), tmp_path / "s.zarr"
    ).store
    before = snapshot(store)
    y = np.arange(20) % 3
    y[7] = 10**9
    with pytest.raises(StoreError, match=r"label 1000000000 would create 999999997 classes"):
        ingest_file(_npz(tmp_path / "b.npz", 20, 1, y), store.path)
    assert snapshot(store) == before
    assert _chunk_files(store.path) == ["features/c/0/0"]


def test_string_labels_are_class_names_appended_in_order_of_appearance(tmp_path: Path) -> None:
    first = _npz(tmp_path / "a.npz", 4, 0, np.array(["dog", "cat", "dog", "eel"]))
    store = ingest_file(first, tmp_path / "s.zarr").store
    assert store.class_names == ["dog", "cat", "eel"]
    np.testing.assert_array_equal(store.labels(), [0, 1, 0, 2])
    table = pa.table(
        {
            "x": pa.FixedSizeListArray.from_arrays(pa.array(random_rows(3, 2, dim=D).ravel()), D),
            "label": pa.array(["eel", "fox", "cat"]),
        }
    )
    pq.write_table(table, tmp_path / "b.parquet")
    ingest_file(tmp_path / "b.parquet", store.path)
    assert store.class_names == ["dog", "cat", "eel", "fox"]
    np.testing.assert_array_equal(store.labels(), [0, 1, 0, 2, 2, 3, 1])


def test_a_parquet_label_column_of_another_type_names_file_and_column(tmp_path: Path) -> None:
    table = pa.table(
        {
            "x": pa.FixedSizeListArray.from_arrays(pa.array(random_rows(3, 2, dim=D).ravel()), D),
            "label": pa.array([0.5, 1.0, 2.0]),
        }
    )
    pq.write_table(table, tmp_path / "b.parquet")
    with pytest.raises(StoreError, match=r"b\.parquet: label column 'label' has type double"):
        ingest_file(tmp_path / "b.parquet", tmp_path / "s.zarr")
    assert not (tmp_path / "s.zarr").exists()


def test_class_names_file_names_integer_labels(tmp_path: Path) -> None:
    names = tmp_path / "names.txt"
    names.write_text("airplane\nbird\ncat\n\n")
    src = _npz(tmp_path / "a.npz", 9, 0, np.arange(9) % 3)
    store = ingest_file(src, tmp_path / "s.zarr", class_names=read_class_names(names)).store
    assert store.class_names == ["airplane", "bird", "cat"]
    assert store.info()["label_counts"] == {"airplane": 3, "bird": 3, "cat": 3}
    with pytest.raises(StoreError, match=r"labels out of range \(first 3 at row 12\)"):
        ingest_file(_npz(tmp_path / "b.npz", 4, 1, [0, 1, 2, 3]), store.path)


def test_a_class_names_file_with_a_repeat_is_refused(tmp_path: Path) -> None:
    names = tmp_path / "names.txt"
    names.write_text("cat\ndog\ncat\n")
    with pytest.raises(StoreError, match=r"names\.txt: line 3 repeats 'cat' \(line 1\)"):
        read_class_names(names)


def test_an_empty_id_is_refused(tmp_path: Path) -> None:
    store = create_store(tmp_path / "s.zarr", D)
    with pytest.raises(StoreError, match="empty id at row 1"):
        store.append("b", random_rows(2, 0, dim=D), ids=["a", ""])
    assert store.committed_rows == 0


def test_random_bytes_in_npy_are_not_reported_as_pickled_data(tmp_path: Path) -> None:
    (tmp_path / "x.npy").write_bytes(os.urandom(200))
    with pytest.raises(StoreError) as err:
        ingest_file(tmp_path / "x.npy", tmp_path / "s.zarr")
    assert "not the .npy magic" in str(err.value) and "pickle" not in str(err.value)


# -- re-ingest by content (finding 4) ---------------------------------------------------------


def test_a_touched_or_copied_file_is_skipped_by_content(tmp_path: Path) -> None:
    src = _npz(tmp_path / "a.npz", 30, 0, np.arange(30) % 3)
    first = ingest_file(src, tmp_path / "s.zarr")
    before = snapshot(first.store)
    os.utime(src, (1, 1))
    copy = shutil.copy(src, tmp_path / "copy-of-a.npz")
    for again in (ingest_file(src, first.store.path), ingest_file(copy, first.store.path)):
        assert again.skipped and again.rows == 30 and again.batch_id == first.batch_id
    assert snapshot(first.store) == before


def test_committed_rows_under_another_split_are_refused_with_the_fix(tmp_path: Path) -> None:
    src = _npz(tmp_path / "a.npz", 30, 0, np.arange(30) % 3)
    first = ingest_file(src, tmp_path / "s.zarr", split="train")
    before = snapshot(first.store)
    with pytest.raises(StoreError) as err:
        ingest_file(src, first.store.path, split="test")
    message = str(err.value)
    assert f"batch {first.batch_id!r} is already committed (30 rows) as split 'train'" in message
    assert f"imgscale remove-batch {first.store.path} {first.batch_id}" in message
    assert snapshot(first.store) == before


def test_info_lists_batches_and_split_counts(tmp_path: Path) -> None:
    a = ingest_file(_npz(tmp_path / "a.npz", 30, 0, np.arange(30) % 3), tmp_path / "s.zarr")
    b = ingest_file(_npz(tmp_path / "b.npz", 7, 1, np.arange(7) % 3), a.store.path, split="val")
    info = open_store(a.store.path).info()
    assert info["splits"] == {"train": 30, "val": 7}
    assert info["batches"] == [
        {"batch_id": a.batch_id, "rows": 30, "split": "train"},
        {"batch_id": b.batch_id, "rows": 7, "split": "val"},
    ]


# -- remove-batch (finding 4) -----------------------------------------------------------------


def _two_batches(tmp_path: Path):
    store = create_store(tmp_path / "s.zarr", D, rows_per_chunk=10)
    store.append("keep", random_rows(15, 0, dim=D), labels=np.arange(15) % 2)
    before = snapshot(store)
    store.append("oops", random_rows(17, 1, dim=D), labels=np.arange(17) % 2, split="test")
    return store, before


def test_remove_batch_restores_the_store_before_the_batch(tmp_path: Path) -> None:
    store, before = _two_batches(tmp_path)
    assert store.remove_batch("oops") == 17
    assert snapshot(store) == before
    assert _chunk_files(store.path) == ["features/c/0/0", "features/c/1/0"]
    assert not any(p.name.startswith("00000000001") for p in (store.path / "rows").iterdir())
    # The removed rows can be ingested again, e.g. under the right split.
    store.append("oops", random_rows(17, 1, dim=D), labels=np.arange(17) % 2, split="val")
    assert store.info()["splits"] == {"train": 15, "val": 17}


def test_remove_batch_refuses_an_unknown_batch(tmp_path: Path) -> None:
    # Any committed batch can be removed (tests/storage/test_remove_batch_any.py).
    store, _ = _two_batches(tmp_path)
    after = snapshot(store)
    with pytest.raises(StoreError, match=r"no batch 'nope'; it has \['keep', 'oops'\]"):
        store.remove_batch("nope")
    assert snapshot(store) == after


def _remove_then_die(path: Path, die_in: str) -> None:
    """Child process: remove batch 'oops', killed at `die_in` (before or after the commit)."""

    def die(*args, **kwargs):
        os._exit(9)

    setattr(writer_module, die_in, die)
    open_store(path).remove_batch("oops")


@pytest.mark.parametrize(
    ("die_in", "batch_left"), [("write_record", True), ("remove_uncommitted", False)]
)
def test_a_kill_mid_remove_leaves_the_old_or_the_new_store(
    tmp_path: Path, die_in: str, batch_left: bool
) -> None:
    store, before = _two_batches(tmp_path)
    with_batch = snapshot(store)
    child = multiprocessing.get_context("fork").Process(
        target=_remove_then_die, args=(store.path, die_in)
    )
    child.start()
    child.join(60)
    assert child.exitcode == 9
    assert snapshot(store) == (with_batch if batch_left else before)
    # The next writer sweeps what the killed one left and appends normally.
    store.append("next", random_rows(3, 5, dim=D), labels=[0, 1, 0])
    assert store.committed_rows == (35 if batch_left else 18)
    assert len(_chunk_files(store.path)) == (4 if batch_left else 2)


# -- failures leave nothing behind (finding 7) ------------------------------------------------


def test_a_failed_batch_leaves_no_chunk_files(tmp_path: Path) -> None:
    store = create_store(tmp_path / "s.zarr", D, rows_per_chunk=10)
    store.append("b0", random_rows(10, 0, dim=D))
    with pytest.raises(RuntimeError), store.writer("b1") as w:
        w.write(random_rows(45, 1, dim=D))  # four whole chunks reach disk
        assert len(_chunk_files(store.path)) == 5
        raise RuntimeError("the source broke")
    assert _chunk_files(store.path) == ["features/c/0/0"]
    assert open_store(store.path).features().shape == (10, D)


def test_a_full_disk_is_one_line_naming_the_store_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = create_store(tmp_path / "s.zarr", D, rows_per_chunk=10)
    store.append("b0", random_rows(10, 0, dim=D))
    before = snapshot(store)
    writes = []

    def flush_until_full(self, final):
        writes.append(final)
        if len(writes) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_flush(self, final)

    real_flush = writer_module.BatchWriter._flush
    monkeypatch.setattr(writer_module.BatchWriter, "_flush", flush_until_full)
    src = np.savez(tmp_path / "a.npz", X=random_rows(40, 1, dim=D))
    del src
    with pytest.raises(StoreError) as err:
        ingest_file(tmp_path / "a.npz", store.path, block_rows=10)
    message = str(err.value)
    assert message == (
        f"store {store.path}: no space left on device; nothing was committed and the rows "
        "written so far were removed"
    )
    assert snapshot(store) == before and _chunk_files(store.path) == ["features/c/0/0"]


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
def test_a_real_full_disk_frees_what_the_failed_batch_wrote(tmp_path: Path) -> None:
    volume = tmp_path / "volume"
    volume.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(volume)], check=True)
    try:
        store = create_store(volume / "s.zarr", 256, rows_per_chunk=512)
        store.append("b0", random_rows(512, 0, dim=256))  # 0.5 MiB
        np.save(tmp_path / "big.npy", random_rows(8 * 512, 1, dim=256))  # 4 MiB: does not fit
        np.save(volume / "filler.npy", np.zeros(2 * 2**20, np.uint8))
        with pytest.raises(StoreError, match="no space left on device"):
            ingest_file(tmp_path / "big.npy", store.path, block_rows=512)
        used = sum(p.stat().st_size for p in store.path.rglob("*") if p.is_file())
        assert used < 600_000 and open_store(store.path).committed_rows == 512
        (volume / "filler.npy").unlink()
        assert ingest_file(tmp_path / "big.npy", store.path, block_rows=512).rows == 4096
    finally:
        subprocess.run(["umount", str(volume)], check=True)
