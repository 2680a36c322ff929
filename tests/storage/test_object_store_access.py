"""An object store refusing the credentials: the one line names the URL, the endpoint and where
the credentials came from (the environment, a profile of the credentials file), not the server's
one word "Forbidden". The server is moto's, a process on 127.0.0.1, checking signatures against
its known keys (``INITIAL_NO_AUTH_ACTION_COUNT=0``), so every key a test gives is refused."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import start_moto_server

IMGSCALE = str(Path(sys.executable).with_name("imgscale"))


@pytest.fixture(scope="module")
def refusing_endpoint(tmp_path_factory):
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "0"}
    server, endpoint = start_moto_server(tmp_path_factory.mktemp("moto") / "moto.log", env)
    try:
        yield endpoint
    finally:
        server.kill()
        server.wait()


def _refused(endpoint: str, env: dict[str, str], *args: str) -> str:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    result = subprocess.run(
        [IMGSCALE, *args],
        env={**clean, "AWS_ENDPOINT_URL": endpoint, "AWS_DEFAULT_REGION": "us-east-1", **env},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_wrong_keys_in_the_environment_are_named_with_the_store_url(refusing_endpoint):
    line = _refused(
        refusing_endpoint,
        {"AWS_ACCESS_KEY_ID": "AKIAWRONG", "AWS_SECRET_ACCESS_KEY": "wrong"},
        "info", "s3://photos-bucket/s.zarr",
    )  # fmt: skip
    assert line.startswith("imgscale: error: s3://photos-bucket/s.zarr: access denied by ")
    assert refusing_endpoint in line and "403" in line
    assert "credentials: the environment (AWS_ACCESS_KEY_ID" in line and "AKIA…" in line
    assert "wrong" not in line  # never the secret, nor more of the key than its start


def test_a_profile_of_the_credentials_file_is_named_with_the_image_source_url(
    refusing_endpoint, tmp_path
):
    credentials = tmp_path / "credentials"
    credentials.write_text("[lab]\naws_access_key_id = AKIALAB\naws_secret_access_key = nope\n")
    env = {"AWS_SHARED_CREDENTIALS_FILE": str(credentials), "AWS_PROFILE": "lab",
           "AWS_CONFIG_FILE": str(tmp_path / "no-config")}  # fmt: skip
    line = _refused(refusing_endpoint, env, "ingest", "s3://photos-bucket/train",
                    str(tmp_path / "s.zarr"), "--features", "color")  # fmt: skip
    assert line.startswith("imgscale: error: s3://photos-bucket/train: access denied by ")
    assert f"credentials: profile 'lab' of the credentials file {credentials}" in line
    assert not (tmp_path / "s.zarr").exists()
