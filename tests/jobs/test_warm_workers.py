"""Descriptors built once per worker process and kept between tasks and between commands on a
long-lived cluster (``imgscale ingest --scheduler``)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from distributed import Client
from PIL import Image

from imgscale.jobs.cli import cli
from imgscale.jobs.features import warm_builds
from tests.jobs.test_features import tiny_network

pytestmark = pytest.mark.slow


def _builds(client: Client) -> dict[str, int]:
    return client.run(warm_builds)


def _ingest(source, store, model, scheduler: str) -> dict:
    result = CliRunner().invoke(
        cli,
        ["ingest", str(source), str(store), "--features", f"onnx:{model}",
         "--scheduler", scheduler, "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_workers_build_a_descriptor_once_and_keep_it_between_commands(tmp_path, scheduler_address):
    model = tmp_path / "tiny.onnx"  # a path no other test uses: a setting no worker holds yet
    tiny_network(model)
    for b, batch in enumerate(("first", "second")):
        for i in range(600):  # three partitions a batch, every image's bytes its own
            folder = tmp_path / batch / f"c{i % 2}"
            folder.mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (16, 16), (i % 256, i // 256, b)).save(folder / f"{batch}{i}.png")
    with Client(scheduler_address, timeout="30s") as client:
        before = _builds(client)
        assert (
            _ingest(tmp_path / "first", tmp_path / "a.zarr", model, scheduler_address)["rows"]
            == 600
        )
        after_first = _builds(client)
        # Sent once to each worker by the command: built at most once there, whatever the
        # number of tasks it ran.
        built = {w: after_first[w] - before.get(w, 0) for w in after_first}
        assert set(built.values()) <= {0, 1} and sum(built.values()) >= 1
        # A second command with the same descriptor, into another store: nothing built again.
        assert (
            _ingest(tmp_path / "second", tmp_path / "b.zarr", model, scheduler_address)["rows"]
            == 600
        )
        assert _builds(client) == after_first
