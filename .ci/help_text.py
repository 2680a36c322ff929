"""Print the --help of every imgscale command and subcommand, each under a header line, so two
versions' outputs can be compared with diff (a change of the code's layout must leave them
unchanged, except where a command now says more)."""

from __future__ import annotations

import click

from imgscale.jobs.cli import cli


def print_help(command: click.Command, path: list[str]) -> None:
    with click.Context(command, info_name=" ".join(path), terminal_width=100) as ctx:
        print(f"=== {' '.join(path)}\n{command.get_help(ctx)}\n")
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                print_help(command.get_command(ctx, name), [*path, name])


if __name__ == "__main__":
    print_help(cli, ["imgscale"])
