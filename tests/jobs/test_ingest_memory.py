"""What the client of an ingest holds of the images it has taken does not grow by a Python
object an image: once committed, an image is 24 bytes of sorted hashes and digests, and an image
repeating the id or bytes of one committed earlier in the same run is still refused, naming it
(real parquet, real store, real cluster)."""

from __future__ import annotations

import hashlib
import tracemalloc

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from imgscale.jobs.ingest.commit import Pending, Taken, named_holders, receive
from imgscale.jobs.ingest.worker import Described
from imgscale.storage import FeatureStore, HashRuns, create_store, open_store
from tests.jobs.test_ingest_images import digit_images, ingest, png_bytes, rejected

pytestmark = pytest.mark.slow


def described(start: int, n: int) -> Described:
    """A partition's outcome for images start..start+n: distinct ids and bytes, 4-D rows."""
    keys = [f"shard-{i // 1000:05d}/{i:08d}" for i in range(start, start + n)]
    digests = [hashlib.sha256(key.encode()).digest() for key in keys]
    rows = np.zeros((n, 4), np.float32)
    return Described(keys, ["class0"] * n, digests, rows, [], n)


def bytes_held_after(images: int, per_commit: int) -> int:
    """Bytes still allocated by what `receive` keeps of ``images`` images taken, committed
    every ``per_commit`` (the pending rows themselves are dropped at each commit, as the
    committer does)."""
    tracemalloc.start()
    try:
        taken = Taken()
        for start in range(0, images, per_commit):
            pending = Pending()
            receive(pending, described(start, per_commit), taken)
            taken.next_commit()
            del pending
        held, _ = tracemalloc.get_traced_memory()
        del taken
        return held
    finally:
        tracemalloc.stop()


def test_the_client_holds_under_32_bytes_an_image_it_has_committed():
    """A set of ids and a dict of digests took about 250 bytes an image: 250 MB at 10⁶."""
    per_commit = 500
    few, many = bytes_held_after(5_000, per_commit), bytes_held_after(25_000, per_commit)
    assert (many - few) / 20_000 < 32


def test_repeats_of_committed_ids_and_bytes_are_left_for_the_commit_to_confirm_and_name():
    taken = Taken()
    first = Pending()
    receive(first, described(0, 3), taken)
    taken.next_commit()  # first is being committed
    taken.next_commit()  # first is in the store; its images are hashes now
    again = described(0, 3)
    again.keys[1] = "another/key"  # the bytes of image 1 under a new id
    again.digests[2] = hashlib.sha256(b"new bytes").digest()  # new bytes under image 2's id
    pending = Pending()
    receive(pending, again, taken)
    assert pending.same_bytes_as_committed == [("another/key", again.digests[1])]
    assert pending.ids_maybe_committed == {again.keys[0], again.keys[2]}
    assert pending.keys == [again.keys[0], again.keys[2]]  # kept until the store says
    assert pending.refused == []


def test_a_partition_is_probed_against_the_committed_images_in_one_call_for_ids_one_for_bytes(
    monkeypatch,
):
    taken = Taken()
    receive(Pending(), described(0, 1_000), taken)
    taken.next_commit()
    taken.next_commit()  # its images are hashes now
    probes, contains = [], HashRuns.contains
    monkeypatch.setattr(
        HashRuns,
        "contains",
        lambda self, hashes: probes.append(len(hashes)) or contains(self, hashes),
    )
    pending = Pending()
    receive(pending, described(1_000, 500), taken)
    assert probes == [500, 500]
    assert len(pending) == 500 and not pending.ids_maybe_committed


def test_an_id_or_bytes_repeated_commits_later_is_refused_naming_the_first(
    tmp_path, scheduler_address
):
    """One row group a task and a commit a row: the repeats come commits after the first."""
    images = [png_bytes(image) for image in digit_images(4, classes=(0, 1)).values()]
    ids = [f"img-{i}" for i in range(len(images))]
    rows = {
        "id": [*ids, ids[0], "copy-of-img-1"],
        "image": [*images, png_bytes(digit_images(1, classes=(2,))["digit-2/000.png"]), images[1]],
    }
    source = tmp_path / "images.parquet"
    pq.write_table(pa.table(rows), source, row_group_size=1)
    store = tmp_path / "s.zarr"
    summary = ingest(str(source), str(store), "--features", "color", "--commit-rows", "1",
                     scheduler=scheduler_address)  # fmt: skip
    assert (summary["rows"], summary["refused"]) == (len(images), 2)
    # Tasks finish in any order: of each pair, whichever came first is kept.
    stored = set(open_store(store).ids())
    assert len(stored) == len(images) and stored >= {*ids[:1], *ids[2:]}
    kept, copy = sorted({ids[1], "copy-of-img-1"} & stored), {ids[1], "copy-of-img-1"} - stored
    assert len(kept) == 1 and len(copy) == 1
    reasons = rejected(store)
    assert set(reasons) == {ids[0], *copy}
    assert f"id {ids[0]!r} is another image's" in reasons[ids[0]]
    assert f"same bytes as {kept[0]!r}" in reasons[copy.pop()]


def test_the_holder_of_repeated_bytes_is_named_from_this_ingests_own_batches_alone(
    tmp_path, monkeypatch
):
    store = create_store(tmp_path / "s.zarr", dim=2)
    for batch, ids in (("earlier", ["a", "b"]), ("mine-1", ["x", "y"]), ("mine-2", ["z"])):
        with store.writer(batch) as writer:
            digests = [hashlib.sha256(i.encode()).digest() for i in ids]
            writer.write(np.zeros((len(ids), 2), np.float32), None, ids, sha256=digests)
    read, real_read = [], FeatureStore._read_batch_rows
    monkeypatch.setattr(
        FeatureStore,
        "_read_batch_rows",
        lambda self, record, batch, columns: (
            read.append(batch["batch_id"]) or real_read(self, record, batch, columns)
        ),
    )
    repeat = hashlib.sha256(b"x").digest()
    refusals = named_holders(open_store(store.path), [("copy", repeat)], ["mine-1", "mine-2"])
    assert refusals == [("copy", repeat, "same bytes as 'x', in this ingest")]
    assert read == ["mine-2", "mine-1"]  # never the batch committed before this ingest
