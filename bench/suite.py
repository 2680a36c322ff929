"""Run registered benchmarks at one scale: machine limits first, then each benchmark on one
cluster with a Dask performance report, bracketed by short calibrations of the machine and its
load sampled throughout (:mod:`imgscale.bench.calibration`), and dated by the hash of the code it
measures (:func:`imgscale.bench.staleness.code_hash`). The results table and the report are
rewritten after every benchmark, so a long run that is stopped keeps what it finished."""

from __future__ import annotations

import datetime
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from distributed import performance_report

from imgscale.bench import calibration, machine, report, results, staleness
from imgscale.bench.registry import REPEATS, Benchmark, Context, Skipped, benchmarks
from imgscale.jobs.cluster import connect

RESULTS_FILE = "results.parquet"
REPORT_FILE = "report.md"
# (disk probe, memory copy) bytes by scale: the limits take < 1 s at tiny, a few s at small.
_LIMIT_BYTES = {
    "tiny": (32 * 2**20, 32 * 2**20),
    "small": (1 * 2**30, 256 * 2**20),
    "medium": (4 * 2**30, 1 * 2**30),
    "large": (8 * 2**30, 1 * 2**30),
}


@dataclass
class Outcome:
    results: Path
    report: Path
    ran: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    rows: int = 0


def select(names: tuple[str, ...]) -> list[Benchmark]:
    """The benchmarks called ``names`` (all when empty); an unknown name is refused."""
    known = benchmarks()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown benchmark {', '.join(unknown)}; known: {', '.join(known)}")
    return [known[n] for n in names] if names else list(known.values())


def run_suite(
    chosen: list[Benchmark],
    *,
    scale: str,
    out: Path,
    workdir: Path,
    data_dir: Path | None,
    scheduler: str | None,
    command: str,
    log: Callable[[str], None],
    traceback_log: Callable[[str], None] | None = None,
) -> Outcome:
    out.mkdir(parents=True, exist_ok=True)
    workdir.mkdir(parents=True, exist_ok=True)
    installed, commit = results.provenance()
    header = {
        "scale": scale,
        "machine": machine.describe(),
        "version": installed,
        "commit": commit,
        "time": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": command,
    }
    columns = {
        "scale": scale,
        "machine": header["machine"],
        "imgscale_version": installed,
        "commit": commit,
        "time": header["time"],
        "command": command,
    }
    log("measuring the machine's limits")
    # A folder of this run's own for the disk probe's file: runs given one work dir at once
    # would otherwise write and remove the same file.
    with tempfile.TemporaryDirectory(dir=workdir, prefix="limits-") as probe_dir:
        limit_records = machine.limits(Path(probe_dir), *_LIMIT_BYTES[scale])
    table_rows = results.rows(limit_records, benchmark="machine", **columns)
    outcome = Outcome(out / RESULTS_FILE, out / REPORT_FILE)
    runs: list[dict] = []

    def save() -> None:
        results.write(outcome.results, table_rows)
        limit_rows = [r for r in table_rows if r["benchmark"] == "machine"]
        outcome.report.write_text(report.markdown(runs, limit_rows, header, out))
        outcome.rows = len(table_rows)

    save()
    with (
        connect(scheduler, quiet=True) as client,
        calibration.Calibrator(workdir, scale) as calibrator,
    ):
        address = client.scheduler.address
        log("calibrating the machine")
        before = calibrator.measure()
        for bench in chosen:
            ctx = Context(
                scale=scale,
                out=out,
                workdir=workdir,
                data_dir=data_dir,
                scheduler=address,
                external_cluster=scheduler is not None,
                limits={r["name"]: r["value"] for r in limit_records},
                log=log,
                benchmark=bench.name,
                repeats=REPEATS[scale],
            )
            entry = {"name": bench.name, "summary": bench.summary, "status": "ok"}
            runs.append(entry)
            html = out / f"{bench.name}-dask.html"
            log(f"{bench.name}: running")
            started = time.perf_counter()
            measured = staleness.code_hash(staleness.measured_files(bench))
            try:
                with performance_report(filename=str(html)), calibration.LoadSampler() as load:
                    records = bench.run(ctx)
            except Skipped as exc:
                entry.update(status="skipped", reason=str(exc))
                outcome.skipped[bench.name] = str(exc)
                log(f"{bench.name}: skipped: {exc}")
            except Exception as exc:  # one benchmark's failure is reported; the others still run
                reason = f"{type(exc).__name__}: {exc}"
                entry.update(status="failed", reason=reason)
                outcome.failed[bench.name] = reason
                log(f"{bench.name}: failed: {reason}")
                if traceback_log:
                    traceback_log(traceback.format_exc())
            else:
                seconds = time.perf_counter() - started
                after = calibrator.measure()
                conditions = calibration.Conditions(before, after, load.peak, load.other_cores)
                before = after
                bench_rows = [
                    {**row, **conditions.columns(row["unit"])}
                    for row in results.rows(
                        records, benchmark=bench.name, **columns, code_hash=measured
                    )
                ]
                plots = sorted(out.glob(f"{bench.name}-*.png"))
                ratios = out / f"{bench.name}-ratios.png"
                if ratios not in plots and report.ratio_plot(bench_rows, ratios, bench.name):
                    plots.append(ratios)
                entry.update(
                    rows=bench_rows,
                    plots=plots,
                    html=html if html.exists() else None,
                    conditions=conditions.describe(),
                )
                table_rows += bench_rows
                outcome.ran.append(bench.name)
                noisy = ", noisy" if conditions.noisy else ""
                log(f"{bench.name}: {len(records)} figures in {seconds:.0f} s{noisy}")
            save()
    return outcome
