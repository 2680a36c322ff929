"""The computing commands on s3:// URLs (moto's server as a process on 127.0.0.1) give what they
give on local paths: one spec of ingest → compress → train → evaluate → predict → embed →
add-class, run once on the server and once on a local folder, and every result compared. A spec
holding a secret is refused before anything runs."""

from __future__ import annotations

import io
import json

import fsspec
import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from sklearn.datasets import load_digits

from imgscale.jobs import models
from imgscale.jobs.cli import cli
from imgscale.storage import Ledger, open_store

SPEC = """
{options}
[[jobs]]
kind = "ingest"
src = "train.npz"
store = "{root}digits.zarr"
y_key = "y"

[[jobs]]
kind = "ingest"
src = "test.npz"
store = "{root}digits.zarr"
y_key = "y"
split = "test"

[[jobs]]
kind = "compress"
src = "{root}digits.zarr"
dst = "{root}digits-pq.zarr"
m = 16

[[jobs]]
kind = "train"
store = "{root}digits.zarr"
model = "{root}ridge.model"
method = "ridge"

[[jobs]]
kind = "train"
store = "{root}digits-pq.zarr"
model = "{root}ncm.model"
method = "ncm"

[[jobs]]
kind = "train"
store = "{root}digits.zarr"
model = "{root}rff.model"
embedding = "rff"
n_components = 64
gamma = 0.01
method = "ncm"

[[jobs]]
kind = "evaluate"
model = "{root}ridge.model"
store = "{root}digits.zarr"

[[jobs]]
kind = "predict"
model = "{root}ridge.model"
store = "{root}digits.zarr"
out = "{root}predictions.parquet"
split = "test"

[[jobs]]
kind = "embed"
model = "{root}rff.model"
src = "{root}digits.zarr"
dst = "{root}digits-rff.zarr"
batch_rows = 500

[[jobs]]
kind = "ingest"
src = "new.npz"
store = "{root}new.zarr"
y_key = "y"
class_names = "classes.txt"

[[jobs]]
kind = "add-class"
model = "{root}ncm.model"
store = "{root}new.zarr"
label = "new"
out = "{root}ncm-new.model"
"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("object-store")
    digits = load_digits()
    X, y = digits.data.astype(np.float32), digits.target
    np.savez(folder / "train.npz", X=X[:1400], y=y[:1400])
    np.savez(folder / "test.npz", X=X[1400:], y=y[1400:])
    np.savez(folder / "new.npz", X=X[:40, ::-1].copy(), y=np.full(40, 10))
    (folder / "classes.txt").write_text("\n".join([*map(str, range(10)), "new"]) + "\n")
    return folder


def _run(folder, name: str, root: str, options: str = "") -> list[dict]:
    spec = folder / f"{name}.toml"
    spec.write_text(SPEC.format(root=root, options=options))
    ledger = folder / f"{name}-ledger"
    result = CliRunner().invoke(cli, ["run", str(spec), "--ledger", str(ledger)])
    assert result.exit_code == 0, result.output
    return Ledger(ledger).runs()


@pytest.mark.slow
# 22 jobs on two LocalClusters: 5 min here at a load of 10, 11 min at a load far past the cores.
@pytest.mark.timeout(1200)
def test_a_spec_on_s3_urls_gives_the_results_it_gives_on_local_paths(
    folder, s3_endpoint, s3_bucket, monkeypatch
):
    local = folder / "local"
    local.mkdir()
    on_disk = _run(folder, "local", f"{local}/")
    # The endpoint from the spec's [storage_options] only: workers get it with each path.
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    options = f'[storage_options]\nendpoint_url = "{s3_endpoint}"\n'
    on_s3 = _run(folder, "s3", f"{s3_bucket}/", options)
    assert [r["outcome"] for r in on_s3] == ["ok"] * 11
    assert [r["kind"] for r in on_s3] == [r["kind"] for r in on_disk]
    # The record keeps the spec's options; its rerun gives the endpoint as the variable.
    assert on_s3[0]["spec"]["storage_options"] == {"endpoint_url": s3_endpoint}
    shown = CliRunner().invoke(
        cli, ["runs", "show", on_s3[0]["run_id"], "--json", "--ledger", str(folder / "s3-ledger")]
    )
    assert json.loads(shown.stdout)["rerun"].startswith(
        f"AWS_ENDPOINT_URL={s3_endpoint} imgscale ingest "
    )
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)

    def store(name, root):
        return open_store(f"{root}{name}")

    for name in ("digits.zarr", "digits-rff.zarr", "new.zarr"):
        remote, here = store(name, f"{s3_bucket}/"), store(name, f"{local}/")
        np.testing.assert_array_equal(remote.features().compute(), here.features().compute())
        assert remote.rows().equals(here.rows())
        remote.verify()
    remote, here = store("digits-pq.zarr", f"{s3_bucket}/"), store("digits-pq.zarr", f"{local}/")
    np.testing.assert_array_equal(remote.codes().compute(), here.codes().compute())
    np.testing.assert_array_equal(remote.codec.codebook, here.codec.codebook)
    for name in ("ridge.model", "ncm.model", "rff.model", "ncm-new.model"):
        remote, here = models.load(f"{s3_bucket}/{name}")[0], models.load(local / name)[0]
        for key, value in _fitted_arrays(here).items():
            np.testing.assert_allclose(_fitted_arrays(remote)[key], value, rtol=1e-6, err_msg=key)
    evaluated = [r["figures"] for r in (on_disk, on_s3) for r in r if r["kind"] == "evaluate"]
    assert evaluated[0] == evaluated[1] and evaluated[0]["top1_error"] < 0.2
    uploaded = fsspec.filesystem("s3").cat_file(f"{s3_bucket}/predictions.parquet")
    predicted = pq.read_table(io.BytesIO(uploaded))
    assert predicted.num_rows == 397
    assert predicted.equals(pq.read_table(local / "predictions.parquet"))


def _fitted_arrays(model) -> dict[str, np.ndarray]:
    """The fitted arrays (``name_`` attributes) of a model's steps."""
    steps = model.steps if hasattr(model, "steps") else [("model", model)]
    return {
        f"{step}.{name}": np.asarray(value)
        for step, estimator in steps
        for name, value in vars(estimator).items()
        if name.endswith("_") and isinstance(value, np.ndarray)
    }


def test_a_spec_holding_a_secret_is_refused_naming_where_secrets_go(tmp_path):
    spec = tmp_path / "job.toml"
    spec.write_text(
        '[storage_options]\nendpoint_url = "http://127.0.0.1:9000"\nkey = "someone"\n'
        'anon = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"\n\n'
        '[[jobs]]\nkind = "info"\n'
    )
    result = CliRunner().invoke(cli, ["run", str(spec), "--dry-run"])
    assert result.exit_code != 0
    lines = result.output.splitlines()
    assert f"imgscale: error: {spec}: key 'storage_options.key' holds a secret; secrets go in " in (
        "\n".join(lines)
    )
    assert any("storage_options.anon' has a value that looks like an AWS credential" in line
               for line in lines)  # fmt: skip
    refusals = [line for line in lines if "holds a secret" in line or "AWS credential" in line]
    assert len(refusals) == 2 and all("secrets go in the environment" in r for r in refusals)
    assert not (tmp_path / "ledger").exists()


def test_an_output_only_written_locally_refuses_a_url_before_any_work():
    result = CliRunner().invoke(
        cli, ["plot", "s3://bucket/m.model", "s3://bucket/s.zarr", "s3://bucket/plot.png"]
    )
    assert result.exit_code == 2
    assert "OUT s3://bucket/plot.png: expected a local path, not a URL" in result.output
