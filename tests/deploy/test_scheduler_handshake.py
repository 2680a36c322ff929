"""A --scheduler address whose port accepts connections but never speaks Dask (a stuck process,
another service) is refused within the handshake timeout, naming the address; it used to hang
forever. An HTTP server on the port is refused too. The timeout is Dask's connect
timeout, set short here through Dask's environment configuration."""

from __future__ import annotations

import http.server
import os
import socket
import threading
from collections.abc import Iterator

import pytest

from tests.deploy.conftest import imgscale, random_store


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port on 127.0.0.1 that accepts every connection and never sends a byte."""
    held: list[socket.socket] = []
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)

        def accept() -> None:
            while True:
                try:
                    held.append(server.accept()[0])
                except OSError:  # the server socket closed at the end of the test
                    return

        threading.Thread(target=accept, daemon=True).start()
        yield server.getsockname()[1]
    for conn in held:
        conn.close()


@pytest.fixture
def http_port() -> Iterator[int]:
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_a_port_that_never_speaks_is_refused_after_the_handshake_timeout(tmp_path, silent_port):
    store = random_store(tmp_path / "s.zarr", 20, 4, 2, rows_per_chunk=10)
    address = f"tcp://127.0.0.1:{silent_port}"
    env = {**os.environ, "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "3s"}
    # A bound on the failure latency, not a speed figure: the command used to hang forever.
    result = imgscale("train", store, tmp_path / "m", "--scheduler", address, timeout=60, env=env)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"imgscale: error: no Dask scheduler at {address}: the port accepted the connection but "
        "did not complete Dask's handshake within 3 s (another service there?)"
    ]
    assert not (tmp_path / "m").exists()


def test_an_http_server_is_not_taken_for_a_scheduler(tmp_path, http_port):
    store = random_store(tmp_path / "s.zarr", 20, 4, 2, rows_per_chunk=10)
    address = f"tcp://127.0.0.1:{http_port}"
    env = {**os.environ, "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "3s"}
    result = imgscale("train", store, tmp_path / "m", "--scheduler", address, env=env)
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"imgscale: error: no Dask scheduler at {address}: ")
