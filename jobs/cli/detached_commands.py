"""`imgscale` commands for runs that live on the cluster: submit, status, logs, cancel, resume,
and the hidden drive its driver task starts (the work is `jobs.detached`'s)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import click

from imgscale.jobs.cli.options import json_option, scheduler_option, verbose_option
from imgscale.jobs.cli.run_commands import checked_spec
from imgscale.jobs.runs import ledger_option, open_ledger


@click.command()
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option("--every", help="Run the spec every interval (90s, 10m, 2h, 1d), first turn at once.")
@click.option(
    "--cron", help="Run the spec on a five-field cron schedule (the driver's local time)."
)
@scheduler_option
@ledger_option
@json_option
@verbose_option
@click.pass_context
def submit(
    ctx: click.Context,
    spec: str,
    every: str | None,
    cron: str | None,
    scheduler: str | None,
    ledger,
    as_json: bool,
) -> None:
    """Run the jobs of SPEC on the cluster, detached: exits at once, printing the run id.

    SPEC is checked as `imgscale run --dry-run` checks it (nothing is submitted if any problem
    is found); paths relative to this machine are refused with a remote scheduler. The run is
    recorded in the ledger (put it where the workers and you both read it: --ledger
    s3://bucket/ledger), and a driver on the cluster runs the jobs as `imgscale run` would.
    Follow it with `imgscale status RUN`, `logs RUN --follow`; stop it with `cancel RUN`.
    With --every or --cron the run is a schedule on the cluster: each turn runs the spec on the
    same cluster and is recorded as a run of kind ``turn`` (a failed turn does not stop the
    next); `imgscale cancel RUN` ends it.
    """
    from imgscale.jobs.detached import (
        spec_job_record,
        spec_scheduler,
        submit_run,
        unreachable_paths,
    )
    from imgscale.jobs.schedule import CronSchedule, parse_every

    if every is not None and cron is not None:
        raise click.UsageError("give at most one of --every and --cron")
    try:
        schedule = {"every": parse_every(every)} if every else {}
        if cron:
            CronSchedule.parse(cron)
            schedule = {"cron": cron}
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--every" if every else "--cron") from e
    jobs = checked_spec(spec, ctx.find_root().command)
    address = scheduler or spec_scheduler(jobs)
    if not address:
        raise click.UsageError(
            "submit needs a cluster: --scheduler ADDRESS, $DASK_SCHEDULER_ADDRESS or the "
            "spec's scheduler"
        )
    refused = unreachable_paths(spec, jobs, address)
    for line in refused:
        click.echo(f"imgscale: error: {line}", err=True)
    if refused:
        raise click.ClickException(f"{spec}: {len(refused)} paths the workers cannot reach")
    run_id = submit_run(
        [spec_job_record(job) for job in jobs],
        kind="spec",
        address=address,
        ledger=ledger,
        spec_file=str(Path(spec).resolve()),
        command=["imgscale", "submit", str(Path(spec).resolve())],
        schedule=schedule,
    )
    click.echo(json.dumps({"run_id": run_id}) if as_json else run_id)


@click.command(hidden=True)
@click.argument("run_id")
@click.option("--ledger", "ledger_url", required=True)
@click.option("--scheduler", required=True)
@click.option("--worker", required=True)
@click.option("--generation", type=int, required=True)
@click.option("--parent", type=int, required=True)
@click.pass_context
def drive(
    ctx: click.Context, run_id: str, ledger_url: str, scheduler: str, worker: str,
    generation: int, parent: int,
) -> None:  # fmt: skip
    """The child process of a run's driver task (jobs/driver.py): runs the run's jobs as the
    attempt of ``generation``, which the task claimed."""
    from imgscale.jobs.detached import drive_run

    root = ctx.find_root().command
    jobs = drive_run(root, ctx, run_id, ledger_url, scheduler, worker, generation, parent)
    click.echo(f"run {run_id}: {jobs} jobs ok")


@click.command()
@click.argument("run_id")
@ledger_option
@json_option
@verbose_option
def status(run_id: str, ledger, as_json: bool) -> None:
    """Outcome, stage, progress, heartbeat age and driver worker of run RUN_ID (or a unique
    prefix). --json keys: run_id, kind, outcome, stage, done, total, unit, heartbeat_age_s,
    worker, generation, scheduler, started, ended, error, outputs (the files the run wrote
    that its record lists: a submitted benchmark's results)."""
    from imgscale.jobs.detached import run_status

    found = run_status(open_ledger(ledger).get(run_id))
    if as_json:
        click.echo(json.dumps(found))
        return
    for key, value in found.items():
        if value is not None:
            click.echo(f"{key:>15}: {', '.join(value) if key == 'outputs' else value}")


@click.command()
@click.argument("run_id")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new lines until the run ends.")
@ledger_option
@verbose_option
def logs(run_id: str, follow: bool, ledger) -> None:
    """Print the output of run RUN_ID's driver (from any machine that reads the ledger)."""
    book = open_ledger(ledger)
    run_id = book.get(run_id)["run_id"]
    read: frozenset[str] = frozenset()
    while True:
        running = book.get(run_id)["outcome"] == "running"
        lines, read = book.logs(run_id, read)
        for line in lines:
            click.echo(line)
        if not follow or not running:
            return
        time.sleep(1.0)


@click.command()
@click.argument("run_id")
@ledger_option
@json_option
@verbose_option
def cancel(run_id: str, ledger, as_json: bool) -> None:
    """Ask run RUN_ID to stop at its next safe point; its driver records ``cancelled``."""
    from imgscale.jobs.detached import cancel_run

    run_id = cancel_run(open_ledger(ledger), run_id)
    if as_json:
        click.echo(json.dumps({"run_id": run_id, "cancel_requested": True}))
    else:
        click.echo(f"run {run_id}: cancel requested; it stops at its next safe point")


@click.command()
@click.argument("run_id")
@scheduler_option
@ledger_option
@json_option
@verbose_option
def resume(run_id: str, scheduler: str | None, ledger, as_json: bool) -> None:
    """Continue the lost run RUN_ID on the cluster at --scheduler: jobs that ended ok are kept,
    the others run again from what their stores committed. Of two resumes at once, one wins."""
    from imgscale.jobs.detached import lost_run, resume_run

    book = open_ledger(ledger)
    record = lost_run(book, run_id)
    if not scheduler:
        raise click.UsageError("resume needs --scheduler ADDRESS (or $DASK_SCHEDULER_ADDRESS)")
    resume_run(book, record, scheduler)
    run_id = record["run_id"]
    click.echo(json.dumps({"run_id": run_id}) if as_json else run_id)
