"""The run ledger and detached runs: what following a run from anywhere costs.

Every figure beside a peer measured in the same run, the two in turn (the median of the scale's
repetitions, at least 5 above small; the record gives the spread and the median of the ratios
of the runs paired):

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

from imgscale.bench.common import interleaved, record, repetitions
from imgscale.bench.registry import Context, benchmark
from imgscale.storage import Ledger

LISTING_TARGET_S = 2.0


def _seconds(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def _versus(name: str, ours: list[float], peer: list[float], peer_name: str, **extra) -> dict:
    """Seconds of ours beside the peer's, the i-th runs of the two paired."""
    return record(name, ours, "s", peer, peer=peer_name, **extra)


def _event_cost(folder: Path, events: int, repeats: int) -> dict:
    """Milliseconds an event: ``events`` ledger events, then as many bare durable creates, in
    turn, ``repeats`` rounds."""
    ledger = Ledger(folder / "ledger")
    line = ["imgscale: a line of output as a driver logs it, about eighty bytes long......"]
    body = json.dumps({"lines": line, "run_id": "r1"}).encode()
    bare = folder / "bare"
    bare.mkdir()
    rounds = iter(range(repeats))

    def ours() -> float:
        started = time.perf_counter()
        for _ in range(events):
            ledger.log("r1", line)
        return (time.perf_counter() - started) / events * 1e3

    def peer() -> float:
        turn = next(rounds)
        started = time.perf_counter()
        for i in range(events):
            fd = os.open(bare / f"{turn}-{i}.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            os.write(fd, body)
            os.fsync(fd)
            os.close(fd)
        return (time.perf_counter() - started) / events * 1e3

    ours_ms, peer_ms = interleaved(ours, peer, repeats=repeats)
    return record(
        "ledger event (local folder)", ours_ms, "ms", peer_ms,
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
    ours, peer = interleaved(
        lambda: _seconds(listing, env),
        lambda: _seconds([sys.executable, "-m", "imgscale", "--help"], env),
        repeats=repeats,
    )
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
                polls = []
                while True:
                    asked = time.perf_counter()
                    shown = subprocess.run(
                        [*imgscale, "status", run_id, "--json"], env=env, check=True,
                        capture_output=True, text=True,
                    )  # fmt: skip
                    polls.append(time.perf_counter() - asked)
                    outcome = json.loads(shown.stdout)["outcome"]
                    if outcome != "running":
                        break
                if outcome != "ok":
                    raise RuntimeError(f"detached run {run_id} ended {outcome}")
                status_s.append(statistics.median(polls))  # the turn's polls
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
        _versus(
            "imgscale status (spawn to exit)",
            status_s,
            help_s,
            "imgscale --help",
            each="the median of a turn's polls",
        ),
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
    # Whole processes vary most from run to run: 5 runs above small, however few the scale's.
    repeats = max(repetitions(ctx), ctx.pick(tiny=0, small=0, medium=5, large=5))
    records = [
        _event_cost(folder, ctx.pick(tiny=100, small=1_000, medium=2_000, large=2_000), repeats),
        _listing(folder, ctx.pick(tiny=200, small=2_000, medium=10_000, large=10_000), env,
                 repeats),
    ]  # fmt: skip
    ctx.log(f"{records[0]['name']}: {records[0]['value']:.2f} ms; {records[1]['name']}: "
            f"{records[1]['value']:.2f} s")  # fmt: skip
    if ctx.external_cluster:
        return records  # this benchmark starts its own scheduler and workers
    rows = ctx.pick(tiny=2_000, small=50_000, medium=200_000, large=200_000)
    return records + _detached(folder, rows, env, repeats, ctx.log)
