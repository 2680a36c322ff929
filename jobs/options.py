"""Click options and output helpers shared by every `imgscale` command, built in or contributed."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import click

from imgscale.jobs.runs import report_progress


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


# main() reads --verbose from argv: the exception it reports has already unwound click's context.
verbose_option = click.option(
    "--verbose", is_flag=True, expose_value=False, help="Show the traceback on failure."
)


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


def progress_line(label: str, *, quiet: bool = False):
    """A progress callback that redraws one stderr line, throttled to a few updates a second
    (``quiet``: no line), and gives the run ledger the rows done of pass ``label``."""
    last = [0.0]

    def report(done: int, total: int) -> None:
        report_progress(done, total, label)
        if quiet:
            return
        now = time.monotonic()
        if done < total and now - last[0] < 0.5:
            return
        last[0] = now
        percent = 100 * done / total if total else 100
        end = "\n" if done >= total else ""
        sys.stderr.write(f"\r{label}: {done}/{total} rows ({percent:.0f}%){end}")
        sys.stderr.flush()
        _line_open[0] = not end

    return report


def images_progress_line(*, quiet: bool = False):
    """A progress callback for an image ingest: images read (of the total, when listing gave
    it), images a second, ETA, rows added and images refused, redrawn on one stderr line."""
    started = time.monotonic()
    last = [0.0]

    def report(done: int, total: int | None, rows: int, refused: int) -> None:
        report_progress(done, total, "ingest")
        if quiet:
            return
        now = time.monotonic()
        finished = total is not None and done >= total
        if not finished and now - last[0] < 0.5:
            return
        last[0] = now
        rate = done / (now - started) if now > started else 0.0
        of = f"/{total}" if total is not None else ""
        eta = ""
        if total is not None and rate > 0 and not finished:
            left = int((total - done) / rate)
            eta = f", ETA {left // 3600}:{left // 60 % 60:02d}:{left % 60:02d}"
        sys.stderr.write(
            f"\ringest: {done}{of} images, {rate:,.0f} images/s{eta}, {rows} rows, "
            f"{refused} refused"
        )
        sys.stderr.flush()
        _line_open[0] = True

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
