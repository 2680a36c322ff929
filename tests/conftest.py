"""Helpers shared by the tests that kill a child process at a point it reports, the test
session's own run ledger, and the folder of its tiny benchmark run (tests/bench/tiny_run.py)."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from .bench import tiny_run
from .processes import start_moto_server


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # the session's process, not one of xdist's workers
        tiny_run.make_root()


def pytest_unconfigure(config):
    if not hasattr(config, "workerinput"):
        tiny_run.stop()


def sigint_as_from_a_shell() -> None:
    """``preexec_fn`` of a child a test interrupts with SIGINT: its default action, as a command
    started from an interactive shell has it. A test session started in the background of a
    non-interactive shell (``pytest &``) inherits SIGINT ignored and would pass that on; Python
    then never raises KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


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
        patch.setenv("IMGSCALE_LEDGER", str(tmp_path_factory.mktemp("ledger") / "runs"))
        yield


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory):
    """moto's S3-compatible server as a process on 127.0.0.1, one per test module; the AWS
    variables point this process and the workers it starts at it (test credentials)."""
    import fsspec

    server, endpoint = start_moto_server(tmp_path_factory.mktemp("moto") / "moto.log")
    try:
        with pytest.MonkeyPatch.context() as patch:
            for name, value in {
                "AWS_ENDPOINT_URL": endpoint,
                "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_DEFAULT_REGION": "us-east-1",
            }.items():
                patch.setenv(name, value)
            fsspec.get_filesystem_class("s3").clear_instance_cache()  # none for another server
            yield endpoint
            fsspec.get_filesystem_class("s3").clear_instance_cache()
    finally:
        server.kill()
        server.wait()


@pytest.fixture
def s3_bucket(s3_endpoint) -> str:
    """A new empty bucket on the module's server, as an ``s3://`` URL."""
    import uuid

    import fsspec

    name = f"test-{uuid.uuid4().hex[:12]}"
    fsspec.filesystem("s3").mkdir(name)
    return f"s3://{name}"
