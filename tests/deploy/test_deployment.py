"""deploy/: the compose file and Kubernetes manifests parse, use the operator's and Kubernetes'
field names, and every command they run is run here, against a TLS scheduler started from their
own command lines (names, ports and mount points substituted; nothing else)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml
from sklearn.datasets import load_digits

from imgscale.storage import create_store
from tests.deploy.conftest import BIN, imgscale
from tests.processes import start_logged, stop, wait_until

DEPLOY = Path(__file__).parents[2] / "deploy"
MANIFESTS = sorted((DEPLOY / "k8s").glob("*.yaml"))
SERVICE_ADDRESSES = (
    "tls://scheduler:8786",
    "tls://imgscale-scheduler:8786",
    "tls://imgscale-train-scheduler:8786",
)

# Field names of the objects the manifests use (Kubernetes 1.30 API reference; the
# dask-kubernetes operator's CRDs, templates.yaml and the DaskJob docs).
POD_SPEC = {
    "containers", "initContainers", "volumes", "restartPolicy", "securityContext",
    "serviceAccountName", "nodeSelector", "tolerations", "affinity", "imagePullSecrets",
    "terminationGracePeriodSeconds", "priorityClassName",
}  # fmt: skip
CONTAINER = {
    "name", "image", "imagePullPolicy", "command", "args", "env", "envFrom", "ports",
    "resources", "volumeMounts", "readinessProbe", "livenessProbe", "startupProbe",
    "securityContext", "workingDir",
}  # fmt: skip
SERVICE_SPEC = {"type", "selector", "ports", "clusterIP", "sessionAffinity"}
DASK_CLUSTER_SPEC = {"idleTimeout", "scheduler", "worker"}
CRON_JOB_SPEC = {
    "schedule", "timeZone", "concurrencyPolicy", "startingDeadlineSeconds", "suspend",
    "successfulJobsHistoryLimit", "failedJobsHistoryLimit", "jobTemplate",
}  # fmt: skip
JOB_SPEC = {"template", "backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished"}


def documents() -> dict[str, dict]:
    found = {}
    for path in MANIFESTS:
        for document in yaml.safe_load_all(path.read_text()):
            found[document["kind"]] = document
    return found


def compose() -> dict:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def check_pod_spec(spec: dict, where: str, claim: str) -> None:
    assert set(spec) <= POD_SPEC, f"{where}: {set(spec) - POD_SPEC}"
    assert spec["securityContext"]["runAsNonRoot"] is True, where
    for container in spec["containers"]:
        assert set(container) <= CONTAINER, f"{where}: {set(container) - CONTAINER}"
        assert container["image"].endswith(":0.1.0"), where
    claims = [
        v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"] if "persistent" in str(v)
    ]
    assert claims == [claim], where
    volumes = {v["name"] for v in spec["volumes"]}
    for container in spec["containers"]:
        assert {m["name"] for m in container["volumeMounts"]} <= volumes, where


def check_dask_cluster_spec(spec: dict, name: str, claim: str) -> None:
    assert set(spec) <= DASK_CLUSTER_SPEC and {"scheduler", "worker"} <= set(spec)
    assert set(spec["scheduler"]) == {"spec", "service"}
    assert set(spec["worker"]) <= {"replicas", "spec"} and spec["worker"]["replicas"] >= 1
    service = spec["scheduler"]["service"]
    assert set(service) <= SERVICE_SPEC
    # The dashboard is reachable inside the cluster only (kubectl port-forward).
    assert service["type"] == "ClusterIP"
    assert service["selector"] == {"dask.org/cluster-name": name, "dask.org/component": "scheduler"}
    ports = {p["name"] for c in spec["scheduler"]["spec"]["containers"] for p in c["ports"]}
    assert {p["targetPort"] for p in service["ports"]} <= ports
    check_pod_spec(spec["scheduler"]["spec"], f"{name} scheduler", claim)
    check_pod_spec(spec["worker"]["spec"], f"{name} worker", claim)
    (worker,) = spec["worker"]["spec"]["containers"]
    assert f"tls://{name}-scheduler:8786" in worker["args"]


def test_manifests_use_the_operator_and_kubernetes_field_names():
    found = documents()
    assert set(found) == {"PersistentVolumeClaim", "DaskCluster", "DaskJob", "CronJob"}
    claim = found["PersistentVolumeClaim"]["metadata"]["name"]
    assert found["PersistentVolumeClaim"]["spec"]["accessModes"] == ["ReadWriteMany"]

    cluster = found["DaskCluster"]
    assert cluster["apiVersion"] == "kubernetes.dask.org/v1"
    check_dask_cluster_spec(cluster["spec"], cluster["metadata"]["name"], claim)

    job = found["DaskJob"]
    assert job["apiVersion"] == "kubernetes.dask.org/v1"
    assert set(job["spec"]) == {"job", "cluster"}
    check_pod_spec(job["spec"]["job"]["spec"], "DaskJob job", claim)
    assert job["spec"]["job"]["spec"]["restartPolicy"] == "Never"
    check_dask_cluster_spec(job["spec"]["cluster"]["spec"], job["metadata"]["name"], claim)

    cron = found["CronJob"]
    assert cron["apiVersion"] == "batch/v1"
    assert set(cron["spec"]) <= CRON_JOB_SPEC
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    assert isinstance(cron["spec"]["startingDeadlineSeconds"], int)
    assert 0 < cron["spec"]["startingDeadlineSeconds"] < 600  # within one 10-minute period
    assert len(cron["spec"]["schedule"].split()) == 5
    job_spec = cron["spec"]["jobTemplate"]["spec"]
    assert set(job_spec) <= JOB_SPEC
    check_pod_spec(job_spec["template"]["spec"], "CronJob", claim)
    assert job_spec["template"]["spec"]["restartPolicy"] in {"Never", "OnFailure"}


def test_compose_publishes_only_the_dashboard_on_loopback():
    services = compose()["services"]
    assert set(services) == {"scheduler", "worker", "embed", "job"}
    published = {name: s.get("ports", []) for name, s in services.items()}
    assert published == {"scheduler": ["127.0.0.1:8787:8787"], "worker": [], "embed": [], "job": []}
    assert services["worker"]["deploy"]["replicas"] == 2
    for name, service in services.items():
        assert "data:/data" in service["volumes"], name
    config = yaml.safe_load((DEPLOY / "dask.yaml").read_text())
    assert config["distributed"]["comm"]["require-encryption"] is True


def commands() -> dict[str, list[str]]:
    """Every command line the compose file and manifests run, by where it is."""
    found = {f"compose {n}": s["command"] for n, s in compose()["services"].items()}
    for kind, document in documents().items():
        spec = document["spec"]
        pods = {
            "DaskCluster": {"scheduler": spec.get("scheduler"), "worker": spec.get("worker")},
            "DaskJob": {
                "job": spec.get("job"),
                "cluster scheduler": spec.get("cluster", {}).get("spec", {}).get("scheduler"),
                "cluster worker": spec.get("cluster", {}).get("spec", {}).get("worker"),
            },
            "CronJob": {"job": spec.get("jobTemplate", {}).get("spec", {}).get("template")},
        }.get(kind, {})
        for role, pod in pods.items():
            for container in pod["spec"]["containers"]:
                found[f"{kind} {role}"] = container.get("command", []) + container["args"]
    return found


class Substitution:
    """What differs between a deployment and this machine: service names and ports, mount
    points, the dashboards' addresses, and the bounded run of `schedule`. The scheduler's port
    is 0 (the one it binds) until ``listening_at`` gives the port it bound."""

    def __init__(self, root: Path, certs: Path) -> None:
        self.root = root
        self.certs = certs
        self.listening_at(0)

    def listening_at(self, port: int) -> None:
        self.port = port
        self.address = f"tls://127.0.0.1:{port}"

    def __call__(self, argv: list[str]) -> list[str]:
        out = []
        for arg in argv:
            if arg in SERVICE_ADDRESSES:
                arg = self.address
            elif arg == "8786":
                arg = str(self.port)
            elif arg in (":8787", ":8788"):
                arg = "127.0.0.1:0"
            elif arg == "$(DASK_WORKER_NAME)":
                arg = "worker-from-k8s"
            elif arg.startswith("/certs/"):
                arg = str(self.certs / arg.removeprefix("/certs/"))
            elif arg.startswith("/data/"):
                arg = str(self.root / arg.removeprefix("/data/"))
            out.append(arg)
        if out[:2] in (["dask", "scheduler"], ["dask", "worker"]):
            out += ["--host", "127.0.0.1"]
        if out[:2] == ["imgscale", "schedule"]:
            out[2:2] = ["--max-runs", "1"]
        return [str(BIN / out[0]), *out[1:]]


def digits_store(path: Path) -> None:
    digits = load_digits()
    X, y = digits.data[:600].astype(np.float32), digits.target[:600]
    store = create_store(path, 64, class_names=[str(c) for c in range(10)], rows_per_chunk=150)
    store.append("all", X, y, split=np.where(np.arange(600) % 4 == 3, "val", "train"))


@pytest.mark.slow
@pytest.mark.timeout(600)  # 150 s at a load of 15 on 2 cores; the ALE fit is most of it
def test_every_deployed_command_runs_against_a_tls_cluster_started_from_the_manifests(
    tmp_path, certs
):
    found = commands()
    assert set(found) == {
        "compose scheduler", "compose worker", "compose embed", "compose job",
        "DaskCluster scheduler", "DaskCluster worker", "DaskJob job",
        "DaskJob cluster scheduler", "DaskJob cluster worker", "CronJob job",
    }  # fmt: skip
    substitute = Substitution(tmp_path / "data", certs)
    (tmp_path / "data" / "stores").mkdir(parents=True)
    (tmp_path / "data" / "models").mkdir()
    digits_store(tmp_path / "data" / "stores" / "features.zarr")
    # The deployed Dask configuration, its CA path made this machine's.
    config = tmp_path / "dask-config"
    config.mkdir()
    (config / "dask.yaml").write_text(
        (DEPLOY / "dask.yaml").read_text().replace("/certs/", f"{certs}/")
    )
    env = {**os.environ, "DASK_CONFIG": str(config)}

    # The Kubernetes scheduler and workers run what compose runs.
    assert substitute(found["DaskCluster scheduler"]) == substitute(found["compose scheduler"])
    assert substitute(found["DaskJob cluster scheduler"]) == substitute(found["compose scheduler"])
    assert substitute(found["DaskJob cluster worker"]) == substitute(found["DaskCluster worker"])
    logs = tmp_path / "logs"
    logs.mkdir()
    started = {}
    try:
        for name in ("compose scheduler", "compose worker", "DaskCluster worker"):
            log = logs / f"{name.replace(' ', '-')}.log"
            started[name] = (start_logged(substitute(found[name]), log, env=env), log)
            if name == "compose scheduler":
                substitute.listening_at(scheduler_port(log, started))
        run_deployed(tmp_path, substitute, found, env)
    finally:
        processes = [process for process, _ in started.values()]
        stop(processes[1:], processes[:1])
    # The worker started from the DaskCluster's command line joined over TLS.
    worker_log = (logs / "DaskCluster-worker.log").read_text()
    assert re.search(r"Start worker at: +tls://127\.0\.0\.1:", worker_log), worker_log


def run_deployed(tmp_path, substitute, found, env) -> None:
    def run(name: str, argv: list[str]) -> subprocess.CompletedProcess:
        result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=200)
        assert result.returncode == 0, f"{name}: {shlex.join(argv)}\n{result.stderr}"
        return result

    stores = tmp_path / "data" / "stores"
    run("DaskJob job", substitute(found["DaskJob job"]))
    assert (tmp_path / "data" / "models" / "ale.model").is_dir()
    first = json.loads(run("CronJob job", substitute(found["CronJob job"])).stdout)
    assert first["rows_embedded"] == 600
    # A second turn (compose's scheduled embed) finds nothing new: the watermark is at 600.
    turn = run("compose embed", substitute(found["compose embed"]))
    assert re.search(r"0 rows embedded", turn.stderr), turn.stderr
    assert "schedule: 1 runs (0 failed), 0 skipped" in turn.stderr
    assert (stores / "features-ale.zarr").is_dir()
    run("compose job", substitute(found["compose job"]))

    # Without a client certificate imgscale says what to give, in one line.
    argv = substitute(found["CronJob job"])
    tls = {i for i, a in enumerate(argv) if a.startswith("--tls-")}
    bare = [a for i, a in enumerate(argv) if i not in tls and i - 1 not in tls]
    refused = subprocess.run(bare, env=env, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 1
    assert refused.stderr.splitlines() == [
        f"imgscale: error: scheduler {substitute.address} uses TLS: give --tls-ca-file, "
        "--tls-cert and --tls-key (or set distributed.comm.tls in Dask's configuration)"
    ]
    # With a certificate another CA signed, the scheduler refuses the handshake.
    rogue = tmp_path / "rogue"
    subprocess.run([DEPLOY / "tls" / "make-certs", rogue], check=True, capture_output=True)
    forged = [str(rogue / Path(a).name) if "/client." in a else a for a in argv]
    refused = subprocess.run(forged, env=env, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 1 and len(refused.stderr.splitlines()) == 1, refused.stderr
    assert refused.stderr.startswith(
        f"imgscale: error: could not connect to the scheduler at {substitute.address}: "
    )
    # Nor does a client without any TLS configuration reach it over plain TCP.
    plain = [a.replace("tls://", "tcp://") for a in bare]
    refused = subprocess.run(plain, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 1 and len(refused.stderr.splitlines()) == 1, refused.stderr
    assert refused.stderr.startswith(
        "imgscale: error: could not connect to the scheduler at tcp://"
    )


def scheduler_port(log: Path, started) -> int:
    """The port the scheduler logging to ``log`` bound, once it listens."""
    found: list[str] = []

    def listening() -> bool:
        found[:] = re.findall(r"Scheduler at: +tls://127\.0\.0\.1:(\d+)", log.read_text())
        return bool(found)

    wait_until(listening, "the scheduler listening", started, 60)
    return int(found[0])


def test_make_certs_writes_a_ca_and_three_pairs_it_signed(certs):
    names = sorted(p.name for p in certs.iterdir())
    assert names == sorted(
        f"{n}.{e}" for n in ("ca", "scheduler", "worker", "client") for e in ("crt", "key")
    )
    for name in ("scheduler", "worker", "client"):
        verified = subprocess.run(
            ["openssl", "verify", "-CAfile", certs / "ca.crt", certs / f"{name}.crt"],
            capture_output=True,
            text=True,
        )
        assert verified.stdout.strip() == f"{certs / name}.crt: OK"
        assert (certs / f"{name}.key").stat().st_mode & 0o077 == 0
    again = subprocess.run([DEPLOY / "tls" / "make-certs", certs], capture_output=True, text=True)
    assert again.returncode == 1 and "refusing to overwrite" in again.stderr


def test_the_constraints_file_pins_exactly_what_pyproject_needs():
    checked = subprocess.run(
        [BIN / "python", DEPLOY / "lock.py", "--check"], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stderr


def test_tls_options_are_refused_without_a_tls_scheduler(tmp_path, certs):
    store = tmp_path / "s.zarr"
    digits_store(store)
    tls = ["--tls-ca-file", certs / "ca.crt", "--tls-cert", certs / "client.crt"]
    result = imgscale("train", store, tmp_path / "m", *tls)
    assert result.returncode == 1
    assert result.stderr.startswith("imgscale: error: --tls-ca-file/--tls-cert/--tls-key are for")
    result = imgscale("train", store, tmp_path / "m", "--scheduler", "tls://127.0.0.1:9")
    assert result.stderr.splitlines() == [
        "imgscale: error: scheduler tls://127.0.0.1:9 uses TLS: give --tls-ca-file, --tls-cert "
        "and --tls-key (or set distributed.comm.tls in Dask's configuration)"
    ]
