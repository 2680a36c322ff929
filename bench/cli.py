"""``imgscale bench``: registered with the ``imgscale`` command through the ``imgscale.commands``
entry point, so the program's own layers never import the benchmarks."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import tempfile
from importlib.util import find_spec
from pathlib import Path

import click

from imgscale.bench.compare import TOLERANCE
from imgscale.bench.registry import SCALES
from imgscale.jobs.cli.options import json_option, scheduler_option, verbose, verbose_option
from imgscale.jobs.runs import ledger_option
from imgscale.storage import is_url

# The bench extra: plots (matplotlib) and each benchmark's Dask performance report (bokeh).
# Checked before any benchmark runs, so that without the extra running benchmarks is a one-line
# install hint before any work, not a failure after one has run; --list needs neither.
BENCH_EXTRA = ("matplotlib", "bokeh")


def _require_bench_extra() -> None:
    missing = [module for module in BENCH_EXTRA if find_spec(module) is None]
    if missing:
        raise click.ClickException(
            f"`imgscale bench` needs the 'bench' extra to run benchmarks ({', '.join(missing)} "
            "not installed): pip install 'imgscale[bench]'"
        )


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("names", nargs=-1)
@click.option("--list", "list_only", is_flag=True, help="List the benchmarks and what each needs.")
@click.option(
    "--scale",
    type=click.Choice(SCALES),
    default="small",
    show_default=True,
    help="Sizes: tiny (a toy, seconds), small (the suite in minutes), medium (the published "
    "figures' sizes), large (stores larger than memory).",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    help="Where results.parquet, report.md, plots and Dask reports go (required to run): a "
    "folder, or an s3:// prefix they are uploaded to when the suite ends.",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False),
    envvar="IMGSCALE_DATA",
    help="Folder of mnist.npz, usps.npz, 20news-bydate.tar.gz (default: $IMGSCALE_DATA).",
)
@click.option(
    "--workdir",
    type=click.Path(file_okay=False),
    help="Scratch folder for synthetic stores, reused across runs (default: a new temp folder).",
)
@click.option(
    "--docs",
    type=click.Path(file_okay=False),
    help="Instead of running: regenerate DOCS/README.md (the headline figures and their "
    "plots), DOCS/benchmarks.md and DOCS/results.md from DOCS/results.parquet (after merging "
    "the --add tables).",
)
@click.option(
    "--add",
    "tables",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    help="With --docs: a run's results.parquet to merge in (its plots beside it are copied).",
)
@click.option(
    "--compare",
    "tables_to_compare",
    nargs=2,
    type=click.Path(exists=True, dir_okay=False),
    metavar="OLD NEW",
    help="Instead of running: list the figures of results table NEW that got better or worse "
    "than in OLD beyond their spread (NAMES: only those benchmarks' figures).",
)
@click.option(
    "--tolerance",
    type=click.FloatRange(0, min_open=True),
    default=TOLERANCE,
    show_default=True,
    help="With --compare: how far, relative to the old value, a time or rate measured once (it "
    "has no spread) must move to be called a change (an accuracy, size or count: 0.5%).",
)
@click.option(
    "--submit",
    is_flag=True,
    help="Run the suite detached on the cluster at --scheduler, as `imgscale submit` runs a "
    "spec: prints the run id and exits; the run's record lists the result files.",
)
@scheduler_option
@ledger_option
@json_option
@verbose_option
def bench(
    names, list_only, scale, out, data_dir, workdir, docs, tables, tables_to_compare, tolerance,
    submit, scheduler, ledger, as_json,
) -> list[str] | None:  # fmt: skip
    """Run benchmarks NAMES (default: all) at one scale; each figure beside a peer or a machine
    limit measured in the same run. Returns the files it wrote (a submitted run lists them).

    \b
    imgscale bench --list
    imgscale bench ridge pq --scale tiny --out bench-out
    imgscale bench --docs docs --add bench-out/results.parquet
    imgscale bench --compare docs/results.parquet bench-out/results.parquet
    """
    from imgscale.bench.registry import data_dir as resolve_data_dir
    from imgscale.bench.suite import run_suite, select

    if tables_to_compare:
        others = {"--docs": docs, "--add": tables, "--list": list_only, "--out": out,
                  "--submit": submit}  # fmt: skip
        given = [flag for flag, value in others.items() if value]
        if given:
            raise click.UsageError(f"--compare runs nothing: drop {', '.join(given)}")
        _compare(*map(Path, tables_to_compare), names, tolerance, as_json)
        return None
    if click.get_current_context().get_parameter_source("tolerance").name != "DEFAULT":
        raise click.UsageError("--tolerance needs --compare OLD NEW")
    if docs:
        _require_bench_extra()
        _write_docs(Path(docs), tables, as_json)
        return
    if tables:
        raise click.UsageError("--add needs --docs DIR")
    chosen = select(names)
    if list_only:
        _print_list(chosen, as_json)
        return
    if not out:
        raise click.UsageError("--out DIR is required to run benchmarks")
    _require_bench_extra()
    data = resolve_data_dir(data_dir)
    if data is not None and not data.is_dir():
        raise click.UsageError(f"--data-dir {data}: no such folder")
    if submit:
        _submit(names, scale, out, data, workdir, scheduler, ledger, as_json)
        return None
    work = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="imgscale-bench-"))
    target = out
    if is_url(out):  # written here, uploaded when the suite ends
        out = tempfile.mkdtemp(prefix="imgscale-bench-out-")

    def log(line: str) -> None:
        if not as_json:
            click.echo(line, err=True)

    try:
        outcome = run_suite(
            chosen,
            scale=scale,
            out=Path(out),
            workdir=work,
            data_dir=data,
            scheduler=scheduler,
            command=_command(names, scale, data is not None, scheduler is not None),
            log=log,
            traceback_log=(lambda text: click.echo(text, err=True)) if verbose.get() else None,
        )
    finally:
        if not workdir:  # our own temporary stores; a given --workdir is kept for the next run
            shutil.rmtree(work, ignore_errors=True)
    written = _written(outcome)
    if target != out:
        written = _upload(written, target)
        shutil.rmtree(out, ignore_errors=True)
        outcome.results, outcome.report = written[0], written[1]
    summary = {
        "results": str(outcome.results),
        "report": str(outcome.report),
        "scale": scale,
        "ran": ",".join(outcome.ran),
        "skipped": ",".join(outcome.skipped),
        "failed": ",".join(outcome.failed),
        "rows": outcome.rows,
    }
    if as_json:
        click.echo(json.dumps(summary))
    else:
        click.echo(f"{outcome.rows} figures in {outcome.results}; report {outcome.report}")
        for name, reason in outcome.skipped.items():
            click.echo(f"skipped {name}: {reason}")
    if outcome.failed:
        failed = "; ".join(f"{n}: {reason}" for n, reason in outcome.failed.items())
        raise click.ClickException(f"benchmark failed ({failed}); the others' results are saved")
    return [str(file) for file in written]


def _written(outcome) -> list[Path]:
    """The files this run wrote: the results table and the report first, then each run
    benchmark's plots and Dask report."""
    folder = outcome.results.parent
    own = [
        file
        for name in [*outcome.ran, *outcome.failed]
        for file in sorted(folder.glob(f"{name}-*"))
        if file.is_file()
    ]
    return [outcome.results, outcome.report, *own]


def _upload(files: list[Path], prefix: str) -> list[str]:
    """Copy ``files`` under the object-store ``prefix``; returns their URLs, in order."""
    from imgscale.storage.fs import location, put_object

    urls = []
    for file in files:
        url = f"{prefix.rstrip('/')}/{file.name}"
        put_object(location(url), file.read_bytes())
        urls.append(url)
    return urls


def _submit(names, scale, out, data, workdir, scheduler, ledger, as_json) -> None:
    """Hand the suite to the cluster as a detached run of kind ``bench``: its driver runs this
    command there (jobs/driver.py) and lists the files it wrote in the run's record."""
    from imgscale.jobs.detached import is_remote, job_record, submit_run

    if not scheduler:
        raise click.UsageError(
            "--submit needs a cluster: --scheduler ADDRESS or $DASK_SCHEDULER_ADDRESS"
        )
    folders = {"--out": out, "--data-dir": data, "--workdir": workdir}
    relative = [
        f"{flag} {path}"
        for flag, path in folders.items()
        if path is not None and not is_url(path) and not Path(path).is_absolute()
    ]
    if relative and is_remote(scheduler):
        raise click.UsageError(
            f"{', '.join(relative)}: relative to this machine; the workers of {scheduler} "
            "cannot reach it: give a URL or an absolute path every worker mounts"
        )
    params = {"names": list(names), "scale": scale, "submit": False}
    for key, path in (("out", out), ("data_dir", data), ("workdir", workdir)):
        if path is not None:
            params[key] = str(path) if is_url(path) else os.path.abspath(path)
    command = ["imgscale", "bench", *names, "--scale", scale, "--out", params["out"], "--submit"]
    run_id = submit_run(
        [job_record(1, "bench", params)],
        kind="bench",
        address=scheduler,
        ledger=ledger,
        spec_file=None,
        command=command,
    )
    click.echo(json.dumps({"run_id": run_id}) if as_json else run_id)


def _print_list(chosen, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps({b.name: f"{b.summary} (needs: {', '.join(b.needs) or 'nothing'})"
                               for b in chosen}))  # fmt: skip
        return
    for b in chosen:
        needs = ", ".join(b.needs) if b.needs else "nothing beyond the bench extra"
        click.echo(f"{b.name:<10} {b.summary}\n{'':<10} needs: {needs}")


def _write_docs(docs: Path, tables: tuple[str, ...], as_json: bool) -> None:
    from imgscale.bench import docs as documents

    if not tables and not (docs / documents.TABLE_FILE).exists():
        raise click.UsageError(f"{docs / documents.TABLE_FILE} does not exist: pass --add TABLE")
    docs.mkdir(parents=True, exist_ok=True)
    added = sum(documents.add(docs, Path(table)) for table in tables)
    written = documents.write(docs)
    if as_json:
        click.echo(json.dumps({"rows_added": added, "written": ",".join(map(str, written))}))
    else:
        click.echo(f"{added} figures added; wrote {', '.join(map(str, written))}")


def _compare(old: Path, new: Path, names: tuple[str, ...], tolerance: float, as_json: bool) -> None:
    """Print what :func:`imgscale.bench.compare.compare` finds between two results tables."""
    from imgscale.bench import compare, report, results

    old_rows, new_rows = results.read(old), results.read(new)
    if names:
        unknown = sorted(set(names) - {r["benchmark"] for r in old_rows + new_rows})
        if unknown:
            raise click.UsageError(f"neither table has a figure of {', '.join(unknown)}")
        old_rows = [r for r in old_rows if r["benchmark"] in names]
        new_rows = [r for r in new_rows if r["benchmark"] in names]
    found = compare.compare(old_rows, new_rows, tolerance)
    by_verdict = {
        verdict: [d for d in found if d.verdict == verdict] for verdict in compare.VERDICTS
    }
    compared = sum(d.old is not None and d.new is not None for d in found)
    if as_json:
        summary = {"old": str(old), "new": str(new), "tolerance": tolerance, "compared": compared}
        for verdict, differences in by_verdict.items():
            key = verdict.replace(" ", "_")
            summary[key] = len(differences)
            if verdict not in ("within noise", "not run"):  # listed, these would be most
                summary[f"{key}_figures"] = "; ".join(_figure(d) for d in differences)
        click.echo(json.dumps(summary))
        return
    counts = ", ".join(f"{len(by_verdict[v])} {v}" for v in compare.VERDICTS[:6])
    click.echo(
        f"{compared} figures in both tables: {counts}; {len(by_verdict['added'])} added, "
        f"{len(by_verdict['removed'])} removed, {len(by_verdict['not run'])} of benchmarks NEW did "
        f"not run (where a side was measured once: beyond {tolerance:.0%})"
    )
    for verdict in ("worse", "better", "changed", "noisy", "other machine", "added", "removed"):
        if by_verdict[verdict]:
            click.echo(f"{verdict}:")
        for d in by_verdict[verdict]:
            sides = [report.spread(row) if row else "—" for row in (d.old, d.new)]
            change = f", {d.change:+.0%}" if d.change is not None else ""
            click.echo(f"  {_figure(d)}: {sides[0]} → {sides[1]}{change}{_why(d)}")


def _figure(difference) -> str:
    unit = f", {difference.unit}" if difference.unit else ""
    return f"{difference.benchmark}: {difference.name} ({difference.scale}{unit})"


def _why(difference) -> str:
    """Which table's run of a figure said to be noisy was noisy; how the hosts of a figure said
    to be from another machine differ."""
    if difference.verdict == "other machine":
        old, new = (row["gemm_gflops"] for row in (difference.old, difference.new))
        return f" (host GEMM {old:.0f} → {new:.0f} GFLOP/s)"
    if difference.verdict != "noisy":
        return ""
    sides = [
        side for side, row in (("old", difference.old), ("new", difference.new)) if row["noisy"]
    ]
    return f" (noisy in {' and '.join(sides)})"


def _command(names: tuple[str, ...], scale: str, data: bool, scheduler: bool) -> str:
    """The command that reruns this run, with this machine's folders and address as names."""
    words = ["imgscale", "bench", *names, "--scale", scale, "--out", "DIR"]
    words += ["--data-dir", "DATA"] * data + ["--scheduler", "ADDRESS"] * scheduler
    return shlex.join(words)
