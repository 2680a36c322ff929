"""Click options and output helpers shared by every `imgscale` command, built in or contributed."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from imgscale.jobs.runs import report, report_progress

if TYPE_CHECKING:
    from imgscale.pipeline.classify import Validation
    from imgscale.pipeline.describe import FitPass
    from imgscale.storage import FeatureStore


def _set_tls_config(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """Put a --tls-* file into Dask's configuration, where the client's Security reads it."""
    if value is not None:
        import dask.config

        from imgscale.jobs.cluster import TLS_KEYS

        # Set for this command only: undone when click closes the command's context.
        ctx.with_resource(dask.config.set({TLS_KEYS[param.name]: str(Path(value).absolute())}))


def _tls_option(flag: str, what: str) -> Callable:
    return click.option(
        flag,
        type=click.Path(exists=True, dir_okay=False),
        expose_value=False,
        callback=_set_tls_config,
        help=f"{what} for a tls:// scheduler (as `dask worker` takes it; or Dask's config).",
    )


_scheduler_options = (
    click.option(
        "--scheduler",
        envvar="DASK_SCHEDULER_ADDRESS",
        default=None,
        metavar="ADDRESS",
        help="Dask scheduler to connect to (default: $DASK_SCHEDULER_ADDRESS, else a "
        "LocalCluster on 127.0.0.1).",
    ),
    _tls_option("--tls-ca-file", "CA certificate (PEM)"),
    _tls_option("--tls-cert", "Client certificate (PEM)"),
    _tls_option("--tls-key", "Client private key (PEM)"),
)


def scheduler_option(command: Callable) -> Callable:
    """--scheduler ADDRESS and the --tls-ca-file/--tls-cert/--tls-key files that secure it."""
    for option in reversed(_scheduler_options):
        command = option(command)
    return command


class StorePath(click.Path):
    """A store's or model's location: a local path (or ``file://`` URL), checked as `click.Path`
    checks it, or an object-store URL (``s3://bucket/store.zarr``), kept as given and checked
    when opened."""

    def convert(self, value, param, ctx):
        from imgscale.storage import is_url, location

        if isinstance(value, str) and is_url(value):
            return value
        if isinstance(value, str) and value.startswith("file://"):
            value = str(location(value))
        return super().convert(value, param, ctx)


json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON object only.")


# Set by --verbose, read by the entry point: the exception it reports has already unwound
# click's contexts. Eager, so it is set before any other option can fail.
verbose: ContextVar[bool] = ContextVar("verbose", default=False)


def _set_verbose(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        verbose.set(True)


verbose_option = click.option(
    "--verbose",
    is_flag=True,
    is_eager=True,
    expose_value=False,
    callback=_set_verbose,
    help="Show the traceback on failure.",
)


def option_given(ctx: click.Context, name: str) -> bool:
    """Whether option ``name`` was given (command line or environment), not defaulted."""
    return ctx.get_parameter_source(name) not in (None, click.core.ParameterSource.DEFAULT)


def row_bytes(store: FeatureStore) -> int:
    """Bytes of ``store``'s rows as the float32 its tasks compute on (PQ codes decode to it):
    how `jobs.cluster.connect` chooses the kind of LocalCluster."""
    return store.committed_rows * store.dim * 4


@contextlib.contextmanager
def store_on_cluster(
    store: str,
    scheduler: str | None,
    *,
    quiet: bool,
    splits: Iterable[str | None] = (),
    shared_paths: Iterable[Any] = (),
) -> Iterator[FeatureStore]:
    """What a command reading a store on the cluster does first: open STORE at the path the
    workers see, refuse each of ``splits`` it has no rows of (before any cluster starts), then
    connect to the cluster (sized by the store's rows; ``shared_paths`` must exist on every
    worker too) for the block. Yields the open store."""
    from imgscale.jobs.cluster import connect, shared_path
    from imgscale.storage import open_store

    feature_store = open_store(shared_path(store))
    for split in splits:
        feature_store.require_split(split)
    with connect(
        scheduler,
        quiet=quiet,
        shared_paths=[feature_store.path, *shared_paths],
        data_bytes=row_bytes(feature_store),
    ):
        yield feature_store


def print_summary(
    summary: dict[str, Any],
    as_json: bool,
    message: str,
    *,
    err: bool = True,
    recorded: bool = True,
) -> None:
    """How a command ends: its ``summary`` goes to the run ledger (unless not ``recorded``),
    then stdout gets it as one JSON object with --json, else ``message`` is printed (on stderr
    if ``err``)."""
    if recorded:
        report(summary)
    if as_json:
        click.echo(json.dumps(summary))
        return
    click.echo(message, err=err)


def print_records(records: list[dict], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps({"records": records}))
        return
    for r in records:
        peer = f"  peer {r['peer_value']:.4g}  ratio {r['ratio']:.3f}" if "ratio" in r else ""
        click.echo(f"{r['name']:<40} {r['value']:>12.4g} {r['unit']:<8}{peer}")


# Whether a progress line is drawn without its newline yet: an error must start a new line.
_line_open = [False]


def end_progress_line() -> None:
    """End an unfinished progress line, so the next message is not glued to it."""
    if _line_open[0]:
        sys.stderr.write("\n")
        _line_open[0] = False


class _RedrawnLine:
    """One stderr line drawn over in place, at most twice a second until its final draw (which
    ends the line)."""

    def __init__(self) -> None:
        self.last = 0.0
        self.width = 0

    def due(self, final: bool) -> bool:
        """Whether a draw now would be shown (callers skip building text that would not be)."""
        return final or time.monotonic() - self.last >= 0.5

    def draw(self, text: str, *, final: bool) -> None:
        if not self.due(final):
            return
        self.last = time.monotonic()
        # Padded over the last text drawn, so a shorter line leaves none of a longer one.
        padded, self.width = text.ljust(self.width), len(text)
        sys.stderr.write(f"\r{padded}" + ("\n" if final else ""))
        sys.stderr.flush()
        _line_open[0] = not final


def stage_progress_line(*, quiet: bool = False) -> Callable[[str, int, int, str], None]:
    """A progress callback ``(stage, done, total, unit)`` for work in stages that redraws one
    stderr line, throttled to a few updates a second (``quiet``: no line), and gives the run
    ledger the ``unit`` done of ``stage``."""
    line = _RedrawnLine()

    def report(stage: str, done: int, total: int, unit: str) -> None:
        report_progress(done, total, stage, unit)
        if not quiet:
            percent = 100 * done / total if total else 100
            line.draw(f"{stage}: {done}/{total} {unit} ({percent:.0f}%)", final=done >= total)

    return report


def progress_line(label: str, *, quiet: bool = False, unit: str = "rows"):
    """A progress callback ``(done, total)`` of one stage, ``label``
    (`stage_progress_line`)."""
    report = stage_progress_line(quiet=quiet)
    return lambda done, total: report(label, done, total, unit)


def validation_line(label: str, *, quiet: bool = False) -> Callable[[Validation], None]:
    """A watcher of an iterative fit's validations (`pipeline.classify.watch_validations`) that
    redraws one stderr line: iteration, validation error, the best so far and where; the run
    ledger gets the iterations done."""
    line = _RedrawnLine()

    def show(v: Validation) -> None:
        report_progress(v.iteration, v.max_iter, label, unit="iterations")
        final = v.iteration >= v.max_iter
        if quiet or not line.due(final):
            return
        line.draw(
            f"{label}: iteration {v.iteration}/{v.max_iter}, validation error {v.error:.4f} "
            f"(best {v.best_error:.4f} at {v.best_iteration})",
            final=final,
        )

    return show


def fit_pass_line(label: str, *, quiet: bool = False) -> Callable[[FitPass], None]:
    """A watcher of a vocabulary fit's passes (`pipeline.describe.watch_passes`) that redraws
    one stderr line: the channel and stage, its iteration and its measure of convergence; the
    run ledger gets the iterations of the stage. A stage may stop before its last iteration, so
    the caller ends the line (`end_progress_line`)."""
    line = _RedrawnLine()

    def show(p: FitPass) -> None:
        stage = f"{p.channel} {p.stage}"
        report_progress(p.iteration, p.max_iter, stage, unit="iterations")
        if quiet or not line.due(False):
            return
        text = f"{label}: {stage}"  # PCA: one pass
        if p.stage == "EM":
            text += f" iteration {p.iteration}/{p.max_iter}, mean log-likelihood {p.figure:.4f}"
        elif p.stage == "k-means":
            text += (
                f" iteration {p.iteration}/{p.max_iter}, centres moved {p.figure:.2e} of "
                "the variance"
            )
        line.draw(text, final=False)

    return show


def images_progress_line(*, quiet: bool = False):
    """A progress callback for an image ingest: images read (of the total, when listing gave
    it), images a second, ETA, rows added and images refused, redrawn on one stderr line. The
    rate counts from the first call (the ingest's start, after a new PQ store's codebook)."""
    started: list[float] = []
    line = _RedrawnLine()

    def report(done: int, total: int | None, rows: int, refused: int) -> None:
        report_progress(done, total, "ingest", unit="images")
        now = time.monotonic()
        started[:] = started or [now]
        finished = total is not None and done >= total
        if quiet or not line.due(finished):
            return
        rate = done / (now - started[0]) if now > started[0] else 0.0
        of = f"/{total}" if total is not None else ""
        eta = ""
        if total is not None and rate > 0 and not finished:
            left = int((total - done) / rate)
            eta = f", ETA {left // 3600}:{left // 60 % 60:02d}:{left % 60:02d}"
        line.draw(
            f"ingest: {done}{of} images, {rate:,.0f} images/s{eta}, {rows} rows, {refused} refused",
            final=finished,
        )

    return report


def check_new_path(path: str | None, what: str, *, local_only: bool = False) -> None:
    """Refuse, before any work, an output path that exists or whose folder is missing or not
    writable: a command must not compute for minutes and then fail to save. A URL is refused
    with ``local_only`` (an output written by a library that knows only local files)."""
    if path is None:
        return
    from imgscale.storage import is_url, location

    if is_url(path) and local_only:
        raise click.UsageError(f"{what} {path}: expected a local path, not a URL")
    if is_url(path):
        if location(path).exists():
            raise click.UsageError(f"{what} {path} already exists; expected a new path")
        return
    target = Path(path)
    if target.exists() or target.is_symlink():
        raise click.UsageError(f"{what} {path} already exists; expected a new path")
    parent = target.absolute().parent
    if not parent.is_dir():
        raise click.UsageError(f"{what} {path}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise click.UsageError(f"{what} {path}: folder {parent} is not writable")
