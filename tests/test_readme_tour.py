"""The README's tour runs verbatim, top to bottom, in an empty folder, and every example in a
command's ``--help`` is run by the tour or by a named test."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest

from imgscale.jobs.cli import cli

README = Path(__file__).resolve().parents[1] / "README.md"
BIN = Path(sys.executable).parent

# Examples no test can run, and why (stated in the closing note, never counted as run).
EXAMPLES_NOT_RUN: dict[str, str] = {}


def tour_commands(readme: str) -> list[str]:
    """The shell commands of the first ```bash block under the first heading naming a tour, as
    written (redirections and comments too: the shell runs them verbatim), a command continued
    while its quotes are open."""
    heading = re.search(r"^#+ .*\btour\b.*$", readme, flags=re.M | re.I)
    assert heading, "README.md has no heading with the word 'tour'"
    block = re.search(r"^```bash\n(.*?)^```", readme[heading.end() :], flags=re.M | re.S)
    assert block, "the tour has no ```bash block"
    commands, pending = [], ""
    for line in block.group(1).splitlines():
        pending += line + "\n"
        try:
            words = shlex.split(pending, comments=True)
        except ValueError:  # an open quote: the command goes on
            continue
        if words:
            commands.append(pending.strip())
        pending = ""
    assert not pending.strip(), f"unterminated command: {pending}"
    return commands


def help_examples() -> list[str]:
    """Every example in the --help of every command and subcommand: a line of its own that
    starts with `imgscale `. "Example" must be followed by such a line within a few lines, so
    no example hides in a sentence."""
    examples = []

    def visit(command: click.Command, path: list[str]) -> None:
        with click.Context(command, info_name=" ".join(path)) as ctx:
            text = command.get_help(ctx)
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if line.strip().startswith("imgscale "):
                examples.append(" ".join(line.split()))
            if "Example" in line:
                following = [n.strip() for n in lines[i + 1 : i + 5]]
                assert any(n.startswith("imgscale ") for n in following), (path, line)
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                visit(command.get_command(ctx, name), [*path, name])

    visit(cli, ["imgscale"])
    return examples


def test_the_tour_is_found_and_uses_no_placeholders() -> None:
    commands = tour_commands(README.read_text())
    assert len(commands) >= 20
    for command in commands:
        assert not re.search(r"\b(NAME|MODEL|STORE|SRC|DST|ADDRESS|SCHEDULER)\b", command), command


def test_help_examples_are_found() -> None:
    examples = help_examples()
    assert (
        "imgscale schedule --every 10m --max-runs 1 -- embed ale.model digits.zarr "
        "digits-ale.zarr" in examples
    )
    assert "imgscale bench --list" in examples


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DASK_SCHEDULER_ADDRESS",)}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["IMGSCALE_LEDGER"] = str(tmp_path / "ledger.sqlite")
    return env


@pytest.mark.slow
def test_help_examples_the_tour_does_not_run_run_verbatim(tmp_path: Path) -> None:
    tour = {" ".join(shlex.split(c, comments=True)) for c in tour_commands(README.read_text())}
    rest = [e for e in help_examples() if e not in tour and e not in EXAMPLES_NOT_RUN]
    for example in rest:
        done = subprocess.run(
            example, shell=True, cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True
        )
        assert done.returncode == 0, f"{example}\n{done.stderr[-2000:]}"


@pytest.mark.slow
@pytest.mark.timeout(1200)  # ~30 commands, each a fresh process; a loaded machine is slow
def test_the_readme_tour_runs_verbatim(tmp_path: Path) -> None:
    env = _env(tmp_path)
    work = tmp_path / "tour"
    work.mkdir()
    timings = []
    for command in tour_commands(README.read_text()):
        started = time.perf_counter()
        done = subprocess.run(
            command, shell=True, cwd=work, env=env, capture_output=True, text=True, timeout=300
        )
        timings.append(f"{time.perf_counter() - started:5.1f} s  {command[:90]}")
        assert done.returncode == 0, f"{command}\n{done.stderr[-2000:]}"
    print("\n".join(timings))
