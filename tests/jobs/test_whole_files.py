"""Files of many images committed whole are left out of the next ingest while unchanged: a
re-ingest of tar shards or parquet that finds nothing new reads none of them, a shard appended to
is read again for its new images alone, and a file not committed whole is read again (real
shards, real parquet, real stores, a real cluster)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from imgscale.jobs.cli import cli
from imgscale.jobs.ingest import plan_ingest
from imgscale.jobs.ingest.whole_files import find_whole_files
from imgscale.storage import StoreError, create_store, open_image_source, open_store
from imgscale.storage.images.listing import whole_files_file
from imgscale.storage.images.parquet_images import ParquetPartition
from tests.jobs.test_ingest_images import digit_images, ingest, png_bytes

pytestmark = pytest.mark.slow


def write_shards(folder: Path, shards: int, per_shard: int) -> dict[str, list[str]]:
    """``shards`` WebDataset shards of ``per_shard`` digits each (a .png and a .cls a sample);
    the keys of each shard by its path."""
    images = list(digit_images(-(-shards * per_shard // 3)).items())
    keys = {}
    for n in range(shards):
        path = folder / f"shards-{n:04d}.tar"
        keys[str(path)] = add_samples(path, images[n * per_shard : (n + 1) * per_shard], "w")
    return keys


def add_samples(path: Path, images: list, mode: str) -> list[str]:
    keys = []
    with tarfile.open(path, mode) as tar:
        for name, image in images:
            key = f"{path.stem}-{name.replace('/', '_')[:-4]}"
            for suffix, data in ((".png", png_bytes(image)), (".cls", name[:7].encode())):
                info = tarfile.TarInfo(key + suffix)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            keys.append(key)
    return keys


@pytest.fixture
def tar_opens(monkeypatch) -> list[str]:
    """The files `tarfile.open` opens in this process, as it opens them."""
    opened, real_open = [], tarfile.open

    def counting_open(name=None, *args, **kwargs):
        opened.append(str(name or kwargs.get("fileobj")))
        return real_open(name, *args, **kwargs)

    monkeypatch.setattr(tarfile, "open", counting_open)
    return opened


def test_a_second_ingest_of_unchanged_shards_reads_none_of_them(
    tmp_path, scheduler_address, tar_opens
):
    keys = write_shards(tmp_path, shards=3, per_shard=4)
    source, store = str(tmp_path / "shards-{0000..0002}.tar"), tmp_path / "s.zarr"
    first = ingest(source, str(store), "--features", "color", scheduler=scheduler_address)
    assert (first["rows"], first["partitions"]) == (12, 1)  # cheap shards: one task
    tar_opens.clear()
    plan = plan_ingest(source, store)
    assert (plan.partitions, plan.total, tar_opens) == ([], 0, [])
    assert plan.whole_files.unchanged == set(keys)
    again = ingest(source, str(store), scheduler=scheduler_address)
    assert (again["rows"], again["partitions"], again["images_seen"]) == (0, 0, 0)
    # Named as another split, the same shards are new images: read again.
    plan = plan_ingest(source, store, split="test")
    assert [str(s) for p in plan.partitions for s in p.shards] == list(keys)


def test_a_shard_appended_to_is_read_again_and_only_its_new_images_are_added(
    tmp_path, scheduler_address
):
    keys = write_shards(tmp_path, shards=3, per_shard=4)
    source, store = str(tmp_path / "shards-{0000..0002}.tar"), tmp_path / "s.zarr"
    ingest(source, str(store), "--features", "color", scheduler=scheduler_address)
    grown = tmp_path / "shards-0001.tar"
    added = add_samples(grown, list(digit_images(2, classes=(1,), offset=20).items()), "a")
    plan = plan_ingest(source, store)
    assert [[str(s) for s in p.shards] for p in plan.partitions] == [[str(grown)]]
    summary = ingest(source, str(store), scheduler=scheduler_address)
    assert (summary["rows"], summary["images_seen"]) == (2, 2)
    before = [key for shard in keys.values() for key in shard]
    assert sorted(open_store(store).ids()) == sorted([*before, *added])
    assert plan_ingest(source, store).partitions == []  # recorded whole again, as it is now


def test_rows_forgotten_since_make_the_shards_holding_them_read_again(tmp_path, scheduler_address):
    keys = write_shards(tmp_path, shards=2, per_shard=3)
    source, store = str(tmp_path / "shards-{0000..0001}.tar"), tmp_path / "s.zarr"
    ingest(source, str(store), "--features", "color", scheduler=scheduler_address)
    forgotten = keys[str(tmp_path / "shards-0000.tar")][1]
    result = CliRunner().invoke(cli, ["forget", str(store), forgotten])
    assert result.exit_code == 0, result.output
    read = [str(s) for p in plan_ingest(source, store).partitions for s in p.shards]
    assert read == list(keys)
    summary = ingest(source, str(store), scheduler=scheduler_address)
    assert summary["rows"] == 1 and forgotten in set(open_store(store).ids())


def test_a_file_is_whole_once_every_partition_reading_it_is_committed_and_read(tmp_path):
    """A parquet file read in two slices, and a run that stops (killed, or a task failing) after
    committing one of them: the file is not recorded, so the next ingest reads it again. A file
    holding an image that could not be read is not recorded either."""
    rows = {"id": [f"img-{i}" for i in range(4)], "image": [b"x"] * 4}
    pq.write_table(pa.table(rows), tmp_path / "a.parquet", row_group_size=4)
    pq.write_table(pa.table(rows), tmp_path / "b.parquet", row_group_size=4)
    images = open_image_source(tmp_path)
    a, b = (str(f) for f in images.source_files)
    store = create_store(tmp_path / "s.zarr", dim=2)
    whole = find_whole_files(store, "train", images.source_files)
    whole.read_by(images.partitions(2))  # a in two slices, b in two
    whole.committed([a])
    whole.committed([b], unreadable=[b])
    assert whole.whole == set() and not whole.news
    whole.committed([a, b])
    assert whole.whole == {a} and whole.news
    whole.keep(store)
    again = find_whole_files(store, "train", images.source_files)
    assert again.unchanged == {a}
    assert [str(p.file) for p in images.partitions(2, leave_out=again.unchanged)] == [b, b]


def test_a_reingest_of_unchanged_parquet_reads_no_id_column(
    tmp_path, scheduler_address, monkeypatch
):
    images = [png_bytes(image) for image in digit_images(2).values()]
    rows = {"id": [f"img-{i}" for i in range(len(images))], "image": images}
    pq.write_table(pa.table(rows), tmp_path / "images.parquet", row_group_size=2)
    source, store = str(tmp_path / "images.parquet"), tmp_path / "s.zarr"
    ingest(source, str(store), "--features", "color", scheduler=scheduler_address)
    read, real_read_keys = [], ParquetPartition.read_keys
    monkeypatch.setattr(
        ParquetPartition, "read_keys", lambda self: read.append(self) or real_read_keys(self)
    )
    plan = plan_ingest(source, store)
    assert (plan.partitions, plan.total, read) == ([], 0, [])


def test_a_damaged_record_of_whole_files_is_refused_by_name(tmp_path):
    write_shards(tmp_path, shards=1, per_shard=1)
    store = create_store(tmp_path / "s.zarr", dim=2)
    record = whole_files_file(store.path, "train")
    record.parent.mkdir()
    record.write_bytes(b"not parquet")
    with pytest.raises(StoreError, match=f"{record} is not a readable record of files"):
        plan_ingest(str(tmp_path / "shards-0000.tar"), store.path, features="color")
