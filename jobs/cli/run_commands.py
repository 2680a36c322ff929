"""`imgscale` commands that run other commands and list what ran: run (a spec's jobs, in this
process), schedule (a command on a timer), runs (the run ledger: list, show, import)."""

from __future__ import annotations

import datetime as dt
import json
import shlex
from pathlib import Path
from typing import Any

import click

from imgscale.jobs.cli.options import json_option, scheduler_option, verbose_option
from imgscale.jobs.runs import (
    SpecOrigin,
    command_line,
    ledger_option,
    one_line,
    open_ledger,
    spec_origin,
)
from imgscale.jobs.schedule import parse_every
from imgscale.jobs.spec import Job, SpecError, load_spec
from imgscale.storage import use_storage_options


@click.command()
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option("--dry-run", is_flag=True, help="Check the spec and print its commands only.")
@scheduler_option
@ledger_option
@verbose_option
@click.pass_context
def run(ctx: click.Context, spec: str, dry_run: bool, scheduler: str | None, ledger) -> None:
    """Run the job, or the jobs in order, of the TOML file SPEC (see examples/).

    The whole spec is checked first and every problem is printed, one line each; nothing runs
    unless there are none. Each job is recorded in the run ledger like the same command typed
    by hand. --scheduler (or $DASK_SCHEDULER_ADDRESS) overrides the spec's scheduler; without
    any, each job chooses its cluster as the same command typed by hand does (in this process
    for a small store, worker processes for a large one).
    """
    root = ctx.find_root().command
    jobs = checked_spec(spec, root)
    plans = [(job, _with_scheduler(job, scheduler)) for job in jobs]
    if dry_run:
        for job, params in plans:
            click.echo(shlex.join(command_line(job.command, params)))
        click.echo(f"{spec}: {len(jobs)} jobs checked; nothing was run", err=True)
        return
    origin = SpecOrigin(str(Path(spec).resolve()), [])
    token = spec_origin.set(origin)
    try:
        for job, params in plans:
            argv = command_line(job.command, params)
            click.echo(f"job {job.number}/{len(jobs)}: {shlex.join(argv)}", err=True)
            if ledger:
                argv += ["--ledger", ledger]
            try:
                with use_storage_options(job.storage_options or {}):
                    root.main(args=argv[1:], prog_name="imgscale", standalone_mode=False)
            except Exception as e:
                raise click.ClickException(
                    f"job {job.number} ({job.kind}) failed: {one_line(e)}"
                ) from e
    finally:
        spec_origin.reset(token)
    click.echo(f"{spec}: {len(jobs)} jobs ok (runs {', '.join(origin.run_ids)})", err=True)


def checked_spec(spec: str, root: click.Group) -> list[Job]:
    """The jobs of the spec file ``spec``, every problem printed, one line each, if any."""
    try:
        return load_spec(spec, root)
    except SpecError as e:
        for problem in e.problems:
            click.echo(f"imgscale: error: {problem}", err=True)
        raise click.ClickException(str(e)) from e


def _with_scheduler(job, scheduler: str | None) -> dict[str, Any]:
    if scheduler is None or not any(p.name == "scheduler" for p in job.command.params):
        return job.params
    return {**job.params, "scheduler": scheduler}


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--every", help="Interval: 90s, 10m, 2h, 1d (first run at once).")
@click.option("--cron", help="Five-field cron expression, e.g. '*/10 * * * *' (local time).")
@click.option("--lock", type=click.Path(), help="Lock file (default: one per command in tmp).")
@click.option("--max-runs", type=int, help="Stop after this many turns (default: never).")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
@verbose_option
def schedule(every, cron, lock, max_runs, command) -> None:
    """Run `imgscale COMMAND` every interval or on a cron schedule, never two at once.

    A turn that finds another run holding the lock (flock, released when its holders die) is
    skipped. Example (one turn; without --max-runs it keeps going):

    \b
      imgscale schedule --every 10m --max-runs 1 -- embed ale.model digits.zarr digits-ale.zarr
    """
    from imgscale.jobs.schedule import schedule as run_schedule

    if (every is None) == (cron is None):
        raise click.UsageError("give exactly one of --every and --cron")
    counts = run_schedule(
        list(command),
        every=parse_every(every) if every is not None else None,
        cron=cron,
        lock_path=Path(lock) if lock else None,
        max_runs=max_runs,
        log=lambda line: click.echo(line, err=True),
    )
    click.echo(
        f"schedule: {counts['ran']} runs ({counts['failed']} failed), {counts['skipped']} skipped",
        err=True,
    )


@click.group(invoke_without_command=True)
@click.option("--since", help="Runs started in the last 90m, 2h, 1d, or since an ISO time.")
@click.option("--kind", help="Only runs of this command (ingest, train, ...).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON list of runs only.")
@ledger_option
@verbose_option
@click.pass_context
def runs(ctx: click.Context, since: str | None, kind: str | None, as_json: bool, ledger) -> None:
    """List the runs in the ledger, newest first, with the progress of running ones.

    With --json: a list of objects (run_id, kind, outcome, started, ended, seconds, rows,
    rows_done, rows_total, current_pass, progress_unit, error); a running job's progress is
    rows_done of rows_total in progress_unit (rows, images read, SGD iterations).
    `imgscale runs show RUN_ID` shows one run.
    """
    ctx.obj = ledger
    if ctx.invoked_subcommand is not None:
        return
    book = open_ledger(ledger)
    records = book.runs(since=None if since is None else _since(since), kind=kind)
    listing = [_summary(r) for r in reversed(records)]
    if as_json:
        click.echo(json.dumps(listing))
        return
    if not listing:
        click.echo(f"no runs in {book.url}", err=True)
    kind_width = max([9, *(len(r["kind"]) for r in listing)])
    for r in listing:
        if r["outcome"] == "running":
            total = "?" if r["rows_total"] is None else r["rows_total"]
            unit = r["progress_unit"] or "rows"
            detail = f"{r['current_pass'] or 'starting'}: {r['rows_done'] or 0}/{total} {unit}"
        else:
            rows = "" if r["rows"] is None else f"{r['rows']} rows"
            detail = f"{rows}  {r['error'] or ''}".strip()
        seconds = "" if r["seconds"] is None else f"{r['seconds']:.0f} s"
        click.echo(
            f"{r['run_id']}  {r['kind']:<{kind_width}} {r['outcome']:<9} {r['started']}  "
            f"{seconds:>7}  {detail}"
        )


@runs.command("show")
@click.argument("run_id")
@json_option
@ledger_option
@verbose_option
@click.pass_context
def show(ctx: click.Context, run_id: str, as_json: bool, ledger) -> None:
    """Show run RUN_ID (or a unique prefix of it) in full, with the command that reruns it."""
    record = open_ledger(ledger or ctx.obj).get(run_id)
    record["rerun"] = shlex.join(record["command"])
    endpoint = (record["spec"].get("storage_options") or {}).get("endpoint_url")
    if endpoint:  # the spec's endpoint, as the variable the command line reads
        record["rerun"] = f"AWS_ENDPOINT_URL={shlex.quote(endpoint)} {record['rerun']}"
    if as_json:
        click.echo(json.dumps(record))
        return
    for key in ("run_id", "kind", "outcome", "error", "started", "ended", "rows", "scheduler"):
        click.echo(f"{key:>12}: {record[key]}")
    if record["outcome"] == "running":
        click.echo(
            f"{'progress':>12}: {record['pass']}: {record['rows_done']}/{record['rows_total']} "
            f"{record['progress_unit'] or 'rows'}"
        )
    click.echo(f"{'host':>12}: {record['host']} (pid {record['pid']}, in {record['cwd']})")
    if record["spec_file"]:
        click.echo(f"{'spec file':>12}: {record['spec_file']}")
    click.echo(f"{'git commit':>12}: {record['git_commit'] or 'not run from a checkout'}")
    for section in ("spec", "figures", "versions"):
        for key, value in (record[section] or {}).items():
            click.echo(f"{section:>12}: {key} = {value}")
    click.echo(f"{'rerun':>12}: {record['rerun']}")


@runs.command("import")
@click.argument("sqlite_file", type=click.Path(exists=True, dir_okay=False))
@ledger_option
@verbose_option
@click.pass_context
def import_runs(ctx: click.Context, sqlite_file: str, ledger) -> None:
    """Copy the runs of SQLITE_FILE, the ledger of an older imgscale, into the ledger (once:
    importing it again copies nothing). The per-user default ledger does this by itself."""
    book = open_ledger(ledger or ctx.obj)
    added = book.import_sqlite(sqlite_file)
    click.echo(f"{sqlite_file}: {added} runs copied into {book.url}", err=True)


def _summary(record: dict[str, Any]) -> dict[str, Any]:
    seconds = None
    if record["ended"]:
        delta = dt.datetime.fromisoformat(record["ended"]) - dt.datetime.fromisoformat(
            record["started"]
        )
        seconds = delta.total_seconds()
    keys = ("run_id", "kind", "outcome", "started", "ended", "rows", "rows_done", "rows_total")
    return {
        **{k: record[k] for k in keys},
        "seconds": seconds,
        "current_pass": record["pass"],
        "progress_unit": record["progress_unit"],
        "error": record["error"],
    }


def _since(text: str) -> str:
    """``--since`` as the ISO UTC time the ledger stores: a duration back from now, or a time
    (local time when it names no zone)."""
    try:
        start = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=parse_every(text))
    except ValueError:
        try:
            start = dt.datetime.fromisoformat(text).astimezone(dt.UTC)
        except ValueError:
            raise click.BadParameter(
                f"{text!r}: expected a duration (90m, 2h, 1d) or an ISO time", param_hint="--since"
            ) from None
    return start.isoformat(timespec="seconds")
