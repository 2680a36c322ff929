"""``imgscale bench images``: images in. Listing, reading, decoding and describing CIFAR-10
JPEGs from a folder tree, WebDataset tar shards and parquet, in one process and through ``imgscale
ingest`` on LocalClusters of 1 and 2 single-threaded workers, beside a plain single-process loop
(Pillow decode, dense float64 numpy GIST) run in the same run; the same for the images upsampled
to 256×256; peak RSS of the ingest's client and workers at two source sizes.

The benchmark writes the first N CIFAR-10 training JPEGs (``cifar10/train.parquet`` of the data
dir; at tiny without it, sklearn's digits as 32×32 JPEGs) into its scratch folder as a folder tree
``<class>/<n>.jpg``, as WebDataset tar shards of 256 samples (``KEY.jpg`` + ``KEY.cls``), and as
parquet with the file's own 2,048-row groups (the file itself when N is all of it; ingest reads a
group larger than a task in slices of its rows). A smaller set of the same images, in all three
kinds (parquet with 256-row groups), serves the 128×128 GIST and the first of the two sizes at
which peak RSS is compared; the same images upsampled to 256×256 by Pillow (bicubic, JPEG quality
90) are written as parquet with 256-row groups.

In one process with one BLAS thread, per source kind: listing (``open_image_source(...)
.partitions()``), reading the encoded bytes, reading + hashing + decoding (``decode_image``, RGB
as stored), and the worker's own ``describe_partition`` for ``color``, ``gist-tiny`` (32×32) and
``gist`` (128×128, on the smaller set). The peer is a plain loop over the same bytes:
``PIL.Image.open(...).convert(...)`` (resized to the working size by Pillow's bilinear resize where
it differs) and the GIST of each image by :func:`imgscale.bench.lmgist.reference_gist`, LMgist's
equations in dense float64 with one full complex FFT per filter (the tests check the descriptor
against it). The upper bound of the 1 → 2 worker speed-up on this machine at this moment is the
same work (``describe_partition`` with ``gist-tiny``) in 1 and then 2 plain processes without
Dask.

Through ``imgscale.jobs.ingest.ingest_images`` into a new store, on a LocalCluster of 1
and then 2 single-threaded worker processes as ``imgscale.jobs.cluster.connect`` starts them,
run from a spawned process of its own (the client holds nothing of this benchmark): the
cluster of 1 worker is started once and kept for every round, those of 2 are new each round (the
peak RSS they measure is of processes that held nothing before): images/s (listing, reading,
hashing, decoding, describing and committing; the cluster's start is not counted), the 1 → 2
speed-up, and peak RSS of the client (which also runs the scheduler) and of the largest worker,
sampled every 50 ms, for ``gist-tiny`` on the smaller and the full source.
Every ingest record carries the highest 1-minute load average of the machine when its runs
started. The stages in one process run as many times as the scale's repetitions; the ingests on
1 and 2 workers, the plain loop and the plain processes' speed-up run in turn, as many rounds,
so each ratio is the median of its rounds'. The front end at scale is measured once.
"""

from __future__ import annotations

import hashlib
import importlib
import io
import math
import multiprocessing
import os
import queue as queue_module
import shutil
import statistics
import tarfile
import time
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image
from threadpoolctl import threadpool_limits

from imgscale.bench.common import PeakRSS, interleaved, record, repetitions
from imgscale.bench.lmgist import reference_gist
from imgscale.bench.registry import Context, Skipped, benchmark
from imgscale.jobs.features import Features, parse_features
from imgscale.jobs.ingest import describe_partition, known_of
from imgscale.storage import ImageRequest, decode_image, open_image_source, read_partition

if TYPE_CHECKING:
    from multiprocessing.pool import Pool

    from distributed import Client

CIFAR_TRAIN = "cifar10/train.parquet"
CIFAR_TEST = "cifar10/test.parquet"
# The CIFAR-10 parquet files' row groups (ingest cuts them into tasks by the descriptor's cost).
CIFAR_ROW_GROUP = 2048
# Tar shards and the smaller sets' row groups: one ingest task's worth of images.
SMALL_GROUP = 256
KINDS = ("folder", "tar", "parquet")
LARGE_SIDE = 256
LARGE_QUALITY = 90
# (name, orientations per scale, working size) of the GIST settings measured; ingest's names.
GIST_TINY = ("gist-tiny", (8, 8, 4), 32)
GIST = ("gist", (8, 8, 8, 8), 128)
GIST_BLOCKS = 4
# Why the front end's figures are one measurement each (a record's ``why_once``).
FRONT_END_ONCE = (
    "each size's first ingest into a new store, then its re-ingest finding nothing new, of up "
    "to 10^6 images: one run of each"
)
# A spawned child running the ingests of one cluster size must report within this long.
CHILD_SECONDS = 4 * 3600


def plain_gist_rate(images: list[bytes], setting: tuple[str, tuple[int, ...], int]) -> float:
    """Images/s of the peer: Pillow's decode to grey, Pillow's bilinear resize to the working
    size where it differs, and :func:`reference_gist`, one image at a time."""
    _, orientations, size = setting
    started = time.perf_counter()
    for data in images:
        grey = Image.open(io.BytesIO(data)).convert("L")
        if grey.size != (size, size):
            grey = grey.resize((size, size), Image.Resampling.BILINEAR)
        reference_gist(np.asarray(grey), orientations, GIST_BLOCKS)
    return len(images) / (time.perf_counter() - started)


def plain_decode_rate(images: list[bytes]) -> float:
    """Images/s of the peer's decode alone: Pillow to an RGB array, one image at a time."""
    started = time.perf_counter()
    for data in images:
        np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    return len(images) / (time.perf_counter() - started)


# -- the images, written out as each kind of source ------------------------------------------


def cifar_table(ctx: Context, n: int) -> pa.Table:
    """The first ``n`` CIFAR-10 images (train, then test) as (id, label, image); at tiny scale
    without the data dir, sklearn's digits as 32×32 JPEGs."""
    try:
        files = [ctx.data(CIFAR_TRAIN)]
    except Skipped:
        if ctx.scale != "tiny":
            raise
        return digits_table(n)
    table = pq.read_table(files[0])
    if table.num_rows < n:
        table = pa.concat_tables([table, pq.read_table(ctx.data(CIFAR_TEST))])
    return table.slice(0, n).combine_chunks()


def digits_table(n: int) -> pa.Table:
    """sklearn's 8×8 digits scaled up to 32×32 grey JPEGs (quality 75), as (id, label, image)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images, labels = [], []
    for i in range(n):
        k = i % len(digits.images)
        pixels = (digits.images[k] * 255 / 16).astype(np.uint8)
        big = Image.fromarray(pixels).resize((32, 32), Image.Resampling.BICUBIC)
        images.append(_jpeg(big, 75))
        labels.append(f"digit{digits.target[k]}")
    ids = [f"train/{label}/{i:05d}" for i, label in enumerate(labels)]
    return pa.table({"id": ids, "label": labels, "image": pa.array(images, pa.binary())})


def upsampled(table: pa.Table) -> pa.Table:
    """The images upsampled to 256×256 by Pillow (bicubic), JPEG quality 90."""
    images = [
        _jpeg(
            Image.open(io.BytesIO(data))
            .convert("RGB")
            .resize((LARGE_SIDE, LARGE_SIDE), Image.Resampling.BICUBIC),
            LARGE_QUALITY,
        )
        for data in table.column("image").to_pylist()
    ]
    return table.set_column(2, "image", pa.array(images, pa.binary()))


def _jpeg(image: Image.Image, quality: int) -> bytes:
    out = io.BytesIO()
    image.save(out, "JPEG", quality=quality)
    return out.getvalue()


def write_sources(
    root: Path, table: pa.Table, row_group: int, parquet: Path | None = None
) -> dict[str, str]:
    """``table`` as a folder tree, tar shards and parquet under ``root`` (rewritten); the URL of
    each kind. ``parquet`` is a file that already holds exactly ``table``, used as it is."""
    shutil.rmtree(root, ignore_errors=True)
    labels = table.column("label").to_pylist()
    images = table.column("image").to_pylist()
    folder = root / "folder"
    for label in set(labels):
        (folder / label).mkdir(parents=True)
    for i, (label, data) in enumerate(zip(labels, images, strict=True)):
        (folder / label / f"{i:05d}.jpg").write_bytes(data)
    shards = root / "tar"
    shards.mkdir()
    for shard, start in enumerate(range(0, len(images), SMALL_GROUP)):
        with tarfile.open(shards / f"shard-{shard:05d}.tar", "w") as tar:
            for i in range(start, min(start + SMALL_GROUP, len(images))):
                _add_member(tar, f"{i:05d}.jpg", images[i])
                _add_member(tar, f"{i:05d}.cls", labels[i].encode())
    if parquet is None:
        parquet = root / "images.parquet"
        pq.write_table(table, parquet, row_group_size=row_group)
    return {"folder": str(folder), "tar": str(shards / "*.tar"), "parquet": str(parquet)}


def _add_member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


# -- one process: each stage on its own ------------------------------------------------------


def stage_rates(
    kind: str,
    url: str,
    few_url: str,
    features: dict[str, Features],
    peers: dict[str, float],
    repeats: int,
) -> list[dict]:
    """Listing, reading, decoding and each descriptor through ``kind``'s source in this process
    (one BLAS thread), each ``repeats`` times, beside the plain loop's rates in ``peers``."""
    listing, read_rate, decode_rate, colour_rate, tiny_rate, gist_rate = ([] for _ in range(6))
    with threadpool_limits(limits=1):
        for _ in range(repeats):
            started = time.perf_counter()
            partitions = open_image_source(url).partitions()
            listing.append(time.perf_counter() - started)
            rate, n = _rate(partitions, _read_only)
            read_rate.append(rate)
            decode_rate.append(_rate(partitions, _read_decode)[0])
            colour_rate.append(_rate(partitions, _describer(features["color"]))[0])
            tiny_rate.append(_rate(partitions, _describer(features[GIST_TINY[0]]))[0])
            rate, n_few = _rate(
                open_image_source(few_url).partitions(), _describer(features["gist"])
            )
            gist_rate.append(rate)
    where = {"source": kind, "images": n}
    tiny, gist = GIST_TINY[0], GIST[0]
    return [
        record(f"{kind}: listing", [n / seconds for seconds in listing], "images/s", **where),
        record(f"{kind}: read only", read_rate, "images/s", **where),
        record(
            f"{kind}: read + decode (RGB as stored)",
            decode_rate,
            "images/s",
            peers["decode"],
            peer="Pillow open + convert, one image at a time",
            **where,
        ),
        record(
            f"{kind}: read + decode + color vs read + decode",
            colour_rate,
            "images/s",
            decode_rate,
            peer="read + decode (target ratio ≥ 0.7)",
            **where,
        ),
        record(
            f"{kind}: read + decode + {tiny} (32×32), 1 process",
            tiny_rate,
            "images/s",
            peers[tiny],
            peer="plain loop: Pillow + dense float64 numpy GIST",
            **where,
        ),
        record(
            f"{kind}: read + decode + {gist} (128×128), 1 process",
            gist_rate,
            "images/s",
            peers[gist],
            peer="plain loop: Pillow + dense float64 numpy GIST",
            source=kind,
            images=n_few,
        ),
    ]


def _rate(partitions: list, work: Callable[[object], int]) -> tuple[float, int]:
    """(images/s, images) of ``work`` over every partition; ``work`` returns images done."""
    started = time.perf_counter()
    done = sum(work(partition) for partition in partitions)
    return done / (time.perf_counter() - started), done


def _read_only(partition) -> int:
    return sum(bool(image.data) for image in read_partition(partition))


def _read_decode(partition) -> int:
    """What a worker does before describing: read, hash and decode (RGB as stored)."""
    as_stored = [ImageRequest("RGB")]
    done = 0
    for image in read_partition(partition):
        hashlib.sha256(image.data).digest()
        decode_image(image.data, as_stored)
        done += 1
    return done


def _describer(features: Features) -> Callable[[object], int]:
    known = known_of(None)

    def describe(partition) -> int:
        return len(describe_partition(features, known, partition).keys)

    return describe


def plain_processes_speedup(url: str, features: Features, pool: Pool) -> float:
    """``describe_partition`` over the source's partitions in 2 plain processes of ``pool``
    (`plain_processes`; partition i in process i mod 2) over 1: the 1 → 2 speed-up this machine
    allows now, without Dask."""
    partitions = open_image_source(url).partitions()
    seconds = {}
    for procs in (1, 2):
        shares = [partitions[p::procs] for p in range(procs)]
        started = time.perf_counter()
        pool.starmap(_describe_all, [(features, share) for share in shares])
        seconds[procs] = time.perf_counter() - started
    return seconds[1] / seconds[2]


def plain_processes(processes: int) -> Pool:
    """A pool of ``processes`` spawned plain processes, their imports done: what the peers'
    timed spans run in, kept across a benchmark's rounds."""
    pool = multiprocessing.get_context("spawn").Pool(processes)
    pool.map(_warm, range(processes))
    return pool


def _warm(_: int) -> None:
    importlib.import_module("imgscale.jobs.ingest")


def _describe_all(features: Features, partitions: list) -> int:
    with threadpool_limits(limits=1):
        return sum(map(_describer(features), partitions))


# -- through imgscale ingest on a LocalCluster -----------------------------------------------


def ingest_runs(
    workers: int, runs: list[tuple[str, str, str]], store_root: str, *, again: bool = False
) -> list[dict]:
    """``ingest_images(source, new store, features)`` for each (name, source, features) of
    ``runs``, on a new LocalCluster of ``workers`` single-threaded workers (as the CLI starts
    them), from a spawned process of its own: :meth:`IngestHost.ingest`'s figures."""
    with IngestHost(workers) as host:
        return host.ingest(runs, store_root, again=again)


class IngestHost:
    """A spawned process holding one LocalCluster of ``workers`` single-threaded workers (as the
    CLI starts them) while it is open, ingesting on it as often as asked: a benchmark's rounds
    share one cluster, and no ingest's timed span includes the cluster's start. The client holds
    nothing of the benchmark that starts it."""

    def __init__(self, workers: int):
        self.workers = workers

    def __enter__(self) -> IngestHost:
        context = multiprocessing.get_context("spawn")
        self._commands, self._answers = context.Queue(), context.Queue()
        self._process = context.Process(
            target=_ingest_host, args=(self._commands, self._answers, self.workers)
        )
        self._process.start()
        try:
            self._answer()  # the cluster is up
        except BaseException:
            self._process.kill()
            self._process.join()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self._commands.put(None)
        self._process.join(timeout=60)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()

    def ingest(
        self, runs: list[tuple[str, str, str]], store_root: str, *, again: bool = False
    ) -> list[dict]:
        """``ingest_images(source, new store, features)`` for each (name, source, features) of
        ``runs``, the stores under ``store_root``: seconds, images, 1-minute load, and peak RSS
        (bytes) of the client and of the largest worker during each run (at the moment of
        their summed peak, and each process's own), the client's CPU seconds and the commits.
        With ``again``, each source is then ingested again into its store, which finds nothing
        new: ``again_seconds`` (listing and planning included) and ``again_client_peak_rss``."""
        self._commands.put((runs, store_root, again))
        return self._answer()

    def _answer(self):
        deadline = time.monotonic() + CHILD_SECONDS
        while time.monotonic() < deadline:
            try:
                answer = self._answers.get(timeout=1)
            except queue_module.Empty:
                if self._process.is_alive():
                    continue
                try:  # it may have answered as it ended
                    answer = self._answers.get(timeout=1)
                except queue_module.Empty:
                    answer = {"error": f"exited with code {self._process.exitcode}"}
            if "error" in answer:
                raise RuntimeError(f"ingest on {self.workers} worker(s) failed: {answer['error']}")
            return answer["answer"]
        raise RuntimeError(f"ingest on {self.workers} worker(s): no answer")


def _ingest_host(commands, answers, workers: int) -> None:
    from imgscale.jobs.cluster import connect

    try:
        with connect(quiet=True, n_workers=workers) as client:
            client.run(importlib.import_module, "imgscale.jobs.ingest")
            worker_pids = {f"pid {pid}" for pid in client.run(os.getpid).values()}
            client.get_task_stream(start=time.time())  # the scheduler records tasks from now on
            answers.put({"answer": None})
            while (command := commands.get()) is not None:
                runs, store_root, again = command
                try:
                    done = _ingest_in_cluster(client, worker_pids, runs, Path(store_root), again)
                except Exception as exc:  # reported to the parent, which raises it there
                    answers.put({"error": f"{type(exc).__name__}: {exc}"})
                else:
                    answers.put({"answer": done})
    except Exception as exc:
        answers.put({"error": f"{type(exc).__name__}: {exc}"})


def _ingest_in_cluster(
    client: Client,
    worker_pids: set[str],
    runs: list[tuple[str, str, str]],
    root: Path,
    again: bool,
) -> list[dict]:
    from imgscale.jobs.ingest import ingest_images, plan_ingest

    out = []
    for name, source, features in runs:
        store = root / f"{name}.zarr"
        shutil.rmtree(store, ignore_errors=True)
        load = os.getloadavg()[0]
        started, client_cpu = time.time(), time.process_time()
        with PeakRSS() as rss:
            summary = ingest_images(plan_ingest(source, store, features=features), client)
        client_cpu = time.process_time() - client_cpu
        first, rest = partition_seconds(client.get_task_stream(start=started))
        repeated = {}
        if again:
            cpu_before = _cpu_seconds(client)
            with PeakRSS() as again_rss:
                plan = plan_ingest(source, store, features=features)
                again_summary = ingest_images(plan, client) if plan.partitions else {}
            repeated = {
                "again_seconds": time.perf_counter() - plan.started,
                "again_rows": again_summary.get("rows", 0),
                "again_client_peak_rss": again_rss.each_peak.get("client", 0),
                "again_cpu_s": _cpu_seconds(client) - cpu_before,
            }
        shutil.rmtree(store)
        out.append(
            {
                **repeated,
                "name": name,
                "seconds": summary["seconds"],
                "images": summary["images_seen"],
                "load": load,
                "client_rss": rss.at_peak.get("client", 0),
                "worker_rss": max(v for k, v in rss.at_peak.items() if k in worker_pids),
                "first_partition_s": first,
                "median_partition_s": rest,
                # Each process's own peak, the client's CPU seconds (its scheduler's too), and
                # the commits: what the front end's scale is judged by.
                "client_peak_rss": rss.each_peak.get("client", 0),
                "worker_peak_rss": max(v for k, v in rss.each_peak.items() if k in worker_pids),
                "client_cpu_s": client_cpu,
                "commits": summary["commits"],
                "commit_seconds": summary["commit_seconds"],
            }
        )
    return out


def _cpu_seconds(client: Client) -> float:
    """CPU seconds so far of this process (the client and its scheduler) and of every worker."""
    return time.process_time() + sum(client.run(time.process_time).values())


def partition_seconds(stream: list[dict]) -> tuple[float, float]:
    """From the scheduler's task stream of one ingest: the mean compute seconds of each
    worker's first partition, and the median of the other partitions (nan when none)."""
    by_worker: dict[str, list[tuple[float, float]]] = {}
    for task in stream:
        if not task["key"].startswith("describe_and_encode"):
            continue
        spans = [s for s in task["startstops"] if s["action"] == "compute"]
        if spans:
            seconds = sum(s["stop"] - s["start"] for s in spans)
            by_worker.setdefault(task["worker"], []).append((spans[0]["start"], seconds))
    firsts, others = [], []
    for tasks in by_worker.values():
        tasks.sort()
        firsts.append(tasks[0][1])
        others += [seconds for _, seconds in tasks[1:]]
    return (
        float(np.mean(firsts)) if firsts else float("nan"),
        float(np.median(others)) if others else float("nan"),
    )


def ingest_records(
    kind: str,
    one: list[dict[str, dict]],
    two: list[dict[str, dict]],
    peers: list[dict[str, float]],
    stage: dict[str, float],
    plain_speedup: list[float],
) -> list[dict]:
    """Records of ``kind``'s ingest runs on 1 and 2 workers (by run name), one dict of runs per
    round, beside the peers measured in the same rounds."""
    out = []
    plain = "plain loop: Pillow + dense float64 numpy GIST"
    for feature, peer_rate, peer in (
        ("color", stage["color"], "the same work in 1 process, no Dask"),
        (GIST_TINY[0], [round_[GIST_TINY[0]] for round_ in peers], plain),
        (GIST[0], [round_[GIST[0]] for round_ in peers], plain),
    ):
        rates = {}
        for workers, rounds in ((1, one), (2, two)):
            run = rounds[-1][feature]
            rates[workers] = [r[feature]["images"] / r[feature]["seconds"] for r in rounds]
            out.append(
                record(
                    f"{kind}: imgscale ingest --features {feature}, {workers} worker(s)",
                    rates[workers],
                    "images/s",
                    peer_rate,
                    peer=peer + (" (target ratio ≥ 4 at 2 workers)" if feature != "color" else ""),
                    source=kind,
                    images=run["images"],
                    workers=workers,
                    load_1min=max(r[feature]["load"] for r in rounds),
                    first_partition_s=run["first_partition_s"],
                    median_partition_s=run["median_partition_s"],
                )
            )
        out.append(
            record(
                f"{kind}: ingest --features {feature}, speed-up 1 → 2 workers",
                [two / one for one, two in zip(rates[1], rates[2], strict=True)],
                "x",
                plain_speedup,
                peer="gist-tiny in 1 → 2 plain processes, no Dask (target ≥ 1.8)",
                source=kind,
            )
        )
    return out


def rss_records(kind: str, few: list[dict], full: list[dict]) -> list[dict]:
    """Peak RSS of the client and the largest worker at the full size beside the smaller one,
    the runs of each round paired."""
    return [
        record(
            f"{kind}: ingest {GIST_TINY[0]}, 2 workers, peak RSS of the {who} at "
            f"{full[0]['images']:,} images",
            [run[key] / 2**30 for run in full],
            "GiB",
            [run[key] / 2**30 for run in few],
            peer=f"the same at {few[0]['images']:,} images (target: flat, ratio ≈ 1)",
            source=kind,
        )
        for who, key in (("client", "client_rss"), ("largest worker", "worker_rss"))
    ]


def run(ctx: Context, n: int, n_few: int, n_peer_tiny: int, n_peer: int) -> list[dict]:
    """Every measurement of the module docstring on ``n`` images (``n_few`` for the smaller
    sets); the plain loop runs on ``n_peer_tiny`` images at 32×32 and ``n_peer`` at 128×128."""
    scratch = ctx.scratch("images")
    table = cifar_table(ctx, n)
    given = ctx.data_dir / CIFAR_TRAIN if ctx.data_dir else None
    whole = given is not None and given.exists() and pq.ParquetFile(given).metadata.num_rows == n
    as_is = given if whole else None
    full = write_sources(scratch / "full", table, CIFAR_ROW_GROUP, as_is)
    few_table = table.slice(0, n_few)
    few = write_sources(scratch / "few", few_table, SMALL_GROUP)
    large_table = upsampled(few_table)
    large = str(scratch / "large.parquet")
    pq.write_table(large_table, large, row_group_size=SMALL_GROUP)
    features = {name: parse_features(name) for name in ("color", GIST_TINY[0], GIST[0])}
    ctx.log(f"images: {n:,} images written as folder, tar shards and parquet")

    images = table.column("image").to_pylist()
    large_images = large_table.column("image").to_pylist()
    # The images of each of the plain loop's measurements: (its measure, its images).
    plain_work = {
        "decode": (plain_decode_rate, images[: n_peer_tiny * 10]),
        GIST_TINY[0]: (partial(plain_gist_rate, setting=GIST_TINY), images[:n_peer_tiny]),
        GIST[0]: (partial(plain_gist_rate, setting=GIST), images[:n_peer]),
        "large": (partial(plain_gist_rate, setting=GIST), large_images[:n_peer]),
        "large decode": (plain_decode_rate, large_images[: n_peer * 10]),
    }
    del images, large_images, table, few_table, large_table
    repeats = repetitions(ctx)

    def plain_loop() -> dict[str, float]:
        return {name: measure(work) for name, (measure, work) in plain_work.items()}

    runs_one, runs_two = [], []
    for kind in KINDS:
        runs_one += [
            (f"{kind} color", full[kind], "color"),
            (f"{kind} gist-tiny", full[kind], GIST_TINY[0]),
            (f"{kind} gist", few[kind], GIST[0]),
        ]
        runs_two += [
            (f"{kind} gist-tiny few", few[kind], GIST_TINY[0]),
            (f"{kind} gist-tiny", full[kind], GIST_TINY[0]),
            (f"{kind} color", full[kind], "color"),
            (f"{kind} gist", few[kind], GIST[0]),
        ]
    large_runs = [("large gist", large, GIST[0])]
    stores = str(scratch / "stores")

    def ingest_round() -> tuple[dict[str, dict], dict[str, dict], float]:
        ctx.log("images: ingest on 1 worker, then on 2")
        one = {r["name"]: r for r in one_worker.ingest(runs_one + large_runs, stores)}
        two = {r["name"]: r for r in ingest_runs(2, runs_two + large_runs, stores)}
        return one, two, plain_processes_speedup(full["folder"], features[GIST_TINY[0]], pool)

    # The plain loop and the ingests in turn, round after round, the cluster of 1 worker and the
    # plain processes kept across the rounds; then the stages in one process, beside the median
    # of the plain loop's rounds.
    with IngestHost(1) as one_worker, plain_processes(2) as pool:
        peer_rounds, rounds = interleaved(plain_loop, ingest_round, repeats=repeats)
    with threadpool_limits(limits=1):  # first calls (imports, filter banks) are not timed
        first = open_image_source(few["parquet"]).partitions()[0]
        for one_features in features.values():
            _describer(one_features)(first)
    stage, stage_records = {}, []
    peers = {name: statistics.median(r[name] for r in peer_rounds) for name in peer_rounds[0]}
    for kind in KINDS:
        ctx.log(f"images: {kind}: stages in one process")
        rows = stage_rates(kind, full[kind], few[kind], features, peers, repeats)
        stage[kind] = {"color": rows[3]["value"]}
        stage_records += rows
    stage_records += large_stage_rates(large, features[GIST[0]], peers, repeats)
    records = [
        record(
            f"plain loop: Pillow decode + dense float64 numpy {name}",
            [r[name] for r in peer_rounds],
            "images/s",
            images=count,
        )
        for name, count in ((GIST_TINY[0], n_peer_tiny), (GIST[0], n_peer))
    ]
    records += stage_records
    plain_speedup = [speedup for _, _, speedup in rounds]
    for kind in KINDS:
        mine = len(kind) + 1

        def of_kind(runs: dict[str, dict], kind: str = kind, mine: int = mine) -> dict:
            return {k[mine:]: v for k, v in runs.items() if k.startswith(f"{kind} ")}

        records += ingest_records(
            kind,
            [of_kind(one) for one, _, _ in rounds],
            [of_kind(two) for _, two, _ in rounds],
            peer_rounds,
            stage[kind],
            plain_speedup,
        )
        records += rss_records(
            kind,
            [two[f"{kind} gist-tiny few"] for _, two, _ in rounds],
            [two[f"{kind} gist-tiny"] for _, two, _ in rounds],
        )
    records += large_ingest_records(
        [one["large gist"] for one, _, _ in rounds],
        [two["large gist"] for _, two, _ in rounds],
        peer_rounds,
        plain_speedup,
    )
    return records


def large_stage_rates(
    url: str, gist: Features, peers: dict[str, float], repeats: int
) -> list[dict]:
    """The 256×256 parquet in one process: decode as stored, decode for GIST (reduced-size),
    and decode + GIST, each ``repeats`` times, beside the plain loop."""
    kind = f"parquet {LARGE_SIDE}×{LARGE_SIDE}"
    decode_rate, reduced_rate, gist_rate = [], [], []
    with threadpool_limits(limits=1):
        partitions = open_image_source(url).partitions()
        for _ in range(repeats):
            rate, n = _rate(partitions, _read_decode)
            decode_rate.append(rate)
            reduced_rate.append(_rate(partitions, _decoder(gist.requests))[0])
            gist_rate.append(_rate(partitions, _describer(gist))[0])
    peer = "plain loop: Pillow + dense float64 numpy GIST"
    return [
        record(
            f"{kind}: read + decode (RGB as stored)",
            decode_rate,
            "images/s",
            peers["large decode"],
            peer="Pillow open + convert, one image at a time",
            source=kind,
            images=n,
        ),
        record(
            f"{kind}: read + decode to grey 128×128 (reduced-size JPEG decoding)",
            reduced_rate,
            "images/s",
            decode_rate,
            peer="read + decode (RGB as stored)",
            source=kind,
            images=n,
        ),
        record(
            f"{kind}: read + decode + gist (128×128), 1 process",
            gist_rate,
            "images/s",
            peers["large"],
            peer=peer,
            source=kind,
            images=n,
        ),
    ]


def _decoder(requests: Iterable[ImageRequest]) -> Callable[[object], int]:
    requests = list(requests)

    def decode(partition) -> int:
        done = 0
        for image in read_partition(partition):
            hashlib.sha256(image.data).digest()
            decode_image(image.data, requests)
            done += 1
        return done

    return decode


def large_ingest_records(
    one: list[dict], two: list[dict], peers: list[dict[str, float]], speedup: list[float]
) -> list:
    """Records of the 256×256 ingest on 1 and 2 workers, one run per round, beside the peers
    measured in the same rounds."""
    kind = f"parquet {LARGE_SIDE}×{LARGE_SIDE}"
    out, rates = [], {}
    for workers, runs in ((1, one), (2, two)):
        run_ = runs[-1]
        rates[workers] = [r["images"] / r["seconds"] for r in runs]
        out.append(
            record(
                f"{kind}: imgscale ingest --features gist, {workers} worker(s)",
                rates[workers],
                "images/s",
                [round_["large"] for round_ in peers],
                peer="plain loop: Pillow + dense float64 numpy GIST (target ratio ≥ 4 at 2 "
                "workers)",
                source=kind,
                images=run_["images"],
                workers=workers,
                load_1min=max(r["load"] for r in runs),
            )
        )
    out.append(
        record(
            f"{kind}: ingest --features gist, speed-up 1 → 2 workers",
            [b / a for a, b in zip(rates[1], rates[2], strict=True)],
            "x",
            speedup,
            peer="gist-tiny in 1 → 2 plain processes, no Dask (target ≥ 1.8)",
            source=kind,
        )
    )
    return out


# -- the front end at scale: many small images in tar shards through colour -----------------


def synthetic_shards(root: Path, images: int, per_shard: int) -> Path:
    """``images`` distinct small JPEGs (32×32 RGB, quality 75, about 1 kB: random 8×8 colours
    upsampled by Pillow's bicubic resize) as WebDataset tar shards of ``per_shard`` samples
    (``KEY.jpg`` + ``KEY.cls``, ten classes) under ``root``; deterministic (shard s from the
    seed s). Shards already there are kept (each is written under another name, then renamed),
    so a later run with the same work dir reuses them. Returns the shards' folder."""
    folder = root / f"shards-{per_shard}"
    folder.mkdir(parents=True, exist_ok=True)
    for shard in range(math.ceil(images / per_shard)):
        path = folder / f"shard-{shard:05d}.tar"
        if not path.exists():
            first = shard * per_shard
            write_synthetic_shard(path, shard, range(first, min(first + per_shard, images)))
    return folder


def write_synthetic_shard(path: Path, seed: int, images: range) -> None:
    """The shard of `synthetic_shards` holding ``images`` (their numbers), written under
    another name and then renamed to ``path``."""
    rng = np.random.default_rng(seed)
    partial = path.with_suffix(f".{os.getpid()}.partial")
    with tarfile.open(partial, "w") as tar:
        for i in images:
            colours = Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8))
            image = colours.resize((32, 32), Image.Resampling.BICUBIC)
            _add_member(tar, f"{i:08d}.jpg", _jpeg(image, 75))
            _add_member(tar, f"{i:08d}.cls", f"class{i % 10}".encode())
    partial.rename(path)


def first_shards(folder: Path, images: int, per_shard: int) -> str:
    """The brace pattern naming the shards that hold the first ``images`` images."""
    return str(folder / f"shard-{{00000..{math.ceil(images / per_shard) - 1:05d}}}.tar")


def decode_rate_in_processes(url: str, processes: int) -> float:
    """Images/s of reading, hashing and decoding (RGB as stored) every partition of ``url`` in
    ``processes`` plain processes without Dask (partition i in process i mod ``processes``): what
    the workers do before describing, at the machine's full width."""
    partitions = open_image_source(url).partitions()
    context = multiprocessing.get_context("spawn")
    with context.Pool(processes) as pool:
        pool.map(_warm, range(processes))
        started = time.perf_counter()
        done = pool.map(_decode_all, [partitions[p::processes] for p in range(processes)])
        return sum(done) / (time.perf_counter() - started)


def _decode_all(partitions: list) -> int:
    return sum(map(_read_decode, partitions))


def front_end_scale(ctx: Context, sizes: tuple[int, ...], per_shard: int) -> list[dict]:
    """``imgscale ingest --features color`` of the first N of a set of small JPEGs in tar
    shards, for each N of ``sizes``, on a LocalCluster of 2 single-threaded workers: images/s
    beside decode-only in 2 plain processes (measured once, on the smallest size's shards),
    peak RSS of the client and of the largest worker beside the same at the smallest size, and
    the time of a second ingest of the same shards, which finds nothing new."""
    folder = synthetic_shards(ctx.scratch("images-front-end"), max(sizes), per_shard)
    ctx.log(f"images: {max(sizes):,} small JPEGs in tar shards of {per_shard:,}")
    urls = {n: first_shards(folder, n, per_shard) for n in sizes}
    decode = decode_rate_in_processes(urls[min(sizes)], 2)
    # The first run, of one shard, warms the workers (imports, the descriptor): not reported.
    warm = ("front end warm", first_shards(folder, per_shard, per_shard), "color")
    runs = [warm, *((f"front end {n}", urls[n], "color") for n in sizes)]
    ctx.log("images: front end: ingest on 2 workers, then again")
    done = ingest_runs(2, runs, str(ctx.scratch("images-front-end") / "stores"), again=True)[1:]
    smallest = done[0]
    out = []
    for run_ in done:
        n = run_["images"]
        where = {
            "source": "tar",
            "images": n,
            "workers": 2,
            "load_1min": run_["load"],
            "why_once": FRONT_END_ONCE,
        }
        out.append(
            record(
                f"front end: imgscale ingest --features color of {n:,} small JPEGs in tar shards",
                n / run_["seconds"],
                "images/s",
                decode,
                peer="read + hash + decode only, 2 plain processes, no Dask",
                **where,
            )
        )
        for who, key in (
            ("client", "client_peak_rss"),
            ("largest worker", "worker_peak_rss"),
            ("client, ingesting again", "again_client_peak_rss"),
        ):
            out.append(
                record(
                    f"front end: peak RSS of the {who} at {n:,} images",
                    run_[key] / 2**30,
                    "GiB",
                    smallest[key] / 2**30,
                    peer=f"the same at {smallest['images']:,} images (target: flat, ratio ≈ 1)",
                    **where,
                )
            )
        out.append(
            record(
                f"front end: client CPU an image (scheduler included) at {n:,} images",
                run_["client_cpu_s"] / n * 1e6,
                "µs",
                commits=run_["commits"],
                commit_seconds=run_["commit_seconds"],
                **where,
            )
        )
        out.append(
            record(
                f"front end: ingest again, nothing new, {n:,} images",
                run_["again_seconds"],
                "s",
                run_["seconds"],
                peer="the first ingest of the same shards",
                new_rows=run_["again_rows"],
                cpu_seconds=run_["again_cpu_s"],
                **where,
            )
        )
    return out


@benchmark(
    "images",
    "images in: listing, decode, GIST and colour per source kind (folder, tar shards, parquet) "
    "in one process and through imgscale ingest on 1 and 2 workers vs a plain Pillow + numpy "
    "GIST loop; 256x256 JPEGs; peak RSS vs images; at large, 10^4 to 10^6 small JPEGs in tar "
    "shards through colour: images/s vs decode-only, peak RSS, re-ingest of nothing new",
    needs=(f"{CIFAR_TRAIN} (small and medium; tiny uses sklearn's digits without it)",),
)
def suite(ctx: Context) -> list[dict]:
    if ctx.external_cluster:
        raise Skipped(
            "it compares LocalClusters of 1 and 2 workers of its own; run it without --scheduler"
        )
    # Images per source, in the smaller sets, and in the plain loop at 32×32 and 128×128; none at
    # large, which measures the front end alone (the sources' figures are medium's).
    per_source = ctx.pick(
        tiny=(120, 24, 10, 2),
        small=(10_000, 1_000, 200, 40),
        medium=(50_000, 2_000, 400, 60),
        large=None,
    )
    # (images ingested, images a tar shard) of the front end's runs.
    front_end = ctx.pick(
        tiny=((48, 96), 16), small=None, medium=None,
        large=((10_000, 100_000, 1_000_000), 1_000),
    )  # fmt: skip
    records = run(ctx, *per_source) if per_source else []
    if front_end:
        records += front_end_scale(ctx, *front_end)
    return records
