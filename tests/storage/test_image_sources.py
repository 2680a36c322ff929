"""Image sources on files the tests write: folders, list files, tar shards, parquet, and s3."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from imgscale.storage import (
    StoreError,
    open_image_source,
    read_partition,
    use_storage_options,
)
from imgscale.storage.images.braces import expand_braces


def write(path: Path, data: bytes) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return data


def fake_jpeg(n: int) -> bytes:
    """Distinct bytes per image: sources hand bytes over untouched, they never decode them."""
    return b"\xff\xd8\xff" + f"image {n}".encode()


def read_all(source, images_per_partition: int = 256, skip=None) -> list:
    parts = source.partitions(images_per_partition)
    return [image for part in parts for image in read_partition(part, skip)]


def refusal(spec, **options) -> str:
    with pytest.raises(StoreError) as caught:
        open_image_source(spec, **options)
    message = str(caught.value)
    assert "\n" not in message
    return message


def write_shard(path: Path, members: list[tuple[str, bytes]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


# --- folders ----------------------------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    write(root / "cat" / "0001.jpg", fake_jpeg(1))
    write(root / "cat" / "indoor" / "0002.PNG", fake_jpeg(2))
    write(root / "dog" / "0003.webp", fake_jpeg(3))
    write(root / "dog" / ".0004.jpg", fake_jpeg(4))  # hidden
    write(root / ".thumbs" / "0005.jpg", fake_jpeg(5))  # hidden folder
    write(root / "dog" / "notes.txt", b"not an image")
    return root


def test_a_class_tree_is_labelled_by_its_top_folder_and_keyed_by_relative_path(tree):
    source = open_image_source(tree)
    assert (source.kind, source.labelled, source.images) == ("folder", True, 3)
    images = read_all(source)
    assert [(i.key, i.label) for i in images] == [
        ("cat/0001.jpg", "cat"),
        ("cat/indoor/0002.PNG", "cat"),
        ("dog/0003.webp", "dog"),
    ]
    assert [i.data for i in images] == [fake_jpeg(1), fake_jpeg(2), fake_jpeg(3)]
    assert all(i.problem is None for i in images)


def test_a_flat_folder_is_unlabelled(tmp_path):
    for n in range(3):
        write(tmp_path / f"{n}.jpg", fake_jpeg(n))
    source = open_image_source(tmp_path)
    assert source.labelled is False
    assert [(i.key, i.label) for i in read_all(source)] == [(f"{n}.jpg", None) for n in range(3)]


def test_images_both_at_the_top_and_in_subfolders_are_refused(tree):
    write(tree / "stray.jpg", fake_jpeg(9))
    message = refusal(tree)
    assert message.startswith(f"{tree}: images both at the top (1, e.g. stray.jpg)")


def test_a_folder_without_images_is_refused(tmp_path):
    write(tmp_path / "readme.txt", b"hello")
    assert refusal(tmp_path).startswith(f"{tmp_path}: no images found")


def test_a_folder_of_tar_shards_is_refused_naming_the_pattern_to_use(tmp_path):
    write(tmp_path / "shards-0000.tar", b"")
    write(tmp_path / "shards-0001.tar", b"")
    message = refusal(tmp_path)
    assert message.startswith(f"{tmp_path}: a folder of 2 tar shards (shards-0000.tar...)")
    assert f"'{tmp_path / '*.tar'}'" in message


def test_a_path_that_does_not_exist_is_refused(tmp_path):
    assert refusal(tmp_path / "nowhere") == f"{tmp_path / 'nowhere'}: no such file or folder"


def test_partitions_hold_at_most_the_asked_number_of_keys_in_order(tmp_path):
    for n in range(7):
        write(tmp_path / "c" / f"{n}.jpg", fake_jpeg(n))
    parts = open_image_source(tmp_path).partitions(images_per_partition=3)
    assert [part.keys for part in parts] == [
        ("c/0.jpg", "c/1.jpg", "c/2.jpg"),
        ("c/3.jpg", "c/4.jpg", "c/5.jpg"),
        ("c/6.jpg",),
    ]


def test_partitions_of_the_images_only_selects_in_listing_order(tmp_path):
    for n in range(7):
        write(tmp_path / "c" / f"{n}.jpg", fake_jpeg(n))
    source = open_image_source(tmp_path)
    only = [n % 3 == 0 for n in range(7)]
    parts = source.partitions(images_per_partition=2, only=only)
    assert [part.keys for part in parts] == [("c/0.jpg", "c/3.jpg"), ("c/6.jpg",)]
    assert [i.data for part in parts for i in read_partition(part)] == [
        fake_jpeg(0),
        fake_jpeg(3),
        fake_jpeg(6),
    ]
    with pytest.raises(ValueError, match="6 flags for 7 images"):
        source.partitions(only=only[:6])


def test_skipped_images_are_not_read(tree):
    source = open_image_source(tree)
    (tree / "cat" / "0001.jpg").unlink()  # reading it now would report a problem
    images = read_all(source, skip=lambda key: key.startswith("cat/0001"))
    assert [(i.key, i.problem) for i in images] == [
        ("cat/indoor/0002.PNG", None),
        ("dog/0003.webp", None),
    ]


def test_an_image_that_vanished_after_listing_comes_with_a_problem(tree):
    source = open_image_source(tree)
    (tree / "dog" / "0003.webp").unlink()
    vanished = read_all(source)[-1]
    assert (vanished.key, vanished.label, vanished.data) == ("dog/0003.webp", "dog", b"")
    missing = tree / "dog" / "0003.webp"  # the path read, resolved: a list's are relative
    assert vanished.problem == f"cannot read {missing}: No such file or directory"


def test_a_missing_file_of_a_list_is_named_by_the_path_it_resolved_to(tmp_path):
    listing = tmp_path / "lists" / "train.csv"
    write(tmp_path / "lists" / "imgs" / "a.jpg", fake_jpeg(1))
    listing.write_text("path\nimgs/a.jpg\nimgs/gone.jpg\n")
    gone = read_all(open_image_source(listing))[-1]
    assert gone.problem == (
        f"cannot read {tmp_path / 'lists' / 'imgs' / 'gone.jpg'}: No such file or directory"
    )


# --- list files -------------------------------------------------------------------------------


def test_a_csv_list_resolves_relative_paths_against_its_folder_and_keys_by_path(tmp_path):
    a = write(tmp_path / "lists" / "imgs" / "a.jpg", fake_jpeg(1))
    b = write(tmp_path / "elsewhere" / "b.jpg", fake_jpeg(2))
    listing = tmp_path / "lists" / "train.csv"
    listing.write_text(f"path,label\nimgs/a.jpg,cat\n{tmp_path}/elsewhere/b.jpg,\n")
    source = open_image_source(listing)
    assert (source.kind, source.labelled, source.images) == ("list", True, 2)
    assert source.partitions()[0].keys == ("imgs/a.jpg", f"{tmp_path}/elsewhere/b.jpg")
    assert [(i.label, i.data) for i in read_all(source)] == [("cat", a), (None, b)]


def test_a_parquet_list_with_an_id_column_is_keyed_by_id_and_integer_labels_are_names(tmp_path):
    write(tmp_path / "x.jpg", fake_jpeg(1))
    write(tmp_path / "y.jpg", fake_jpeg(2))
    table = pa.table({"path": ["x.jpg", "y.jpg"], "label": [3, 0], "id": [17, 18]})
    pq.write_table(table, tmp_path / "list.parquet")
    source = open_image_source(tmp_path / "list.parquet")
    assert source.kind == "list"
    assert [(i.key, i.label, i.data) for i in read_all(source)] == [
        ("17", "3", fake_jpeg(1)),
        ("18", "0", fake_jpeg(2)),
    ]


def test_the_column_names_of_a_list_can_be_chosen(tmp_path):
    write(tmp_path / "x.jpg", fake_jpeg(1))
    (tmp_path / "l.csv").write_text("file,class,name\nx.jpg,cat,first\n")
    source = open_image_source(
        tmp_path / "l.csv", path_column="file", label_column="class", id_column="name"
    )
    assert [(i.key, i.label) for i in read_all(source)] == [("first", "cat")]


def test_an_empty_list_is_refused(tmp_path):
    (tmp_path / "l.csv").write_text("path,label\n")
    assert refusal(tmp_path / "l.csv") == (
        f"{tmp_path / 'l.csv'}: the list is empty; expected one image path a row"
    )


def test_a_list_without_the_path_column_is_refused(tmp_path):
    (tmp_path / "l.csv").write_text("file,label\na.jpg,cat\n")
    assert "no column 'path'" in refusal(tmp_path / "l.csv")


def test_a_list_whose_labels_are_neither_text_nor_integers_is_refused(tmp_path):
    pq.write_table(pa.table({"path": ["a.jpg"], "label": [0.5]}), tmp_path / "l.parquet")
    message = refusal(tmp_path / "l.parquet")
    assert (
        message == f"{tmp_path / 'l.parquet'}: column 'label' is double, expected text or integers"
    )


def test_a_list_naming_one_key_twice_is_refused(tmp_path):
    (tmp_path / "l.csv").write_text("path\na.jpg\nb.jpg\na.jpg\n")
    assert refusal(tmp_path / "l.csv").endswith("path 'a.jpg' is on rows 0 and 2")


# --- tar shards -------------------------------------------------------------------------------


def test_tar_samples_are_keyed_by_webdataset_key_and_labelled_by_cls_or_json(tmp_path):
    write_shard(
        tmp_path / "s.tar",
        [
            ("train/0001.jpg", fake_jpeg(1)),
            ("train/0001.cls", b"cat\n"),
            ("train/0002.json", json.dumps({"label": 3}).encode()),
            ("train/0002.png", fake_jpeg(2)),
            ("train/0003.jpeg", fake_jpeg(3)),
            ("train/0003.json", json.dumps({"cls": "dog"}).encode()),
            ("train/0004.seg.png", b"a mask, not the image"),
            ("train/0004.jpg", fake_jpeg(4)),
            ("train/0005.txt", b"a caption, no image"),
        ],
    )
    source = open_image_source(tmp_path / "s.tar")
    assert (source.kind, source.labelled, source.images) == ("tar", None, None)
    (part,) = source.partitions()
    assert part.keys is None
    assert [(i.key, i.label, i.data) for i in read_partition(part)] == [
        ("train/0001", "cat", fake_jpeg(1)),
        ("train/0002", "3", fake_jpeg(2)),
        ("train/0003", "dog", fake_jpeg(3)),
        ("train/0004", None, fake_jpeg(4)),
    ]


def test_a_cls_that_is_not_text_or_a_json_without_label_leaves_the_label_none(tmp_path):
    write_shard(
        tmp_path / "s.tar",
        [
            ("a.jpg", fake_jpeg(1)),
            ("a.cls", b"\xff\xfe\x00\x01"),
            ("b.jpg", fake_jpeg(2)),
            ("b.json", json.dumps({"caption": "a dog"}).encode()),
            ("c.jpg", fake_jpeg(3)),
            ("c.json", b"{not json"),
        ],
    )
    images = read_all(open_image_source(tmp_path / "s.tar"))
    assert [(i.key, i.label) for i in images] == [("a", None), ("b", None), ("c", None)]


def test_a_brace_pattern_names_shards_in_order_one_partition_each(tmp_path):
    for n in range(3):
        write_shard(
            tmp_path / f"shards-{n:04d}.tar", [(f"{n}-{k}.jpg", fake_jpeg(k)) for k in range(5)]
        )
    source = open_image_source(f"{tmp_path}/shards-{{0002..0000}}.tar")
    parts = source.partitions(images_per_partition=2)
    assert [part.shards[0].name for part in parts] == [f"shards-000{n}.tar" for n in (2, 1, 0)]
    assert [i.key for i in read_partition(parts[0])] == [f"2-{k}" for k in range(5)]


def test_local_shards_smaller_than_a_partition_are_read_together_in_order(tmp_path):
    for n in range(3):
        write_shard(tmp_path / f"s-{n}.tar", [(f"{n}-{k}.jpg", fake_jpeg(k)) for k in range(5)])
    source = open_image_source(f"{tmp_path}/s-{{0..2}}.tar")
    assert source.estimated_images() == 15
    assert source.estimated_images(frozenset({str(tmp_path / "s-1.tar")})) == 10
    parts = source.partitions(images_per_partition=10)
    assert [[shard.name for shard in part.shards] for part in parts] == [
        ["s-0.tar", "s-1.tar"],
        ["s-2.tar"],
    ]
    assert [i.key for i in read_partition(parts[0])] == [
        f"{n}-{k}" for n in (0, 1) for k in range(5)
    ]


def test_a_glob_names_shards_in_sorted_order(tmp_path):
    for name in ("b.tar", "a.tar", "c.txt"):
        write_shard(tmp_path / name, [(f"{name}-0.jpg", fake_jpeg(0))])
    parts = open_image_source(f"{tmp_path}/*.tar").partitions()
    assert [shard.name for part in parts for shard in part.shards] == ["a.tar", "b.tar"]


def test_a_missing_shard_of_a_brace_pattern_is_refused(tmp_path):
    write_shard(tmp_path / "s-0.tar", [("a.jpg", fake_jpeg(0))])
    message = refusal(f"{tmp_path}/s-{{0..2}}.tar")
    assert message.endswith(f"{tmp_path / 's-1.tar'} does not exist (2 of 3 shards missing)")


def test_skipped_tar_samples_are_left_out(tmp_path):
    write_shard(
        tmp_path / "s.tar", [(f"{k}.{e}", fake_jpeg(k)) for k in range(4) for e in ("jpg", "cls")]
    )
    images = read_all(open_image_source(tmp_path / "s.tar"), skip=lambda key: key in {"1", "2"})
    assert [i.key for i in images] == ["0", "3"]


def test_a_shard_cut_inside_an_image_yields_it_with_a_problem_after_the_whole_ones(tmp_path):
    members = [(f"{k}.jpg", bytes([k]) * 3000) for k in range(3)]
    write_shard(tmp_path / "s.tar", members)
    data = (tmp_path / "s.tar").read_bytes()
    (tmp_path / "s.tar").write_bytes(data[: 512 + 3072 + 512 + 1000])  # inside member 1
    images = read_all(open_image_source(tmp_path / "s.tar"))
    assert [(i.key, i.problem is None) for i in images] == [("0", True), ("1", False)]
    assert images[0].data == members[0][1]
    assert images[1].problem.startswith("unreadable tar member 1.jpg")


@pytest.mark.parametrize(
    ("pattern", "names"),
    [
        ("s-{0000..0002}.tar", ["s-0000.tar", "s-0001.tar", "s-0002.tar"]),
        ("{8..11}", ["8", "9", "10", "11"]),
        ("{09..11}", ["09", "10", "11"]),
        ("{3..1}", ["3", "2", "1"]),
        ("{a,b}-{1..2}", ["a-1", "a-2", "b-1", "b-2"]),
        ("{x}.tar", ["{x}.tar"]),
        ("plain.tar", ["plain.tar"]),
    ],
)
def test_brace_expansion_follows_the_shell(pattern, names):
    assert expand_braces(pattern) == names


# --- parquet of image bytes -------------------------------------------------------------------


def test_parquet_images_without_an_id_column_are_keyed_by_file_and_row(tmp_path):
    table = pa.table({"image": [fake_jpeg(n) for n in range(5)], "label": [3, 1, 4, 1, 5]})
    pq.write_table(table, tmp_path / "x.parquet", row_group_size=2)
    source = open_image_source(tmp_path / "x.parquet")
    assert (source.kind, source.labelled, source.images) == ("parquet", True, 5)
    assert [(i.key, i.label, i.data) for i in read_all(source, 2)] == [
        (f"x.parquet:{n}", label, fake_jpeg(n)) for n, label in enumerate("31415")
    ]


def test_small_row_groups_are_taken_together_into_partitions(tmp_path):
    table = pa.table({"image": [fake_jpeg(n) for n in range(7)]})
    pq.write_table(table, tmp_path / "x.parquet", row_group_size=2)
    parts = open_image_source(tmp_path / "x.parquet").partitions(images_per_partition=4)
    assert [part.keys for part in parts] == [None, None]
    assert [len(list(read_partition(part))) for part in parts] == [4, 3]


@pytest.mark.parametrize("with_ids", [True, False], ids=["id column", "keys by row"])
def test_a_row_group_larger_than_a_partition_is_read_in_slices_of_its_rows(tmp_path, with_ids):
    # Groups of 2, 7 and 1 rows at 3 images a partition: the first group alone, the 7 rows in
    # slices of 2, 2 and 3, the last group alone; every row read once, in the file's order.
    ids = [f"id{n}" for n in range(10)]
    columns = {"image": [fake_jpeg(n) for n in range(10)], "label": list("0123456789")}
    table = pa.table({"id": ids, **columns} if with_ids else columns)
    writer = pq.ParquetWriter(tmp_path / "x.parquet", table.schema)
    for start, stop in ((0, 2), (2, 9), (9, 10)):
        writer.write_table(table.slice(start, stop - start))
    writer.close()
    keys = ids if with_ids else [f"x.parquet:{n}" for n in range(10)]
    parts = open_image_source(tmp_path / "x.parquet").partitions(images_per_partition=3)
    assert [part.images for part in parts] == [2, 2, 2, 3, 1]
    assert [part.read_keys() for part in parts] == [
        tuple(keys[a:b]) for a, b in ((0, 2), (2, 4), (4, 6), (6, 9), (9, 10))
    ]
    read = [(i.key, i.label, i.data) for part in parts for i in read_partition(part)]
    assert read == [(keys[n], str(n), fake_jpeg(n)) for n in range(10)]
    skipped = {keys[3], keys[6], keys[7]}
    read = [i.key for part in parts for i in read_partition(part, skip=skipped.__contains__)]
    assert read == [key for key in keys if key not in skipped]


def test_parquet_ids_are_the_keys_and_skipped_ids_are_left_out(tmp_path):
    table = pa.table({"id": ["a", "b", "c", "d"], "image": [fake_jpeg(n) for n in range(4)]})
    pq.write_table(table, tmp_path / "x.parquet", row_group_size=2)
    source = open_image_source(tmp_path / "x.parquet")
    assert source.labelled is False
    images = read_all(source, skip=lambda key: key in {"a", "b", "d"})
    assert [(i.key, i.label, i.data) for i in images] == [("c", None, fake_jpeg(2))]


def test_a_folder_of_parquet_files_is_one_source(tmp_path):
    (tmp_path / "d.parquet").mkdir()
    for n in range(2):
        pq.write_table(
            pa.table({"image": [fake_jpeg(n)]}), tmp_path / "d.parquet" / f"part-{n}.parquet"
        )
    source = open_image_source(tmp_path / "d.parquet")
    assert [i.key for i in read_all(source)] == ["part-0.parquet:0", "part-1.parquet:0"]


def test_a_hugging_face_image_struct_column_gives_its_bytes(tmp_path):
    images = [{"bytes": fake_jpeg(0), "path": "0.jpg"}, {"bytes": fake_jpeg(1), "path": None}]
    pq.write_table(pa.table({"image": images}), tmp_path / "hf.parquet")
    assert [i.data for i in read_all(open_image_source(tmp_path / "hf.parquet"))] == [
        fake_jpeg(0),
        fake_jpeg(1),
    ]


def test_a_null_image_comes_with_a_problem(tmp_path):
    pq.write_table(
        pa.table({"image": pa.array([fake_jpeg(0), None], pa.binary())}), tmp_path / "x.parquet"
    )
    images = read_all(open_image_source(tmp_path / "x.parquet"))
    assert [(i.key, i.problem) for i in images] == [
        ("x.parquet:0", None),
        ("x.parquet:1", "image is null"),
    ]


def test_an_image_column_that_is_not_bytes_is_refused(tmp_path):
    pq.write_table(pa.table({"image": ["a.jpg"]}), tmp_path / "x.parquet")
    assert refusal(tmp_path / "x.parquet") == (
        f"{tmp_path / 'x.parquet'}: column 'image' is string, expected image bytes (binary)"
    )


def test_a_parquet_with_neither_images_nor_paths_is_refused(tmp_path):
    pq.write_table(pa.table({"pixels": [b"x"]}), tmp_path / "x.parquet")
    assert "neither column 'image' (image bytes) nor 'path' (image paths)" in refusal(
        tmp_path / "x.parquet"
    )


def test_a_file_of_another_kind_is_refused(tmp_path):
    write(tmp_path / "a.jpg", fake_jpeg(0))
    assert "not an image source" in refusal(tmp_path / "a.jpg")


# --- on s3 (moto's server) --------------------------------------------------------------------


def test_a_folder_prefix_on_s3_is_listed_and_read(s3_bucket, tree):
    fsspec.filesystem("s3").put(f"{tree}/", f"{s3_bucket}/tree/", recursive=True)
    source = open_image_source(f"{s3_bucket}/tree/")
    assert (source.kind, source.labelled, source.images) == ("folder", True, 3)
    assert [(i.key, i.label, i.data) for i in read_all(source)] == [
        ("cat/0001.jpg", "cat", fake_jpeg(1)),
        ("cat/indoor/0002.PNG", "cat", fake_jpeg(2)),
        ("dog/0003.webp", "dog", fake_jpeg(3)),
    ]


def test_tar_shards_on_s3_are_streamed_with_the_options_they_were_opened_with(
    s3_bucket, s3_endpoint, tmp_path, monkeypatch
):
    for n in range(2):
        write_shard(tmp_path / f"s-{n}.tar", [(f"{n}.jpg", fake_jpeg(n)), (f"{n}.cls", b"7")])
        fsspec.filesystem("s3").put(str(tmp_path / f"s-{n}.tar"), f"{s3_bucket}/s-{n}.tar")
    monkeypatch.delenv("AWS_ENDPOINT_URL")  # only the options name the server now
    fsspec.get_filesystem_class("s3").clear_instance_cache()
    with use_storage_options({"endpoint_url": s3_endpoint}):
        parts = open_image_source(f"{s3_bucket}/s-{{0..1}}.tar").partitions()
    images = [i for part in parts for i in read_partition(part)]  # outside: as on a worker
    assert [(i.key, i.label, i.data) for i in images] == [
        ("0", "7", fake_jpeg(0)),
        ("1", "7", fake_jpeg(1)),
    ]
