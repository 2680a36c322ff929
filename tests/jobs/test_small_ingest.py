"""What a small ingest does besides describing: tasks sized by the descriptors' cost and shared
by every thread, a client that builds no descriptor for a store that records them, and a local
cluster started while the command plans."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from imgscale.jobs.cluster import connect, local_cluster_soon
from imgscale.jobs.features import SECONDS_PER_IMAGE, seconds_per_image
from imgscale.jobs.ingest import partition_size, plan_ingest
from imgscale.storage import open_store
from tests.jobs.test_ingest_images import digit_images, gist_tiny, ingest, write_folder
from tests.storage.test_image_sources import write_shard

pytestmark = pytest.mark.slow


def test_tasks_hold_about_two_seconds_of_work_and_few_images_are_shared_by_every_thread():
    gist = SECONDS_PER_IMAGE["gist"]
    assert seconds_per_image(["gist", "color"]) == gist + SECONDS_PER_IMAGE["color"]
    # 400 new images on 2 threads: 4 tasks a thread of 50, under 2 s of work (80 images).
    assert partition_size(gist, 400, 256, 2) == 50
    # Many images: 2 s of work a task (80 images), at most the cap.
    assert partition_size(gist, 10**5, 256, 2) == 80
    assert partition_size(gist, 10**5, 64, 2) == 64
    assert partition_size(SECONDS_PER_IMAGE["color"], 10**6, 4096, 2) == 4096
    # Very few: no task under a quarter second of work (10 images).
    assert partition_size(gist, 12, 256, 2) == 10


def test_a_grown_folder_is_planned_as_tasks_of_its_new_images_alone(tmp_path, scheduler_address):
    photos, store = tmp_path / "photos", tmp_path / "s.zarr"
    write_folder(photos, digit_images(10))
    assert ingest(str(photos), str(store), "--features", "gist",
                  scheduler=scheduler_address)["rows"] == 30  # fmt: skip
    added = digit_images(4, offset=10)
    write_folder(photos, added)
    plan = plan_ingest(str(photos), store, features="gist", threads=2)
    assert plan.total == 12
    # 12 new images at 2 threads: tasks of 10 (a quarter second of gist each) of the new images
    # alone, none of the 30 committed ones among them, so no committed key to skip.
    assert [len(p.keys) for p in plan.partitions] == [10, 2]
    assert {key for p in plan.partitions for key in p.keys} == set(added)
    assert len(plan.known.key_hashes) == 0 and len(plan.known.digests) == 30
    assert plan.features.steps is not None  # built where first asked for


@pytest.mark.parametrize(
    ("features", "images", "group", "tasks"),
    [("gist", 768, 128, [64] * 12), ("gist-tiny", 4096, 2048, [512] * 8)],
    ids=["gist, groups of 128", "gist-tiny, groups of 2048"],
)
def test_a_parquet_source_is_cut_into_tasks_for_every_thread_by_cost(
    tmp_path, features, images, group, tasks
):
    # Parquet lists no keys, but knows how many images it holds. 768 GIST images: 80 at most a
    # task (2 s of work), so each group of 128 is read as two slices of 64 (the cap of 4,096
    # images a task would make one task). 4,096 gist-tiny images at 2 threads: 4 tasks a thread
    # of 512, each group of 2,048 (CIFAR-10's files') read as four slices, where whole groups
    # would give one thread its last group to describe alone.
    source = tmp_path / "images.parquet"
    table = pa.table({"image": [b"not read when planning"] * images, "label": ["a"] * images})
    pq.write_table(table, source, row_group_size=group)
    plan = plan_ingest(str(source), tmp_path / "s.zarr", features=features, threads=2)
    assert [p.rows for p in plan.partitions] == tasks


def test_cheap_tar_shards_are_read_several_a_task_each_task_near_the_work_of_one(tmp_path):
    # 40 shards of 64 images and one of 2,000 (fake bytes: planning reads no image). Colour on
    # 2 threads of 4,560 images: tasks of 1,250 images (a quarter second of work each), where a
    # shard alone would be a task of 13 ms. The estimate comes from the first shard's headers
    # and each shard's size.
    sizes = [64] * 20 + [2_000] + [64] * 20
    for n, images in enumerate(sizes):
        write_shard(
            tmp_path / f"s-{n:02d}.tar", [(f"{n}-{i}.jpg", b"\xff" * 900) for i in range(images)]
        )
    plan = plan_ingest(str(tmp_path / "*.tar"), tmp_path / "s.zarr", features="color", threads=2)
    size = partition_size(SECONDS_PER_IMAGE["color"], sum(sizes), 4096, 2)
    assert size == 1_250
    held = [sum(sizes[int(s.stem[2:])] for s in p.shards) for p in plan.partitions]
    order = [int(s.stem[2:]) for p in plan.partitions for s in p.shards]
    assert order == list(range(len(sizes)))  # every shard once, in order
    assert held == [19 * 64, 64, 2_000, 19 * 64, 64]  # the big shard alone, the rest ≤ 1,250


def test_the_client_of_a_small_ingest_builds_no_descriptor_and_imports_no_numba(
    tmp_path, scheduler_address
):
    photos, store = tmp_path / "photos", tmp_path / "s.zarr"
    write_folder(photos, digit_images(3))
    ingest(str(photos), str(store), "--features", "gist-tiny", scheduler=scheduler_address)
    added = digit_images(2, offset=3)
    write_folder(photos, added)
    code = textwrap.dedent(f"""
        import json, sys
        from distributed import Client
        from imgscale.jobs.ingest import ingest_images, plan_ingest
        plan = plan_ingest({str(photos)!r}, {str(store)!r}, features="gist-tiny")
        with Client({scheduler_address!r}) as client:
            summary = ingest_images(plan, client)
        heavy = ("sklearn", "imgscale.pipeline.describe", "numba", "dask.array")
        heavy = sorted(m for m in heavy if m in sys.modules)
        print(json.dumps({{"rows": summary["rows"], "imported": heavy}}))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {"rows": 6, "imported": []}
    opened = open_store(store)
    ids = list(opened.ids())
    rows = opened.features().compute()
    new = [ids.index(key) for key in added]
    np.testing.assert_allclose(rows[new], gist_tiny(list(added.values())), rtol=1e-5, atol=1e-6)


def test_a_cluster_started_while_planning_is_the_one_connect_uses_and_is_closed_after():
    with local_cluster_soon() as early:
        with connect(quiet=True, cluster=early) as client:
            assert client.scheduler.address == early.result().scheduler_address
            assert client.submit(sum, [1, 2], pure=False).result() == 3
    assert early.result().status.name == "closed"
    with local_cluster_soon() as unused:
        pass
    assert unused.result().status.name == "closed"
    with local_cluster_soon(start=False) as none:
        assert none is None


def test_a_worker_describing_gist_and_colour_imports_no_numba_opencv_or_kmeans():
    # A new cluster's workers import what their first task needs: for GIST and colour, not the
    # other descriptors' libraries.
    code = textwrap.dedent("""
        import io, json, sys
        from PIL import Image
        from imgscale.jobs.features import parse_features
        from imgscale.storage import decode_image
        png = io.BytesIO()
        Image.new("RGB", (50, 40), (200, 30, 90)).save(png, "PNG")
        features = parse_features("gist,color")
        rows = features.describe([decode_image(png.getvalue(), features.requests)])
        other = ("numba", "cv2", "sklearn.cluster", "onnxruntime")
        imported = [m for m in other if m in sys.modules]
        print(json.dumps({"dim": rows.shape[1], "imported": imported}))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"dim": 512 + 128, "imported": []}


def test_the_workers_of_a_local_cluster_do_not_run_the_imgscale_script_again(tmp_path):
    # The `imgscale` console script imports the command line before its main guard; spawned
    # worker processes would run it again, importing all of it, for nothing.
    script = tmp_path / "imgscale_script.py"
    script.write_text(
        textwrap.dedent("""
            import sys
            import imgscale.jobs.cli
            if __name__ == "__main__":
                from imgscale.jobs.cluster import connect
                def imported():
                    import sys
                    return "imgscale.jobs.cli" in sys.modules
                with connect(quiet=True, n_workers=1) as client:
                    print(list(client.run(imported).values()), sys.modules["__main__"].__file__)
        """)
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[False]", str(script)]
