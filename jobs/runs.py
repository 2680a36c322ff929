"""Every computing command, run from the CLI or a job spec, is recorded in the run ledger.

`RecordedCommand` wraps a click command: before it starts, a ``running`` record (the resolved
parameters, the exact command line that reruns it, versions, git commit, scheduler) goes into
the ledger; a thread refreshes its heartbeat and progress every few seconds, so `imgscale runs`
in another terminal shows rows done; at the end the outcome (``ok``, ``failed`` with the
one-line error, or ``cancelled`` on Ctrl-C or SIGTERM) and the figures the command reported.
A process killed outright leaves ``running``, which readers see as ``lost`` once its pid is
gone or its heartbeat is stale (storage/ledger.py).

SIGTERM is turned into the same KeyboardInterrupt as Ctrl-C, so both unwind through the code
that already keeps stores consistent on any exception: uncommitted rows are never visible,
models and outputs are written beside their target and renamed, and `jobs.cluster` cancels the
cluster tasks of the computation in flight.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import importlib.metadata
import os
import re
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from imgscale.storage import Ledger, current_storage_options

LEDGER_ENV = "IMGSCALE_LEDGER"
HEARTBEAT_SECONDS = 2.0
# Parameters that change only what is printed, never what is computed: not part of a record.
_OUTPUT_ONLY = ("as_json",)

# The password of a URL's user info (``scheme://user:PASSWORD@host``): never kept in a record.
_URL_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^/?#@\s:]*):[^/?#@\s]*@")


def redact_urls(value: Any) -> Any:
    """``value`` (str, or dicts, lists and tuples of them) with URL passwords replaced by
    ``***``, so a record or its error line keeps where a command read, never the password."""
    if isinstance(value, str):
        return _URL_PASSWORD.sub(r"\1:***@", value)
    if isinstance(value, dict):
        return {key: redact_urls(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(redact_urls(item) for item in value)
    return value


ledger_option = click.option(
    "--ledger",
    "ledger",
    default=None,
    metavar="URL",
    help=f"Run ledger: a folder or s3:// prefix (default: ${LEDGER_ENV}, else one per user).",
)


def ledger_url(option: str | os.PathLike | None = None) -> str:
    """``--ledger``, else ``$IMGSCALE_LEDGER``, else ``$XDG_STATE_HOME/imgscale/ledger``
    (``~/.local/state`` without it): a folder or an object-store prefix."""
    if option:
        return os.fspath(option)
    if os.environ.get(LEDGER_ENV):
        return os.environ[LEDGER_ENV]
    return str(_state_folder() / "ledger")


def _state_folder() -> Path:
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "imgscale"


def open_ledger(option: str | os.PathLike | None = None) -> Ledger:
    """The ledger `ledger_url` names. The per-user default takes in, once, the runs of the SQLite
    ledger older imgscale versions kept beside it."""
    ledger = Ledger(ledger_url(option))
    old = _state_folder() / "ledger.sqlite"
    if not option and not os.environ.get(LEDGER_ENV) and old.is_file():
        done = _state_folder() / "ledger.sqlite.imported"
        if not done.exists():
            ledger.import_sqlite(old)
            done.touch()
    return ledger


class ActiveRun:
    """The record of the command running in this process; progress is written by the heartbeat."""

    def __init__(self, run_id: str, ledger: Ledger) -> None:
        self.run_id, self.ledger = run_id, ledger
        self.rows_done: int | None = None
        self.rows_total: int | None = None
        self.current_pass: str | None = None
        self.unit: str | None = None
        self.figures: dict[str, Any] = {}

    def progress(self, done: int, total: int | None, current_pass: str, unit: str) -> None:
        self.rows_done, self.rows_total = done, total
        self.current_pass, self.unit = current_pass, unit

    def beat(self) -> None:
        self.ledger.beat(
            self.run_id,
            rows_done=self.rows_done,
            rows_total=self.rows_total,
            progress_unit=self.unit,
            **{"pass": self.current_pass},
        )


_current: contextvars.ContextVar[ActiveRun | None] = contextvars.ContextVar("run", default=None)
# The runs recording in this process, innermost last, for threads the context does not reach (the
# heartbeat of a detached run's driver reports its current job's progress).
_active: list[ActiveRun] = []


def active_run() -> ActiveRun | None:
    """The innermost run recording in this process, from any thread."""
    return _active[-1] if _active else None


@dataclasses.dataclass
class SpecOrigin:
    """Set by `imgscale run` around the jobs of a spec: the spec file and the ids of the runs so
    far."""

    spec_file: str
    run_ids: list[str]


spec_origin: contextvars.ContextVar[SpecOrigin | None] = contextvars.ContextVar(
    "spec_origin", default=None
)


def report_progress(done: int, total: int | None, current_pass: str, unit: str = "rows") -> None:
    """Progress of the current pass, in ``unit`` (rows, images read, SGD iterations), shown by
    `imgscale runs` while the command runs."""
    run = _current.get()
    if run is not None:
        run.progress(done, total, current_pass, unit)


def report(figures: dict[str, Any]) -> None:
    """Figures the command reported (rates, errors, rows); scalars only, as JSON keeps them."""
    run = _current.get()
    if run is not None:
        run.figures.update(
            {k: v for k, v in figures.items() if isinstance(v, str | int | float | bool | None)}
        )


class RecordedCommand(click.Command):
    """A click command that records each invocation in the run ledger (adds ``--ledger``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        ledger_option(self)

    def invoke(self, ctx: click.Context) -> Any:
        ledger = open_ledger(ctx.params.pop("ledger"))
        params = resolved_params(self, ctx.params)
        # The rerun gives what this run was given; defaults are those of the recorded version
        # (and some commands refuse an option given for a method it does not apply to).
        rerun = {k: v for k, v in params.items() if _given(ctx, k)}
        # A spec's [storage_options] (no secrets: the spec was checked) belong to the record.
        options = current_storage_options()
        spec = {**params, "storage_options": options} if options else params
        argv = redact_urls(command_line(self, rerun))
        with recorded_run(self.name, redact_urls(spec), argv, ledger):
            return super().invoke(ctx)


def _given(ctx: click.Context, name: str) -> bool:
    return ctx.get_parameter_source(name) not in (None, click.core.ParameterSource.DEFAULT)


def resolved_params(command: click.Command, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with local paths made absolute, so the record means the same from anywhere."""
    resolved = {}
    for param in command.params:
        if param.name not in params or param.name in _OUTPUT_ONLY:
            continue
        value = params[param.name]
        if isinstance(param.type, click.Path) and isinstance(value, str) and "://" not in value:
            value = os.path.abspath(os.path.expanduser(value))
        resolved[param.name] = value
    return resolved


def command_line(command: click.Command, params: dict[str, Any]) -> list[str]:
    """The ``imgscale`` argv that runs ``command`` with ``params``."""
    argv = ["imgscale", command.name]
    for param in command.params:
        value = params.get(param.name)
        if value is None or param.name in _OUTPUT_ONLY or param.name == "ledger":
            continue
        if isinstance(param, click.Argument):
            argv += [str(v) for v in value] if param.nargs == -1 else [str(value)]
            continue
        flag = max(param.opts, key=len)
        if getattr(param, "is_flag", False):
            argv += [flag] if value else []
        else:
            argv += [flag, str(value)]
    return argv


@contextlib.contextmanager
def recorded_run(
    kind: str, params: dict[str, Any], argv: list[str], ledger: Ledger
) -> Iterator[ActiveRun]:
    """Record one run of ``kind`` from start to outcome; Ctrl-C and SIGTERM cancel it."""
    run = ActiveRun(uuid.uuid4().hex[:12], ledger)
    origin = spec_origin.get()
    ledger.start(
        {
            "run_id": run.run_id,
            "kind": kind,
            "cwd": os.getcwd(),
            "spec": params,
            "spec_file": origin.spec_file if origin else None,
            "command": argv,
            "scheduler": params.get("scheduler") or os.environ.get("DASK_SCHEDULER_ADDRESS"),
            "versions": versions(),
            "git_commit": git_commit(),
        }
    )
    if origin:
        origin.run_ids.append(run.run_id)
    token = _current.set(run)
    _active.append(run)
    stop = threading.Event()
    heart = threading.Thread(target=_heartbeat, args=(run, stop), daemon=True)
    heart.start()
    cancelled_by: list[str] = []
    try:
        with _sigterm_interrupts(cancelled_by):
            yield run
    except KeyboardInterrupt:
        _finish(run, stop, heart, "cancelled", f"cancelled by {(cancelled_by or ['SIGINT'])[0]}")
        raise
    except click.exceptions.Exit as exc:
        outcome = "ok" if exc.exit_code == 0 else "failed"
        _finish(run, stop, heart, outcome, None if outcome == "ok" else f"exit {exc.exit_code}")
        raise
    except BaseException as exc:
        _finish(run, stop, heart, "failed", redact_urls(one_line(exc)))
        raise
    else:
        if cancelled_by:
            # SIGTERM's exception was raised where Python ignores exceptions (a gc callback, a
            # __del__), so the work went on: the run was still asked to stop, and says so.
            _finish(run, stop, heart, "cancelled", f"cancelled by {cancelled_by[0]}")
            raise Terminated
        _finish(run, stop, heart, "ok", None)
    finally:
        _current.reset(token)
        _active.remove(run)


def one_line(exc: BaseException) -> str:
    """The one-line message the CLI prints for ``exc``."""
    text = exc.format_message() if isinstance(exc, click.ClickException) else str(exc)
    return text.splitlines()[0] if text.strip() else type(exc).__name__


def _finish(run: ActiveRun, stop, heart, outcome: str, error: str | None) -> None:
    """Record the outcome. The job's work is done (or has failed on its own) by now, so a ledger
    that cannot take the record (disk full, read-only) is a warning, never the job's outcome."""
    stop.set()
    heart.join()
    # Without a figure, the rows of a pass that counted rows (not images or iterations).
    rows = run.figures.get("rows", run.rows_done if run.unit == "rows" else None)
    try:
        run.ledger.finish(
            run.run_id,
            outcome,
            rows=rows if isinstance(rows, int) else None,
            rows_done=run.rows_done,
            rows_total=run.rows_total,
            progress_unit=run.unit,
            figures=run.figures,
            error=error,
        )
    except Exception as exc:
        click.echo(
            f"imgscale: warning: outcome {outcome!r} of run {run.run_id} not recorded "
            f"({one_line(exc)}); once this process has exited the run reads lost",
            err=True,
        )


def _heartbeat(run: ActiveRun, stop: threading.Event) -> None:
    while not stop.wait(HEARTBEAT_SECONDS):
        # A ledger busy for a minute must not kill the job it records: the next beat retries.
        with contextlib.suppress(Exception):
            run.beat()


class Terminated(KeyboardInterrupt):
    """The KeyboardInterrupt a SIGTERM raises, so the process can exit with SIGTERM's code."""


@contextlib.contextmanager
def _sigterm_interrupts(received: list[str]) -> Iterator[None]:
    """Within the block, SIGTERM raises KeyboardInterrupt (`Terminated`) in the main thread, as
    Ctrl-C does."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame) -> None:
        received.append(signal.Signals(signum).name)
        raise Terminated

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def versions() -> dict[str, str]:
    """Python's, imgscale's and each of its installed dependencies' versions."""
    found = {"python": sys.version.split()[0], "imgscale": _version("imgscale")}
    for requirement in importlib.metadata.requires("imgscale") or []:
        if "extra ==" in requirement:
            continue
        name = re.match(r"[A-Za-z0-9_.-]+", requirement).group(0)
        found[name] = _version(name)
    return found


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def git_commit() -> str | None:
    """The commit of the checkout imgscale runs from (``+dirty`` with local changes), or None
    for an installed copy."""
    source = Path(__file__).resolve().parent.parent
    if not (source / "pyproject.toml").is_file():
        return None
    try:
        head = subprocess.run(
            ["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True,
            timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "-C", str(source), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")
