"""Click options and output helpers shared by every `imgscale` command, built in or contributed."""

from __future__ import annotations

import json
import sys
import time

import click

from imgscale.jobs.runs import report_progress

scheduler_option = click.option(
    "--scheduler",
    envvar="DASK_SCHEDULER_ADDRESS",
    default=None,
    metavar="ADDRESS",
    help="Dask scheduler to connect to (default: $DASK_SCHEDULER_ADDRESS, else a LocalCluster).",
)
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

    return report
