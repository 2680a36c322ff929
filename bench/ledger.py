"""The run ledger and detached runs: what following a run from anywhere costs.

Every figure beside a peer measured in the same run (median of the repetitions; the record
gives the spread):

- one ledger event (an object created create-only in a local folder) beside the machine's
  durable file create (``open(O_EXCL)``, write, fsync of the same bytes);
- ``imgscale runs --json`` over a ledger of ``runs`` finished runs (10,000 at medium and
  large; target ≤ 2 s), listed a second time after the first listing compacted them, beside
  ``imgscale --help`` (a command's fixed cost);
- on a cluster of `dask scheduler` and `dask worker` processes on 127.0.0.1 (one worker
  offering the ``driver`` resource): ``imgscale submit`` from spawn to exit, and ``imgscale
  status`` from spawn to exit, each beside ``imgscale --help``; a spec (an ingest and an NCM
  train of ``rows`` × 64) run detached (submit to outcome ``ok`` seen by status) beside the same
  spec run attached (``imgscale run --scheduler``) on the same cluster (target ≤ 5 % + 2 s).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from imgscale.bench.common import record
from imgscale.bench.registry import Context, benchmark
from imgscale.storage import Ledger

LISTING_TARGET_S = 2.0


def _seconds(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def _versus(name: str, ours: list[float], peer: list[float], peer_name: str, **extra) -> dict:
    return record(
        name, statistics.median(ours), "s", statistics.median(peer), peer=peer_name,
        ours_min_s=min(ours), ours_max_s=max(ours), peer_min_s=min(peer), peer_max_s=max(peer),
        runs=len(ours), **extra,
    )  # fmt: skip


def _event_cost(folder: Path, events: int) -> dict:
    ledger = Ledger(folder / "ledger")
    line = ["imgscale: a line of output as a driver logs it, about eighty bytes long......"]
    started = time.perf_counter()
    for _ in range(events):
        ledger.log("r1", line)
    ours = (time.perf_counter() - started) / events
    body = json.dumps({"lines": line, "run_id": "r1"}).encode()
    bare = folder / "bare"
    bare.mkdir()
    started = time.perf_counter()
    for i in range(events):
        fd = os.open(bare / f"{i}.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        os.write(fd, body)
        os.fsync(fd)
        os.close(fd)
    peer = (time.perf_counter() - started) / events
    return record(
        "ledger event (local folder)", ours * 1e3, "ms", peer * 1e3,
        peer="open(O_EXCL) + write + fsync", events=events,
    )  # fmt: skip


def _listing(folder: Path, runs: int, env: dict[str, str], repeats: int) -> dict:
    url = folder / "listed"
    ledger = Ledger(url)
    spec = {"store": "/data/digits.zarr", "method": "ncm"}
    for i in range(runs):
        run_id = f"r{i:07d}"
        ledger.start({"run_id": run_id, "kind": "train", "spec": spec,
                      "command": ["imgscale", "train"], "versions": {"imgscale": "0"}})  # fmt: skip
        ledger.finish(run_id, "ok", rows=i)
    listing = [sys.executable, "-m", "imgscale", "runs", "--json", "--ledger", str(url)]
    first = _seconds(listing, env)  # compacts the finished runs into the index
    ours = [_seconds(listing, env) for _ in range(repeats)]
    peer = [_seconds([sys.executable, "-m", "imgscale", "--help"], env) for _ in range(repeats)]
    return _versus(
        f"imgscale runs at {runs:,} runs", ours, peer, "imgscale --help",
        first_listing_s=first, target_s=LISTING_TARGET_S,
    )  # fmt: skip


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _cluster(log: Path) -> tuple[str, list[subprocess.Popen]]:
    dask = str(Path(sys.executable).with_name("dask"))
    address = f"tcp://127.0.0.1:{_free_port()}"
    out = open(log, "w")  # the processes write it until they end
    start = [dask, "scheduler", "--host", "127.0.0.1", "--port", address.rsplit(":", 1)[1]]
    processes = [subprocess.Popen([*start, "--no-dashboard"], stdout=out, stderr=out)]
    for extra in (["--resources", "driver=1"], []):
        processes.append(
            subprocess.Popen(
                [
                    dask,
                    "worker",
                    address,
                    "--nthreads",
                    "1",
                    "--host",
                    "127.0.0.1",
                    "--no-dashboard",
                    *extra,
                ],
                stdout=out,
                stderr=out,
            )
        )
    from distributed import Client

    with Client(address, timeout="60s") as client:
        client.wait_for_workers(2, timeout=120)
    return address, processes


def _detached(folder: Path, rows: int, env: dict[str, str], repeats: int, log) -> list[dict]:
    rng = np.random.default_rng(0)
    X = rng.standard_normal((rows, 64)).astype(np.float32)
    np.savez(folder / "rows.npz", X=X, y=np.arange(rows) % 10)
    address, processes = _cluster(folder / "cluster.log")
    env = {**env, "IMGSCALE_LEDGER": str(folder / "cluster-ledger")}
    imgscale = [sys.executable, "-m", "imgscale"]
    help_s, submit_s, status_s, detached_s, attached_s = [], [], [], [], []
    try:
        for turn in range(repeats):
            for mode in ("attached", "detached"):
                name = f"{mode}{turn}"
                spec = folder / f"{name}.toml"
                spec.write_text(
                    f'[[jobs]]\nkind = "ingest"\nsrc = "rows.npz"\nstore = "{name}.zarr"\n\n'
                    f'[[jobs]]\nkind = "train"\nstore = "{name}.zarr"\nmodel = "{name}.model"\n'
                    'method = "ncm"\n'
                )
                started = time.perf_counter()
                if mode == "attached":
                    argv = [*imgscale, "run", str(spec), "--scheduler", address]
                    subprocess.run(argv, env=env, check=True, capture_output=True)
                    attached_s.append(time.perf_counter() - started)
                    continue
                argv = [*imgscale, "submit", str(spec), "--scheduler", address]
                run_id = subprocess.run(
                    argv, env=env, check=True, capture_output=True, text=True
                ).stdout.strip()
                submit_s.append(time.perf_counter() - started)
                while True:
                    asked = time.perf_counter()
                    shown = subprocess.run(
                        [*imgscale, "status", run_id, "--json"], env=env, check=True,
                        capture_output=True, text=True,
                    )  # fmt: skip
                    status_s.append(time.perf_counter() - asked)
                    outcome = json.loads(shown.stdout)["outcome"]
                    if outcome != "running":
                        break
                if outcome != "ok":
                    raise RuntimeError(f"detached run {run_id} ended {outcome}")
                detached_s.append(time.perf_counter() - started)
            help_s.append(_seconds([*imgscale, "--help"], env))
            log(f"turn {turn}: attached {attached_s[-1]:.1f} s, detached {detached_s[-1]:.1f} s")
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            process.wait(timeout=60)
    overhead = statistics.median(detached_s) - statistics.median(attached_s)
    return [
        _versus("imgscale submit (spawn to exit)", submit_s, help_s, "imgscale --help"),
        _versus("imgscale status (spawn to exit)", status_s, help_s, "imgscale --help"),
        _versus(
            f"spec run detached ({rows:,} rows ingest + ncm)",
            detached_s,
            attached_s,
            "the same spec run attached, same cluster",
            overhead_s=overhead,
            target_s=0.05 * statistics.median(attached_s) + 2.0,
        ),
    ]


@benchmark(
    "ledger",
    "the run ledger on shared storage (an event beside a bare durable create; imgscale runs "
    "at 10,000 runs) and detached runs (submit and status times; detached against attached)",
)
def suite(ctx: Context) -> list[dict]:
    folder = ctx.workdir / "ledger"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    env = {**os.environ, "IMGSCALE_LEDGER": str(folder / "unused")}
    env.pop("DASK_SCHEDULER_ADDRESS", None)
    repeats = ctx.pick(tiny=1, small=3, medium=5, large=5)
    records = [
        _event_cost(folder, ctx.pick(tiny=100, small=1_000, medium=2_000, large=2_000)),
        _listing(folder, ctx.pick(tiny=200, small=2_000, medium=10_000, large=10_000), env,
                 repeats),
    ]  # fmt: skip
    ctx.log(f"{records[0]['name']}: {records[0]['value']:.2f} ms; {records[1]['name']}: "
            f"{records[1]['value']:.2f} s")  # fmt: skip
    if ctx.external_cluster:
        return records  # this benchmark starts its own scheduler and workers
    rows = ctx.pick(tiny=2_000, small=50_000, medium=200_000, large=200_000)
    return records + _detached(folder, rows, env, repeats, ctx.log)
