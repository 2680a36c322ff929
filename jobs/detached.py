"""Runs that live on the cluster, behind ``imgscale submit``, ``drive``, ``status``, ``cancel``
and ``resume``.

`submit_run` records a run in the ledger with its jobs resolved, hands the cluster one driver
(jobs/driver.py) and returns the run id; `drive_run` is that driver's work, running the jobs
(or turns of a schedule) as `imgscale run` would. The others read and write only the ledger,
so they work from any machine that reads it, with or without the cluster.
"""

from __future__ import annotations

import getpass
import os
import shlex
import socket
import sys
import time
from typing import Any

import click

from imgscale.jobs.driver import Watch, die_with_parent, scheduler_reachable, submit_driver
from imgscale.jobs.runs import (
    SpecOrigin,
    command_line,
    git_commit,
    one_line,
    open_ledger,
    redact_urls,
    spec_origin,
    versions,
)
from imgscale.jobs.spec import Job
from imgscale.storage import Ledger, StoreError, is_url, use_storage_options

_LOOPBACK = ("127.", "localhost", "[::1]", "::1")
# The kinds of run `submit_run` records: a spec's jobs, and `imgscale bench --submit`'s suite.
SUBMITTED_KINDS = ("spec", "bench")


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


def unreachable_paths(spec: str, jobs: list[Job], address: str) -> list[str]:
    """One line for each path of ``jobs`` relative to this machine, which the workers of a
    remote scheduler at ``address`` cannot reach (none for a scheduler on this machine)."""
    if not is_remote(address):
        return []
    return [
        f"{spec}: job {job.number} ({job.kind}): key '{key}': {value!r} is relative to this "
        f"machine; the workers of {address} cannot reach it: give a URL or an absolute path "
        "every worker mounts"
        for job in jobs
        for key, value in job.relative_paths
    ]


def spec_scheduler(jobs: list[Job]) -> str | None:
    """The scheduler the spec's jobs name, else ``$DASK_SCHEDULER_ADDRESS``."""
    given = [job.params["scheduler"] for job in jobs if job.params.get("scheduler")]
    return given[0] if given else os.environ.get("DASK_SCHEDULER_ADDRESS")


def spec_job_record(job: Job) -> dict[str, Any]:
    """`job_record` of a spec's job."""
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


def drive_run(
    root: click.Group, ctx: click.Context, run_id: str, ledger_url: str, scheduler: str,
    worker: str, generation: int, parent: int,
) -> int:  # fmt: skip
    """Run the jobs of run ``run_id`` (``root``'s commands) as the attempt of ``generation``,
    which the driver task on ``worker`` claimed; record the outcome and return the jobs run.
    Jobs a previous attempt ended ok are skipped; a run with a schedule runs turns until it is
    cancelled. Dies with the driver task's process ``parent``."""
    die_with_parent(parent)
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
    return len(jobs)


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


def run_status(record: dict[str, Any]) -> dict[str, Any]:
    """What ``imgscale status`` says of a run's ledger ``record``: outcome, stage, progress,
    heartbeat age, driver worker and the files it wrote."""
    heartbeat = record["heartbeat"]
    return {
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


def cancel_run(ledger: Ledger, run_id: str) -> str:
    """Ask the running run ``run_id`` (or a unique prefix) to stop at its next safe point;
    returns its full id. A run that has ended is refused."""
    record = ledger.get(run_id)
    if record["outcome"] != "running":
        raise ValueError(
            f"run {record['run_id']} has ended ({record['outcome']}); nothing to cancel"
        )
    ledger.cancel(record["run_id"], by=f"{getpass.getuser()}@{socket.gethostname()}")
    return record["run_id"]


def lost_run(ledger: Ledger, run_id: str) -> dict[str, Any]:
    """The ledger's record of run ``run_id`` (or a unique prefix), refused unless it is a lost
    run of ``imgscale submit``: the only kind `resume_run` continues."""
    record = ledger.get(run_id)
    if record["outcome"] != "lost" or record["kind"] not in SUBMITTED_KINDS:
        raise ValueError(
            f"run {record['run_id']} is {record['outcome']}; only a lost run of `imgscale "
            "submit` is resumed"
        )
    return record


def resume_run(ledger: Ledger, record: dict[str, Any], scheduler: str) -> None:
    """Continue the lost run of ``record`` (`lost_run`) on the cluster at ``scheduler``: claim
    its next attempt (of two resumes at once, one wins) and hand the cluster its driver. Jobs
    that ended ok are kept, the others run again from what their stores committed."""
    from imgscale.jobs.cluster import connect

    run_id = record["run_id"]
    shared = [] if is_url(ledger.url) else [os.path.abspath(ledger.url)]
    with connect(scheduler, quiet=True, shared_paths=shared) as client:
        by = f"imgscale resume on {socket.gethostname()}"
        ledger.claim_generation(run_id, {"by": by}, (record["generation"] or 0) + 1)
        submit_driver(client, run_id, shared[0] if shared else ledger.url, client.scheduler.address)
