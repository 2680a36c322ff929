"""The ``imgscale`` command line: each command parses its arguments, calls one use-case function
of ``jobs`` and prints what it returned.

Every command exits 0 on success and non-zero with a one-line message on stderr on failure
(``--verbose`` adds the traceback). Commands that report figures print one JSON object with
``--json`` and nothing else on stdout.

The group and its entry point are here, the commands by what they work on: stores
(`store_commands`), models (`model_commands`), runs in this process and the run ledger
(`run_commands`), runs on the cluster (`detached_commands`). What commands share is `options`
(click options: the cluster, paths, --json, --verbose) and `printers` (the summary at the end,
warnings, progress lines).
"""

from __future__ import annotations

import atexit
import gc
import sys
import traceback
from importlib.metadata import entry_points

import click

from imgscale.jobs.cli.detached_commands import cancel, drive, logs, resume, status, submit
from imgscale.jobs.cli.model_commands import (
    add_class,
    demo,
    embed_command,
    evaluate,
    plot,
    predict,
    train,
    update,
)
from imgscale.jobs.cli.options import verbose
from imgscale.jobs.cli.printers import end_progress_line
from imgscale.jobs.cli.run_commands import run, runs, schedule
from imgscale.jobs.cli.store_commands import (
    compact,
    compress,
    export,
    fit_features,
    forget,
    info,
    ingest,
    remove_batch,
)
from imgscale.jobs.runs import Terminated

CONTRIBUTED_COMMANDS = "imgscale.commands"


class ImgscaleGroup(click.Group):
    """The built-in commands plus those other installed parts register under the
    ``imgscale.commands`` entry-point group (the benchmarks), loaded only when used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        contributed = [ep.name for ep in entry_points(group=CONTRIBUTED_COMMANDS)]
        return sorted({*super().list_commands(ctx), *contributed})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        command = super().get_command(ctx, name)
        if command is not None:
            return command
        for entry in entry_points(group=CONTRIBUTED_COMMANDS, name=name):
            try:
                return entry.load()
            except ImportError as exc:
                return _missing_extra(name, exc)
        return None


def _missing_extra(name: str, exc: ImportError) -> click.Command:
    """A stand-in command that says which extra to install instead of failing on import."""
    message = (
        f"`imgscale {name}` needs the '{name}' extra ({exc.name or exc} is not installed): "
        f"pip install 'imgscale[{name}]'"
    )

    @click.command(name, context_settings={"ignore_unknown_options": True})
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def unavailable(args) -> None:
        raise click.ClickException(message)

    unavailable.help = f"(not installed: pip install 'imgscale[{name}]')"
    return unavailable


@click.group(
    cls=ImgscaleGroup,
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(package_name="imgscale")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Train image classifiers from images or feature vectors, streamed from zarr stores through
    Dask.

    Splits: commands that learn (train, add-class) read split train unless --split says
    otherwise, commands that score (evaluate, plot) read split test, and commands that write
    something for every row (predict, embed, export) read every row.
    """
    if ctx.invoked_subcommand is None:  # bare `imgscale`: the help, not an error
        click.echo(ctx.get_help())


for command in (
    ingest, fit_features, remove_batch, info, export, compress,
    train, predict, evaluate, plot, add_class, embed_command,
    demo, schedule, run, runs, forget, update, compact,
    submit, status, logs, cancel, resume, drive,
):  # fmt: skip
    cli.add_command(command)


def main() -> None:
    """Entry point: one-line errors on stderr, tracebacks only with ``--verbose``."""
    # The objects of every imported module live until exit anyway; frozen, the interpreter's
    # last full collection skips them instead of adding a fraction of a second to each command.
    atexit.register(gc.freeze)
    verbose.set(False)
    try:
        try:
            cli.main(prog_name="imgscale", standalone_mode=False)
        finally:
            end_progress_line()
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        hint = " (see --help)" if isinstance(exc, click.UsageError) else ""
        click.echo(f"imgscale: error: {exc.format_message()}{hint}", err=True)
        sys.exit(exc.exit_code)
    except click.Abort as exc:
        click.echo("imgscale: aborted", err=True)
        # The shell's codes for a process ended by a signal: 128 + SIGTERM (15) or SIGINT (2).
        sys.exit(143 if isinstance(exc.__cause__, Terminated) else 130)
    except Exception as exc:
        if verbose.get():
            traceback.print_exc()
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        click.echo(f"imgscale: error: {message}", err=True)
        sys.exit(1)
