"""The jobs layer's one door to a Dask cluster: the only code that holds a ``distributed.Client``.

- `connect` (`connection`): a client for a scheduler, or a LocalCluster started for one command
  (`local_cluster_soon` starts it while the command lists its inputs); `shared_path`, a path as
  every worker sees it; `ClusterError`, a cluster unreachable, lost or blind to the job's files.
- `ClusterExecutor` (`executor`): the `imgscale.pipeline.compute.Executor` that `connect`
  installs, so that pipeline work runs on the cluster with progress and cancellation.
- `cluster_mapper`, `stream_map`, `submit_detached`, `worker_threads` (`fanout`): independent
  tasks, a source's partitions a few at a time, one task outliving its client.
- `ClusterChunks` (`held`): results kept on the workers for work that makes passes over them.
"""

from imgscale.jobs.cluster.connection import (
    PROBE_SECONDS,
    THREADED_MAX_BYTES,
    TLS_KEYS,
    connect,
    local_cluster_soon,
    shared_path,
)
from imgscale.jobs.cluster.executor import ClusterError, ClusterExecutor
from imgscale.jobs.cluster.fanout import (
    cluster_mapper,
    stream_map,
    submit_detached,
    worker_threads,
)
from imgscale.jobs.cluster.held import ClusterChunks

__all__ = [
    "PROBE_SECONDS",
    "THREADED_MAX_BYTES",
    "TLS_KEYS",
    "ClusterChunks",
    "ClusterError",
    "ClusterExecutor",
    "cluster_mapper",
    "connect",
    "local_cluster_soon",
    "shared_path",
    "stream_map",
    "submit_detached",
    "worker_threads",
]
