"""What `imgscale` commands print: the summary a command ends with (also given to the run
ledger), warnings, and the progress lines redrawn in place on stderr while it works."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from imgscale.jobs.runs import report, report_progress

if TYPE_CHECKING:
    from imgscale.pipeline.classify import Validation
    from imgscale.pipeline.describe import FitPass


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


def warn(message: str | None) -> None:
    """A warning on stderr, one line (the model's store changed since it was trained)."""
    if message is not None:
        click.echo(f"imgscale: warning: {message}", err=True)


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
