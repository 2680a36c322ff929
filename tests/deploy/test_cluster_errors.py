"""Cluster failures are one fast line: a refused or unknown scheduler, TLS options without a TLS
scheduler, a store the workers cannot see, a failing task; what imgscale's LocalCluster binds."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import dask.config
import psutil
import pytest

import imgscale.jobs.cluster.connection as cluster_module
from imgscale.jobs.cluster import PROBE_SECONDS, TLS_KEYS, ClusterError, connect
from imgscale.pipeline.compute import compute
from imgscale.storage import StoreError, open_store
from tests.deploy.conftest import Cluster, imgscale, random_store


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port on 127.0.0.1 that is bound (so nobody else takes it) but not listening."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


@pytest.fixture(scope="module")
def damaged_store(tmp_path_factory) -> Path:
    """A store whose second feature chunk (rows 100–199) is deleted."""
    path = random_store(
        tmp_path_factory.mktemp("damaged") / "d.zarr", 400, 8, 3, rows_per_chunk=100
    )
    (path / "features" / "c" / "1" / "0").unlink()
    return path


def test_a_refused_scheduler_fails_at_once_naming_the_address(closed_port):
    address = f"tcp://127.0.0.1:{closed_port}"
    started = time.monotonic()
    with pytest.raises(ClusterError) as error, connect(address):
        pass
    # A bound on the failure latency, not a speed figure: Dask alone retries for 30 s.
    assert time.monotonic() - started < PROBE_SECONDS
    assert str(error.value) == f"no Dask scheduler at {address}: connection refused"


def test_an_unknown_scheduler_host_is_named():
    address = "tcp://no-such-host.invalid:8786"
    with pytest.raises(ClusterError) as error, connect(address):
        pass
    assert (
        str(error.value) == f"no Dask scheduler at {address}: unknown host 'no-such-host.invalid'"
    )


def test_cli_reports_a_refused_scheduler_in_one_line(tmp_path, closed_port):
    store = random_store(tmp_path / "s.zarr", 20, 4, 2, rows_per_chunk=10)
    result = imgscale(
        "train", store, tmp_path / "m", "--scheduler", f"tcp://127.0.0.1:{closed_port}"
    )
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"imgscale: error: no Dask scheduler at tcp://127.0.0.1:{closed_port}: connection refused"
    ]
    assert not (tmp_path / "m").exists()


def test_tls_files_need_a_tls_scheduler_address(closed_port):
    with dask.config.set({TLS_KEYS["tls_ca_file"]: "/some/ca.crt"}):
        with pytest.raises(ClusterError, match="is not tls://"):
            connect(f"tcp://127.0.0.1:{closed_port}").__enter__()
        with pytest.raises(ClusterError, match="are for a scheduler given with --scheduler"):
            connect().__enter__()


def test_tls_options_are_set_for_the_command_only(tmp_path, closed_port):
    """--tls-* reach Dask's configuration while the command runs and are undone after it."""
    from click.testing import CliRunner

    from imgscale.jobs.cli import cli

    ca = tmp_path / "ca.crt"
    ca.write_text("not read before connecting\n")
    store = random_store(tmp_path / "s.zarr", 20, 4, 2, rows_per_chunk=10)
    address = f"tcp://127.0.0.1:{closed_port}"
    result = CliRunner().invoke(
        cli,
        [
            "train",
            str(store),
            str(tmp_path / "m"),
            "--scheduler",
            address,
            "--tls-ca-file",
            str(ca),
        ],
    )
    assert isinstance(result.exception, ClusterError)
    assert str(result.exception).startswith(f"scheduler address {address} is not tls://")
    assert dask.config.get(TLS_KEYS["tls_ca_file"], None) is None


def _listening() -> set:
    """(pid, address) of every socket this process and its children listen on."""
    me = psutil.Process()
    return {
        (process.pid, c.laddr)
        for process in [me, *me.children(recursive=True)]
        for c in process.net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    }


@pytest.mark.slow
def test_local_cluster_listens_on_loopback_only():
    # Only what the cluster opens: other tests' clusters may share this test process.
    before = _listening()
    with connect(quiet=True, n_workers=1) as client:
        assert client.dashboard_link.startswith("http://127.0.0.1:")
        opened = _listening() - before
    assert len(opened) >= 3  # scheduler, dashboard, worker (and its nanny)
    assert {address.ip for _, address in opened} == {"127.0.0.1"}, opened


@pytest.mark.slow
def test_a_failing_task_is_one_line_on_the_terminal_and_kept_in_the_worker_log(
    damaged_store, tmp_path
):
    result = imgscale("train", damaged_store, tmp_path / "m", "--method", "ncm")
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    # A store this small is read by a LocalCluster in this process (jobs.cluster).
    assert lines[0].startswith("dask: started a LocalCluster in this process")
    assert len(lines) == 2, result.stderr
    assert lines[1].startswith("imgscale: error: ") and "rows 100–199" in lines[1]
    assert not (tmp_path / "m").exists()

    with connect(quiet=True, n_workers=1) as client:
        with pytest.raises(StoreError, match="rows 100–199"):
            compute(open_store(damaged_store).features().sum(axis=0))
        (log,) = client.get_worker_logs().values()
    assert any("Compute Failed" in message for _, message in log)


@pytest.mark.slow
def test_remote_cluster_checks_the_store_on_every_worker_and_logs_task_failures_there(
    cluster: Cluster, damaged_store, tmp_path
):
    missing = tmp_path / "nowhere.zarr"
    with pytest.raises(ClusterError) as error, connect(cluster.address, shared_paths=[missing]):
        pass
    assert str(error.value).startswith(f"{missing} does not exist on worker tcp://127.0.0.1:")

    model = tmp_path / "m"
    result = imgscale(
        "train", damaged_store, model, "--method", "ncm", "--scheduler", cluster.address
    )
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1].startswith("imgscale: error: ")
    assert "Compute Failed" not in result.stderr and "Traceback" not in result.stderr
    logs = "".join((cluster.root / f"worker-{i}.log").read_text() for i in range(2))
    assert "Compute Failed" in logs and "rows 100–199" in logs


@pytest.mark.slow
def test_a_scheduler_without_workers_is_reported_after_a_bounded_wait(tmp_path, monkeypatch):
    monkeypatch.setattr(cluster_module, "WORKER_WAIT_SECONDS", 1)
    lonely = Cluster(tmp_path, workers=0)
    try:
        with pytest.raises(ClusterError) as error, connect(lonely.address):
            pass
    finally:
        lonely.stop()
    assert str(error.value) == f"the scheduler at {lonely.address} has no workers after 1 s"
