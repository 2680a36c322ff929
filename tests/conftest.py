"""Helpers shared by the tests that kill a child process at a point it reports, and the test
session's own run ledger."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest


def wait_for_report(
    progress: Path, line: str, child: subprocess.Popen, *, timeout: float, who: str
) -> None:
    """Wait until ``child`` (named ``who`` in failures) has written ``line`` to ``progress``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if progress.exists() and line in progress.read_text().splitlines():
            return
        assert child.poll() is None, f"{who} exited before the kill point"
        time.sleep(0.005)
    raise AssertionError(f"{who} never reported {line!r}")


@pytest.fixture(scope="session", autouse=True)
def _run_ledger(tmp_path_factory):
    """Every command the tests run records into a ledger of the test session, not the user's."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("IMGSCALE_LEDGER", str(tmp_path_factory.mktemp("ledger") / "runs.sqlite"))
        yield
