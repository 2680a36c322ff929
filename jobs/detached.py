"""Runs that live on the cluster: ``imgscale submit``, ``status``, ``logs``, ``cancel``, ``resume``.

`submit` checks a spec exactly as ``imgscale run --dry-run`` does, records the run in the
ledger with its jobs resolved, hands the cluster one driver (jobs/driver.py) and exits, printing
the run id. The other commands read and write only the ledger, so they work from any machine
that reads it, with or without the cluster.
"""

from __future__ import annotations

import getpass
import json
import os
import shlex
import socket
import sys
import time
from pathlib import Path
from typing import Any

import click

from imgscale.jobs.driver import Watch, die_with_parent, scheduler_reachable, submit_driver
from imgscale.jobs.options import json_option, scheduler_option, verbose_option
from imgscale.jobs.runs import (
    SpecOrigin,
    command_line,
    git_commit,
    ledger_option,
    one_line,
    open_ledger,
    redact_urls,
    spec_origin,
    versions,
)
from imgscale.jobs.spec import Job, SpecError, load_spec
from imgscale.storage import Ledger, StoreError, is_url, use_storage_options

_LOOPBACK = ("127.", "localhost", "[::1]", "::1")
# The kinds of run `submit_run` records: a spec's jobs, and `imgscale bench --submit`'s suite.
SUBMITTED_KINDS = ("spec", "bench")


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
    root = ctx.find_root().command
    jobs = _checked(spec, root)
    address = scheduler or _spec_scheduler(jobs)
    if not address:
        raise click.UsageError(
            "submit needs a cluster: --scheduler ADDRESS, $DASK_SCHEDULER_ADDRESS or the "
            "spec's scheduler"
        )
    remote = is_remote(address)
    refused = [
        f"{spec}: job {job.number} ({job.kind}): key '{key}': {value!r} is relative to this "
        f"machine; the workers of {address} cannot reach it: give a URL or an absolute path "
        "every worker mounts"
        for job in jobs
        for key, value in job.relative_paths
        if remote
    ]
    for line in refused:
        click.echo(f"imgscale: error: {line}", err=True)
    if refused:
        raise click.ClickException(f"{spec}: {len(refused)} paths the workers cannot reach")
    run_id = submit_run(
        [_job_record(job) for job in jobs],
        kind="spec",
        address=address,
        ledger=ledger,
        spec_file=str(Path(spec).resolve()),
        command=["imgscale", "submit", str(Path(spec).resolve())],
        schedule=schedule,
    )
    click.echo(json.dumps({"run_id": run_id}) if as_json else run_id)


def submit_run(
    jobs: list[dict[str, Any]],
    *,
    kind: str,
    address: str,
    ledger: str | None,
    spec_file: str | None,
    command: list[str],
    schedule: dict[str, Any] | None = None,
) -> str:
    """Record a run of ``jobs`` (each as `job_record` makes it, paths the workers reach) in the
    ledger ``ledger`` names, hand its driver to the scheduler at ``address``, and return the
    run id. ``kind`` is the kind its record lists (``spec``, ``bench``: `SUBMITTED_KINDS`)."""
    from imgscale.jobs.cluster import connect

    book = open_ledger(ledger)
    shared = [] if is_url(book.url) else [os.path.abspath(book.url)]
    for folder in shared:
        os.makedirs(folder, exist_ok=True)
    run_id = os.urandom(6).hex()
    with connect(address, quiet=True, shared_paths=shared) as client:
        address = client.scheduler.address
        book.submit(
            {
                "run_id": run_id,
                "kind": kind,
                "cwd": os.getcwd(),
                "spec": {"jobs": jobs, **(schedule or {})},
                "spec_file": spec_file,
                "command": redact_urls(command),
                "scheduler": address,
                "versions": versions(),
                "git_commit": git_commit(),
            }
        )
        submit_driver(client, run_id, shared[0] if shared else book.url, address)
    return run_id


def is_remote(address: str) -> bool:
    """Whether the scheduler at ``address`` may run on another machine than this one (its
    workers then cannot reach this machine's relative paths)."""
    return not any(host in address for host in _LOOPBACK)


def _checked(spec: str, root: click.Group) -> list[Job]:
    try:
        return load_spec(spec, root)
    except SpecError as e:
        for problem in e.problems:
            click.echo(f"imgscale: error: {problem}", err=True)
        raise click.ClickException(str(e)) from e


def _spec_scheduler(jobs: list[Job]) -> str | None:
    given = [job.params["scheduler"] for job in jobs if job.params.get("scheduler")]
    return given[0] if given else os.environ.get("DASK_SCHEDULER_ADDRESS")


def _job_record(job: Job) -> dict[str, Any]:
    return job_record(job.number, job.kind, job.params, job.storage_options)


def job_record(
    number: int, kind: str, params: dict[str, Any], storage_options: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Job ``number`` of a submitted run as its record keeps it: the command ``kind`` (any
    ``imgscale`` command, a contributed one such as ``bench`` too) and its parameters."""
    return {
        "number": number,
        "kind": kind,
        "params": redact_urls(params),
        "storage_options": storage_options,
    }


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
    die_with_parent(parent)
    root = ctx.find_root().command
    ledger = Ledger(ledger_url)
    ledger.hold(run_id, generation)
    record = ledger.get(run_id)
    ledger.resumed(run_id, worker=worker, scheduler=scheduler)
    children = list(record["children"] or [])
    finished = {c["job"] for c in children if _outcome(ledger, c["run_id"]) == "ok"}
    jobs = [
        Job(j["number"], root.get_command(ctx, j["kind"]), j["params"], j["storage_options"])
        for j in record["spec"]["jobs"]
    ]
    with Watch(ledger, run_id, generation, scheduler, parent) as watch:
        watch.children = children
        if record["cancel_requested"]:
            watch.stopped_by = "cancelled"  # asked before any job started
        try:
            if watch.stopped_by == "cancelled":
                raise click.Abort
            spec = record["spec"]
            if "every" in spec or "cron" in spec:
                _run_turns(root, record, jobs, scheduler, ledger, watch)
            else:
                _run_jobs(root, jobs, finished, scheduler, ledger.url, watch, record["spec_file"])
        except (Exception, KeyboardInterrupt) as exc:
            _end_stopped(ledger, run_id, scheduler, watch.stopped_by, exc)
            sys.exit(1)
    ledger.finish(run_id, "ok", **({"outputs": watch.outputs} if watch.outputs else {}))
    click.echo(f"run {run_id}: {len(jobs)} jobs ok")


def _run_jobs(
    root, jobs: list[Job], finished: set[int], scheduler: str, ledger_url: str, watch: Watch,
    spec_file: str,
) -> None:  # fmt: skip
    """Run ``jobs`` in order as `imgscale run` does, skipping the numbers in ``finished``."""
    for job in jobs:
        if job.number in finished:
            click.echo(f"job {job.number}/{len(jobs)}: ok in an earlier attempt")
            continue
        watch.stage = f"job {job.number}/{len(jobs)} {job.kind}"
        origin = SpecOrigin(spec_file, [])
        token = spec_origin.set(origin)
        try:
            _run_job(root, job, len(jobs), scheduler, ledger_url, watch, origin)
        finally:
            spec_origin.reset(token)
        watch.beat()


def _run_turns(root, record, jobs: list[Job], scheduler: str, ledger: Ledger, watch) -> None:
    """Run the jobs at each time of the run's schedule until the run is cancelled; each turn is
    recorded as a run of kind ``turn`` whose parent is the schedule's run."""
    from imgscale.jobs.schedule import CronSchedule, run_times

    spec = record["spec"]
    cron = CronSchedule.parse(spec["cron"]) if "cron" in spec else None
    for at in run_times(spec.get("every"), cron):
        watch.stage = "waiting for the next turn"
        time.sleep(max(0.0, at - time.time()))
        turn = f"{record['run_id']}-{int(at)}"
        ledger.start(
            {"run_id": turn, "kind": "turn", "parent": record["run_id"], "spec": spec,
             "spec_file": record["spec_file"], "command": record["command"],
             "scheduler": scheduler, "versions": versions(), "git_commit": git_commit()}
        )  # fmt: skip
        watch.children = []
        try:
            _run_jobs(root, jobs, set(), scheduler, ledger.url, watch, record["spec_file"])
        except Exception as exc:  # recorded; the next turn still runs
            if watch.stopped_by is not None:  # cancelled, fenced, orphaned: the schedule ends
                ledger.finish(turn, "cancelled", error=f"stopped with its schedule ({exc!r})")
                raise
            ledger.finish(turn, "failed", error=redact_urls(one_line(exc)))
            click.echo(f"turn {turn}: failed: {one_line(exc)}")
            continue
        except KeyboardInterrupt:
            ledger.finish(turn, "cancelled", error="cancelled with its schedule")
            raise
        ledger.finish(turn, "ok")
        click.echo(f"turn {turn}: ok")


def _run_job(root, job: Job, count: int, scheduler, ledger_url, watch: Watch, origin) -> None:
    params = job.params
    if any(p.name == "scheduler" for p in job.command.params):
        params = {**params, "scheduler": scheduler}
    argv = [*command_line(job.command, params), "--ledger", ledger_url]
    click.echo(f"job {job.number}/{count}: {shlex.join(argv)}")
    watch.children.append({"job": job.number, "run_id": None})
    with use_storage_options(job.storage_options or {}):
        try:
            written = root.main(args=argv[1:], prog_name="imgscale", standalone_mode=False)
            if isinstance(written, list):  # the files the command wrote (bench's results)
                watch.outputs += [str(file) for file in written]
        finally:
            watch.children[-1]["run_id"] = origin.run_ids[0] if origin.run_ids else None


def _outcome(ledger: Ledger, run_id: str | None) -> str | None:
    try:
        return ledger.get(run_id)["outcome"] if run_id else None
    except StoreError:
        return None


def _end_stopped(ledger: Ledger, run_id: str, scheduler: str, reason, exc: BaseException):
    """Record why the driver's jobs stopped: a newer attempt holds the run (nothing recorded),
    a cancel request, the scheduler gone (lost: `resume` continues it), or the job's error."""
    if reason in ("fenced", "orphaned"):
        click.echo(f"run {run_id}: {reason}; this attempt stops without an outcome", err=True)
    elif reason == "cancelled":
        ledger.finish(run_id, "cancelled", error="cancelled by imgscale cancel")
    elif reason == "scheduler lost" or not scheduler_reachable(scheduler):
        ledger.finish(
            run_id,
            "lost",
            error=f"scheduler {scheduler} lost; `imgscale resume {run_id} --scheduler NEW` "
            "continues the run",
        )
    else:
        ledger.finish(run_id, "failed", error=redact_urls(one_line(exc)))
    click.echo(f"imgscale: error: {one_line(exc)}", err=True)


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
    record = open_ledger(ledger).get(run_id)
    heartbeat = record["heartbeat"]
    found = {
        "run_id": record["run_id"],
        "kind": record["kind"],
        "outcome": record["outcome"],
        "stage": record["pass"],
        "done": record["rows_done"],
        "total": record["rows_total"],
        "unit": record["progress_unit"],
        "heartbeat_age_s": None if heartbeat is None else round(time.time() - heartbeat, 1),
        "worker": record["worker"],
        "generation": record["generation"],
        "scheduler": record["scheduler"],
        "started": record["started"],
        "ended": record["ended"],
        "error": record["error"],
        "outputs": record["outputs"],
    }
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
    book = open_ledger(ledger)
    record = book.get(run_id)
    if record["outcome"] != "running":
        raise click.ClickException(
            f"run {record['run_id']} has ended ({record['outcome']}); nothing to cancel"
        )
    book.cancel(record["run_id"], by=f"{getpass.getuser()}@{socket.gethostname()}")
    if as_json:
        click.echo(json.dumps({"run_id": record["run_id"], "cancel_requested": True}))
    else:
        click.echo(f"run {record['run_id']}: cancel requested; it stops at its next safe point")


@click.command()
@click.argument("run_id")
@scheduler_option
@ledger_option
@json_option
@verbose_option
def resume(run_id: str, scheduler: str | None, ledger, as_json: bool) -> None:
    """Continue the lost run RUN_ID on the cluster at --scheduler: jobs that ended ok are kept,
    the others run again from what their stores committed. Of two resumes at once, one wins."""
    from imgscale.jobs.cluster import connect

    book = open_ledger(ledger)
    record = book.get(run_id)
    if record["outcome"] != "lost" or record["kind"] not in SUBMITTED_KINDS:
        raise click.ClickException(
            f"run {record['run_id']} is {record['outcome']}; only a lost run of `imgscale "
            "submit` is resumed"
        )
    if not scheduler:
        raise click.UsageError("resume needs --scheduler ADDRESS (or $DASK_SCHEDULER_ADDRESS)")
    run_id = record["run_id"]
    shared = [] if is_url(book.url) else [os.path.abspath(book.url)]
    with connect(scheduler, quiet=True, shared_paths=shared) as client:
        by = f"imgscale resume on {socket.gethostname()}"
        try:
            book.claim_generation(run_id, {"by": by}, (record["generation"] or 0) + 1)
        except StoreError as e:
            raise click.ClickException(str(e)) from e
        submit_driver(client, run_id, shared[0] if shared else book.url, client.scheduler.address)
    click.echo(json.dumps({"run_id": run_id}) if as_json else run_id)
