"""``imgscale bench``: registered with the ``imgscale`` command through the ``imgscale.commands``
entry point, so the program's own layers never import the benchmarks."""

from __future__ import annotations

import json
import shlex
import shutil
import tempfile
from importlib.util import find_spec
from pathlib import Path

import click

from imgscale.bench.registry import SCALES
from imgscale.jobs.options import json_option, scheduler_option, verbose, verbose_option

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
    help="Where results.parquet, report.md, plots and Dask reports go (required to run).",
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
@scheduler_option
@json_option
@verbose_option
def bench(
    names, list_only, scale, out, data_dir, workdir, docs, tables, scheduler, as_json
) -> None:  # fmt: skip
    """Run benchmarks NAMES (default: all) at one scale; each figure beside a peer or a machine
    limit measured in the same run.

    \b
    imgscale bench --list
    imgscale bench ridge pq --scale tiny --out bench-out
    imgscale bench --docs docs --add bench-out/results.parquet
    """
    from imgscale.bench.registry import data_dir as resolve_data_dir
    from imgscale.bench.suite import run_suite, select

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
    work = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="imgscale-bench-"))

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


def _command(names: tuple[str, ...], scale: str, data: bool, scheduler: bool) -> str:
    """The command that reruns this run, with this machine's folders and address as names."""
    words = ["imgscale", "bench", *names, "--scale", scale, "--out", "DIR"]
    words += ["--data-dir", "DATA"] * data + ["--scheduler", "ADDRESS"] * scheduler
    return shlex.join(words)
