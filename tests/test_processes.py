"""The test suite's process helpers: a server whose port is taken exits, and a test waiting for
it fails at once naming the process and quoting its log, instead of waiting out its timeout."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest
from distributed import Client

from tests.processes import start_logged, start_moto_server, wait_for_workers, wait_until

DASK = str(Path(sys.executable).with_name("dask"))


def test_a_worker_whose_port_is_taken_is_reported_with_its_log_not_waited_for(tmp_path):
    scheduler_file = tmp_path / "scheduler.json"
    scheduler_log = tmp_path / "scheduler.log"
    scheduler = start_logged(
        [DASK, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
         "--scheduler-file", str(scheduler_file)],
        scheduler_log,
    )  # fmt: skip
    started = {"scheduler": (scheduler, scheduler_log)}
    try:
        wait_until(scheduler_file.exists, "the scheduler file", started, 60)
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            worker_log = tmp_path / "worker.log"
            started["worker"] = (
                start_logged(
                    [DASK, "worker", "--scheduler-file", str(scheduler_file), "--no-nanny",
                     "--host", "127.0.0.1", "--worker-port", str(taken.getsockname()[1]),
                     "--no-dashboard"],
                    worker_log,
                ),
                worker_log,
            )  # fmt: skip
            with Client(scheduler_file=str(scheduler_file), timeout="60s") as client:
                with pytest.raises(AssertionError) as failed:
                    wait_for_workers(client, 1, started, timeout=600)
        message = str(failed.value)
        assert message.startswith(f"worker exited with 1; the end of {worker_log}:\n")
        assert "Address already in use" in message
    finally:
        for process, _ in started.values():
            process.kill()
            process.wait()


def test_moto_server_listens_on_the_port_it_printed(tmp_path):
    import urllib.error
    import urllib.request

    server, endpoint = start_moto_server(tmp_path / "moto.log")
    try:
        assert endpoint.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(endpoint, timeout=10) as answer:
            assert b"ListAllMyBucketsResult" in answer.read()
    finally:
        server.kill()
        server.wait()
