"""The click options every `imgscale` command shares, built in or contributed: the cluster to
connect to (and the TLS files that secure it), store and model paths, --json, --verbose, and the
refusal of an output path before any work."""

from __future__ import annotations

import os
from collections.abc import Callable
from contextvars import ContextVar
from pathlib import Path

import click


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
