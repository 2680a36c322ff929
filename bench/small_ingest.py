"""``imgscale bench small-ingest``: what a small ingest costs beyond describing its images —
400 photos without a cluster, and 50 new photos on a running one — and where the fixed seconds go.

The photos are the first CIFAR-10 training images upsampled to 256×256 by Pillow (bicubic, JPEG
quality 90), written as a folder tree ``<class>/<n>.jpg`` (at tiny without the data dir,
sklearn's digits as 32×32 JPEGs).

- **Without a cluster**: ``imgscale ingest FOLDER STORE --features gist`` of the first `PHOTOS`
  photos into a new store, timed as a whole process (the ``imgscale`` script, interpreter start
  to exit), beside two plain single-process loops on the same photos in the same run (Pillow
  decode, dense float64 numpy GIST, one image at a time, as ``imgscale bench images`` writes
  it). The target's peer is the issue's loop, at the photos' own 256×256 (no resize): the plain
  loop's seconds over imgscale's (target ≥ 3, aim 4). Beside it, the stricter ratio against the
  loop doing imgscale's own work, the photos resized to its 128×128 working size (a GIST a
  quarter the size).
- **On a running cluster**: a ``dask scheduler`` and 2 single-threaded ``dask worker``
  processes on 127.0.0.1 ingest the `PHOTOS` photos first (the workers warm), then the folder
  grows by `NEW_PHOTOS` photos and ``imgscale ingest ... --scheduler`` adds them, timed as a
  whole process, beside describing them alone: ``describe_partition`` over the new photos in one
  warm process, halved for the 2 workers. The difference is what the small batch costs beyond
  its descriptors (target ≤ 1 s).
- **Where the seconds go**: each ingest run again stage by stage in a fresh process, as the
  command runs them: interpreter start and imports (what ``imgscale`` imports before any
  command), listing and planning (the descriptors' own imports included), the cluster (started
  or connected to), describing and committing (of which the commits), and closing the cluster.
  Without a cluster, the cluster's start runs beside the planning when the store is new, so the
  planning stage is the longer of the two.

Every measurement runs as many times as the scale's repetitions, each ingest into a store reset
to the same state (new, or holding the first photos); the plain loops and the ingest without a
cluster run in turn, as do describing the new photos and adding them. Each figure is the median
of its repetitions, each ratio the median of the rounds'.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from imgscale.bench.common import interleaved, record, repetitions
from imgscale.bench.registry import Context, Skipped, benchmark

PHOTOS = 400
NEW_PHOTOS = 50
FEATURES = "gist"
SIDE = 256
# The photos' side at tiny: sklearn's digits as 32×32 JPEGs.
TINY_SIDE = 32
QUALITY = 90
# Seconds a stage-by-stage child may take before the benchmark gives up on it.
CHILD_SECONDS = 1800


def write_photos(ctx: Context, folder: Path, n: int) -> list[Path]:
    """The first ``n`` photos as ``folder/<class>/<i>.jpg`` (rewritten); their paths in order."""
    import io

    from PIL import Image

    from imgscale.bench.images import cifar_table

    shutil.rmtree(folder, ignore_errors=True)
    table = cifar_table(ctx, n)
    paths = []
    for i, (label, data) in enumerate(
        zip(table.column("label").to_pylist(), table.column("image").to_pylist(), strict=True)
    ):
        image = Image.open(io.BytesIO(data)).convert("RGB")
        if ctx.scale != "tiny":
            image = image.resize((SIDE, SIDE), Image.Resampling.BICUBIC)
        path = folder / label / f"{i:05d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        image.save(path, "JPEG", quality=QUALITY)
        paths.append(path)
    return paths


def whole_process(source: Path, store: Path, scheduler: str | None) -> dict:
    """Seconds of ``imgscale ingest SOURCE STORE --features gist [--scheduler]`` as a process,
    its --json summary, and the 1-minute load as it started."""
    argv = [str(Path(sys.executable).with_name("imgscale")), "ingest", str(source), str(store)]
    argv += ["--features", FEATURES, "--json"]
    if scheduler:
        argv += ["--scheduler", scheduler]
    load = os.getloadavg()[0]
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=CHILD_SECONDS)
    seconds = time.perf_counter() - started
    if done.returncode:
        raise RuntimeError(f"imgscale ingest failed: {done.stderr.strip()[-400:]}")
    return {"seconds": seconds, "load": load, **json.loads(done.stdout)}


def staged(source: Path, store: Path, scheduler: str | None) -> dict[str, float]:
    """The ingest's stages timed in a fresh process (`stage_by_stage`)."""
    code = (
        "import json, sys; from imgscale.bench.small_ingest import stage_by_stage; "
        "print(json.dumps(stage_by_stage(*sys.argv[1:])))"
    )
    argv = [sys.executable, "-c", code, str(source), str(store), scheduler or ""]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=CHILD_SECONDS)
    if done.returncode:
        raise RuntimeError(f"staged ingest failed: {done.stderr.strip()[-400:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def stage_by_stage(source: str, store: str, scheduler: str) -> dict[str, float]:
    """Seconds of each stage of ``imgscale ingest SOURCE STORE --features gist`` as the command
    runs them, in this process (fresh: its imports are part of the figure)."""
    import psutil

    born = psutil.Process().create_time()
    import imgscale.jobs.cli  # noqa: F401  (what `imgscale` imports before any command)

    imported = time.time()
    from imgscale.jobs.ingest import ingest_images, plan_ingest, starts_a_store

    with contextlib.ExitStack() as stack:
        early = None
        if not scheduler and starts_a_store(store):  # as the command: the cluster starts now
            from imgscale.jobs.cluster import local_cluster_soon

            early = stack.enter_context(local_cluster_soon())
        plan = plan_ingest(source, Path(store), features=FEATURES)
        planned = time.time()
        from imgscale.jobs.cluster import connect

        with connect(scheduler or None, quiet=True, cluster=early) as client:
            connected = time.time()
            summary = ingest_images(plan, client)
            described = time.time()
    closed = time.time()
    return {
        "imports_s": imported - born,
        "planning_s": planned - imported,
        "cluster_s": connected - planned,
        "describe_and_commit_s": described - connected,
        "commits_s": summary["commit_seconds"],
        "close_s": closed - described,
        "total_s": closed - born,
    }


def describe_seconds(folder: Path) -> float:
    """Seconds to read, decode and describe the photos under ``folder`` in this process, warm
    (one BLAS thread)."""
    from threadpoolctl import threadpool_limits

    from imgscale.jobs.features import parse_features
    from imgscale.jobs.ingest import describe_partition, known_of
    from imgscale.storage import open_image_source

    features = parse_features(FEATURES)
    (partition,) = open_image_source(str(folder)).partitions(10**9)
    with threadpool_limits(limits=1):
        features.warm()
        started = time.perf_counter()
        describe_partition(features, known_of(None), partition)
        return time.perf_counter() - started


def cluster_processes(log: Path, workers: int = 2) -> tuple[str, list[subprocess.Popen]]:
    """A ``dask scheduler`` and ``workers`` single-threaded ``dask worker`` processes on
    127.0.0.1, started and waited for; their address and processes."""
    import socket

    from distributed import Client

    dask = str(Path(sys.executable).with_name("dask"))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    out = open(log, "w")  # the processes write it until they end
    common = ["--host", "127.0.0.1", "--no-dashboard"]
    processes = [
        subprocess.Popen([dask, "scheduler", "--port", str(port), *common], stdout=out, stderr=out)
    ]
    processes += [
        subprocess.Popen(
            [dask, "worker", address, "--nthreads", "1", *common], stdout=out, stderr=out
        )
        for _ in range(workers)
    ]
    with Client(address, timeout="60s") as client:
        client.wait_for_workers(workers, timeout=120)
    return address, processes


def stage_records(what: str, stages: list[dict[str, float]], load: float) -> list[dict]:
    """A record of each stage's seconds over the repetitions ``stages``."""
    return [
        record(
            f"{what}: stage {name.removesuffix('_s').replace('_', ' ')}",
            [each[name] for each in stages],
            "s",
            load_1min=load,
        )
        for name in stages[0]
    ]


@benchmark(
    "small-ingest",
    "what a small imgscale ingest costs beyond describing: 400 photos without a cluster vs a "
    "plain Pillow + numpy GIST loop, 50 new photos on a running cluster vs describing them, "
    "and the seconds of each stage",
    needs=("cifar10/train.parquet (small and up; tiny uses sklearn's digits without it)",),
)
def suite(ctx: Context) -> list[dict]:
    if ctx.external_cluster:
        raise Skipped(
            "it starts a LocalCluster and a cluster of its own; run it without --scheduler"
        )
    from imgscale.bench.images import GIST, plain_gist_rate

    photos, new = ctx.pick(
        tiny=(24, 6),
        small=(PHOTOS, NEW_PHOTOS),
        medium=(PHOTOS, NEW_PHOTOS),
        large=(PHOTOS, NEW_PHOTOS),
    )
    scratch = ctx.scratch("small-ingest")
    folder = scratch / "photos"
    paths = write_photos(ctx, folder, photos + new)
    held_back = scratch / "held-back"
    shutil.rmtree(held_back, ignore_errors=True)
    for path in paths[photos:]:
        (held_back / path.parent.name).mkdir(parents=True, exist_ok=True)
        path.rename(held_back / path.parent.name / path.name)
    encoded = [p.read_bytes() for p in paths[:photos]]
    side = SIDE if ctx.scale != "tiny" else TINY_SIDE
    repeats = repetitions(ctx)
    store = scratch / "local.zarr"

    def without_cluster() -> dict:
        shutil.rmtree(store, ignore_errors=True)
        return whole_process(folder, store, None)

    # The two plain loops and the ingest without a cluster in turn, round after round.
    plain_own_size, plain, local = interleaved(
        lambda: photos / plain_gist_rate(encoded, (GIST[0], GIST[1], side)),
        lambda: photos / plain_gist_rate(encoded, GIST),
        without_cluster,
        repeats=repeats,
    )
    imgscale_s = [run["seconds"] for run in local]
    load = max(run["load"] for run in local)
    ctx.log(
        f"small-ingest: {photos} photos, no cluster: {statistics.median(imgscale_s):.1f} s, "
        f"plain loop {statistics.median(plain_own_size):.1f} s at {side}x{side}, "
        f"{statistics.median(plain):.1f} s at {GIST[2]}x{GIST[2]} (load {load:.1f})"
    )
    out = []
    for loop, seconds, peer in (
        (f"the photos' {side}x{side}", plain_own_size, "target ≥ 3 (aim 4)"),
        (f"imgscale's {GIST[2]}x{GIST[2]} (the same work)", plain, "the stricter ratio: no target"),
    ):
        out.append(
            record(
                f"ingest --features gist of {photos} photos, no cluster: the plain loop's seconds "
                f"over imgscale's, the loop at {loop}",
                [loop_s / ours for loop_s, ours in zip(seconds, imgscale_s, strict=True)],
                "x",
                peer=peer,
                imgscale_s=statistics.median(imgscale_s),
                plain_loop_s=statistics.median(seconds),
                load_1min=load,
            )
        )
    load = os.getloadavg()[0]
    stages = []
    for _ in range(repeats):
        shutil.rmtree(store, ignore_errors=True)
        stages.append(staged(folder, store, None))
    out += stage_records(f"{photos} photos, no cluster", stages, load)
    shutil.rmtree(store)

    address, processes = cluster_processes(scratch / "cluster.log")
    try:

        def grown_by_new_photos(run: Callable[[], object]) -> object:
            """``run()`` once the store holds the first photos and the folder has grown by the
            new ones (which are held back meanwhile)."""
            for path in paths[photos:]:
                if path.exists():
                    path.rename(held_back / path.parent.name / path.name)
            shutil.rmtree(store, ignore_errors=True)
            whole_process(folder, store, address)  # also warms the workers, the first time
            for path in paths[photos:]:
                path.parent.mkdir(parents=True, exist_ok=True)
                (held_back / path.parent.name / path.name).rename(path)
            return run()

        def describing() -> float:
            for path in paths[photos:]:
                if path.exists():
                    path.rename(held_back / path.parent.name / path.name)
            return describe_seconds(held_back) / 2  # shared by the 2 workers

        described, grown = interleaved(
            describing,
            lambda: grown_by_new_photos(lambda: whole_process(folder, store, address)),
            repeats=repeats,
        )
        grown_s = [run["seconds"] for run in grown]
        ctx.log(
            f"small-ingest: {new} new photos on a running cluster: "
            f"{statistics.median(grown_s):.2f} s, describing them "
            f"{statistics.median(described):.2f} s (load {max(r['load'] for r in grown):.1f})"
        )
        out.append(
            record(
                f"ingest --features gist of {new} new photos on a running cluster of 2 workers: "
                "seconds beyond describing them",
                [ours - alone for ours, alone in zip(grown_s, described, strict=True)],
                "s",
                peer="target ≤ 1 s",
                imgscale_s=statistics.median(grown_s),
                describe_s=statistics.median(described),
                rows=grown[-1]["rows"],
                load_1min=max(run["load"] for run in grown),
            )
        )
        load = os.getloadavg()[0]
        stages = [
            grown_by_new_photos(lambda: staged(folder, store, address)) for _ in range(repeats)
        ]
        out += stage_records(f"{new} new photos, running cluster", stages, load)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=60)
    return out
