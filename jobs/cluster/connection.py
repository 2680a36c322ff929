"""Connect to a Dask cluster, or start a LocalCluster sized to this machine for one command.

Without a scheduler, the LocalCluster's kind follows the size of the rows a command reads: up
to :data:`THREADED_MAX_BYTES`, one worker in this process whose threads run the tasks (no worker
process to start, no task code to import twice, no dashboard to serve: the fixed cost of a
command on a small store); above it, one single-threaded worker process per core, each with a
memory limit, where no task holds the GIL another needs (``imgscale bench overhead`` measures
both).

Cluster failures reach the user as one line (:class:`ClusterError`): a scheduler that refuses
the connection within :data:`PROBE_SECONDS`, a scheduler lost mid-job as soon as the client
notices, a store that the workers cannot see before anything is submitted. Dask's own log
records stay in the workers' logs (``Client.get_worker_logs``, the dashboard) instead of
being printed on the user's terminal.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import dask.config
import psutil
from distributed import Client, LocalCluster
from distributed.client import AllExit
from distributed.comm import parse_address
from distributed.comm.addressing import parse_host_port
from distributed.utils import silence_logging_cmgr

from imgscale.jobs.cluster.executor import ClusterError, ClusterExecutor
from imgscale.pipeline.compute import use_executor

SCHEDULER_ENV = "DASK_SCHEDULER_ADDRESS"
# A refused connection is known at once; a silent host (dropped packets) is given this long.
PROBE_SECONDS = 2.5
# Rows of at most this many bytes are read by a threaded LocalCluster in this process (module
# docstring). A 1 GiB NCM or ridge pass ran as fast on 2 threads as on 2 worker processes.
THREADED_MAX_BYTES = 2**30
# How long a job waits for the first worker of a scheduler that has none yet.
WORKER_WAIT_SECONDS = 60
# The Dask configuration keys that --tls-ca-file, --tls-cert and --tls-key set for the client.
TLS_KEYS = {
    "tls_ca_file": "distributed.comm.tls.ca-file",
    "tls_cert": "distributed.comm.tls.client.cert",
    "tls_key": "distributed.comm.tls.client.key",
}


class _GathersCancelledByUs(logging.Filter):
    """Drops asyncio's 'Task exception was never retrieved' reports of a Client's gathers that
    Ctrl-C or SIGTERM cancelled (distributed's ``AllExit``): the command says it was aborted,
    in one line; the traceback of each cancelled gather is not for the user's terminal."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], AllExit))


_ASYNCIO_LOGGER = logging.getLogger("asyncio")
_GATHERS_FILTER = _GathersCancelledByUs()


@contextlib.contextmanager
def connect(
    scheduler: str | None = None,
    *,
    quiet: bool = False,
    n_workers: int | None = None,
    shared_paths: Iterable[str | os.PathLike] = (),
    data_bytes: int | None = None,
    cluster: Future | None = None,
) -> Iterator[Client]:
    """Yield a client for ``scheduler`` (or ``$DASK_SCHEDULER_ADDRESS``), else a new LocalCluster
    of ``n_workers`` single-threaded workers (default: one per core), threads in this process if
    ``data_bytes``, the size of the rows the command reads, is at most `THREADED_MAX_BYTES`.

    ``shared_paths`` (absolute) must exist on every worker of a given scheduler: workers read
    and write stores themselves, so a path only the client sees would fail mid-job.
    While the client is open, every ``pipeline`` computation runs on it, shows a progress bar
    on stderr once it has taken longer than a couple of seconds, and raises
    :class:`ClusterError` if the scheduler is lost. ``cluster`` is a LocalCluster being started
    already (`local_cluster_soon`), used when no scheduler is given.
    """
    address = scheduler or os.environ.get(SCHEDULER_ENV)
    with contextlib.ExitStack() as stack:
        # Dask's connection and task-failure records (tracebacks) are not for the terminal:
        # imgscale reports the failure once, in one line. Gathers cancelled by an interrupt are
        # reported by asyncio when collected, which may be after this block: the filter stays.
        stack.enter_context(silence_logging_cmgr(logging.CRITICAL))
        _ASYNCIO_LOGGER.addFilter(_GATHERS_FILTER)
        if address:
            client = stack.enter_context(_remote_client(address))
            _check_shared_paths(client, shared_paths)
        else:
            if tls_configured():
                raise ClusterError(
                    "--tls-ca-file/--tls-cert/--tls-key are for a scheduler given with "
                    "--scheduler tls://HOST:PORT; without --scheduler imgscale starts a local "
                    "cluster on 127.0.0.1"
                )
            threaded = data_bytes is not None and data_bytes <= THREADED_MAX_BYTES
            if cluster is not None:
                cluster = stack.enter_context(cluster.result())
            elif threaded:
                cluster = stack.enter_context(_threaded_cluster(n_workers))
            else:
                cluster = stack.enter_context(_local_cluster(n_workers))
            client = stack.enter_context(Client(cluster))
            address = client.scheduler.address
        if not quiet:
            if not address.startswith("inproc://"):
                workers = len(client.scheduler_info(n_workers=-1)["workers"])
                origin = (
                    "connected to"
                    if scheduler or os.environ.get(SCHEDULER_ENV)
                    else "started a LocalCluster at"
                )
                line = f"{origin} {address}, {workers} workers, dashboard {client.dashboard_link}"
            else:
                threads = sum(client.nthreads().values())
                line = (
                    f"started a LocalCluster in this process, {threads} threads, no dashboard "
                    f"(rows of at most {THREADED_MAX_BYTES / 2**30:g} GiB)"
                )
            print(f"dask: {line}", file=sys.stderr)
        stack.enter_context(use_executor(ClusterExecutor(client, quiet=quiet, address=address)))
        yield client


@contextlib.contextmanager
def local_cluster_soon(start: bool = True) -> Iterator[Future | None]:
    """A LocalCluster of single-threaded worker processes, one per core, started in a thread
    while the command does its own work (listing, importing its descriptors), for `connect`;
    closed on leaving unless `connect` took it. Yields None (nothing started) unless ``start``
    and no scheduler is set in the environment."""
    if not start or os.environ.get(SCHEDULER_ENV) or tls_configured():
        yield None
        return
    with ThreadPoolExecutor(1, thread_name_prefix="local-cluster") as starting:
        future = starting.submit(_local_cluster, None)
        try:
            yield future
        finally:
            starting.shutdown(wait=True)
            if future.exception() is None:
                future.result().close()  # nothing when connect closed it


def tls_configured() -> bool:
    """Whether a client certificate or CA file is set (by the --tls-* options or Dask config)."""
    return any(dask.config.get(key, None) for key in TLS_KEYS.values())


@contextlib.contextmanager
def _remote_client(address: str) -> Iterator[Client]:
    protocol, location = parse_address(address)
    if protocol == "tls" and not dask.config.get(TLS_KEYS["tls_cert"], None):
        raise ClusterError(
            f"scheduler {address} uses TLS: give --tls-ca-file, --tls-cert and --tls-key (or "
            "set distributed.comm.tls in Dask's configuration)"
        )
    if tls_configured() and protocol != "tls":
        raise ClusterError(
            f"scheduler address {address} is not tls://: the TLS certificate options need "
            "a scheduler started with --tls-cert (tls://HOST:PORT)"
        )
    if protocol in ("tcp", "tls"):
        _probe(address, *parse_host_port(location))
        _handshake(address)
    try:
        client = Client(address, timeout=f"{handshake_seconds()}s")
    except (OSError, TimeoutError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ClusterError(f"could not connect to the scheduler at {address}: {first}") from exc
    with client:
        # A job may start before the workers (compose, Kubernetes): give them a moment.
        try:
            client.wait_for_workers(1, timeout=WORKER_WAIT_SECONDS)
        except TimeoutError as exc:
            raise ClusterError(
                f"the scheduler at {address} has no workers after {WORKER_WAIT_SECONDS} s"
            ) from exc
        yield client


def _probe(address: str, host: str, port: int | None) -> None:
    """Fail at once on a refused connection or an unknown host (Dask retries for its timeout)."""
    if port is None:
        raise ClusterError(f"scheduler address {address} has no port (expected HOST:PORT)")
    try:
        socket.create_connection((host, port), timeout=PROBE_SECONDS).close()
    except socket.gaierror as exc:
        raise ClusterError(f"no Dask scheduler at {address}: unknown host {host!r}") from exc
    except TimeoutError as exc:
        raise ClusterError(
            f"no Dask scheduler at {address}: no answer within {PROBE_SECONDS:g} s"
        ) from exc
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ClusterError(f"no Dask scheduler at {address}: {reason.lower()}") from exc


def handshake_seconds() -> float:
    """How long the Dask handshake may take once the port answers (TLS included): Dask's own
    connect timeout, ``distributed.comm.timeouts.connect`` in Dask's configuration (30 s unless
    set, e.g. by ``DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT=10s``)."""
    import dask.config
    from dask.utils import parse_timedelta

    return float(parse_timedelta(dask.config.get("distributed.comm.timeouts.connect"), "s"))


def _handshake(address: str) -> None:
    """Fail within :func:`handshake_seconds` if the port answers but does not speak Dask:
    Client's own timeout does not bound a peer that accepts and stays silent, and the command
    would hang."""
    import asyncio

    from distributed.comm import connect
    from distributed.security import Security

    seconds = handshake_seconds()

    async def shake() -> None:
        args = Security().get_connection_args("client")
        comm = await asyncio.wait_for(connect(address, timeout=seconds, **args), seconds)
        await comm.close()

    try:
        asyncio.run(shake())
    except TimeoutError as exc:
        raise ClusterError(
            f"no Dask scheduler at {address}: the port accepted the connection but did not "
            f"complete Dask's handshake within {seconds:g} s (another service there?)"
        ) from exc
    except Exception as exc:  # a peer speaking another protocol: closed or garbled comm
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if _refused(exc):  # a scheduler refusing this client's certificate, or plain TCP to TLS
            raise ClusterError(f"could not connect to the scheduler at {address}: {first}") from exc
        raise ClusterError(
            f"no Dask scheduler at {address}: Dask's handshake failed ({first})"
        ) from exc


def _refused(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it came from) is the peer refusing the connection: a TLS
    error or a reset, as a TLS scheduler answers a wrong certificate or plain TCP."""
    import ssl

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLError | ConnectionResetError):
            return True
        seen = seen.__cause__ or seen.__context__
    # Dask's connect retries and may raise its last failure as text only, the chain cut.
    return "SSLError" in str(exc) or "Connection reset" in str(exc)


def _check_shared_paths(client: Client, paths: Iterable[str | os.PathLike]) -> None:
    from imgscale.storage import is_url

    paths = [str(p) for p in paths if not is_url(p)]  # a URL reaches the same bucket anywhere
    if not paths:
        return
    seen = client.run(_existing, paths)
    for worker, present in sorted(seen.items()):
        missing = [p for p, ok in zip(paths, present, strict=True) if not ok]
        if missing:
            raise ClusterError(
                f"{missing[0]} does not exist on worker {worker}: stores must be on a file "
                "system every worker mounts at the same path"
            )


def _existing(paths: list[str]) -> list[bool]:
    return [os.path.exists(p) for p in paths]


def shared_path(path: str | os.PathLike) -> os.PathLike:
    """``path`` made absolute: workers do not share the client's working directory. An
    object-store URL (storage's `location`) is the same for every worker."""
    from imgscale.storage import is_url, location

    return location(path) if is_url(path) else Path(path).absolute()


def _local_cluster(n_workers: int | None) -> LocalCluster:
    """Single-threaded worker processes, one per core by default: tasks are BLAS or IO bound.

    Scheduler, workers and dashboard listen on 127.0.0.1 only: anyone who can reach a
    scheduler can run code on its workers.
    """
    n_workers = n_workers or psutil.cpu_count(logical=False) or os.cpu_count() or 1
    memory = psutil.virtual_memory().total
    with _main_script_not_rerun(), _environment_kept():
        return LocalCluster(
            n_workers=n_workers,
            threads_per_worker=1,
            host="127.0.0.1",
            memory_limit=int(0.8 * memory / n_workers),
            dashboard_address="127.0.0.1:0",
            silence_logs=logging.CRITICAL,
        )


@contextlib.contextmanager
def _main_script_not_rerun() -> Iterator[None]:
    """While worker processes are spawned: multiprocessing runs the parent's main script again in
    each child, up to its ``__main__`` guard, and the ``imgscale`` console script imports the
    whole command line (click, every command's options) there, which a worker never uses. A main
    module without a file is not run again (``multiprocessing.spawn.get_preparation_data``)."""
    main = sys.modules["__main__"]
    script = main.__dict__.pop("__file__", None)
    try:
        yield
    finally:
        if script is not None:
            main.__file__ = script


@contextlib.contextmanager
def _environment_kept() -> Iterator[None]:
    """While worker processes are spawned: each nanny sets ``distributed.nanny.pre-spawn-environ``
    (one OpenMP and BLAS thread, a malloc trim threshold) and a hash seed in *this* process's
    environment for its worker to inherit. The workers want them; this process does not: a
    library it loads later (faiss's OpenMP) and every process it starts later (a command, a peer)
    would run on one thread. They are put back as they were once the workers have started (a
    worker the nanny restarts later sets them again)."""
    names = [*(dask.config.get("distributed.nanny.pre-spawn-environ", {}) or {}), "PYTHONHASHSEED"]
    saved = {name: os.environ.get(name) for name in names}
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _threaded_cluster(n_threads: int | None) -> LocalCluster:
    """One worker in this process with a thread per core (``n_threads``), reached in-process:
    nothing listens on a network port."""
    return LocalCluster(
        n_workers=1,
        threads_per_worker=n_threads or psutil.cpu_count(logical=False) or os.cpu_count() or 1,
        processes=False,
        # Its HTTP endpoints (health, metrics) on a free loopback port; no dashboard (bokeh).
        dashboard_address="127.0.0.1:0",
        scheduler_kwargs={"dashboard": False},
        silence_logs=logging.CRITICAL,
    )
