"""A password in a URL's user info (``scheme://user:password@host``) is a secret: a spec holding
one is refused like any other secret, and a command given one on its command line records the URL
in the run ledger with the password replaced (it used to be stored there in plain text)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from click.testing import CliRunner

from imgscale.jobs.cli import cli
from imgscale.storage import Ledger

PASSWORD = "s3cr3t-Pa55"


def _ledger_bytes(ledger: Path) -> bytes:
    """Every byte of every object in the ledger folder, where a value could linger."""
    return b"".join(p.read_bytes() for p in ledger.rglob("*") if p.is_file())


def test_a_spec_with_a_password_in_a_url_is_refused_and_nothing_recorded(tmp_path: Path) -> None:
    np.savez(tmp_path / "rows.npz", X=np.ones((4, 2), np.float32), y=np.arange(4) % 2)
    spec = tmp_path / "job.toml"
    spec.write_text(
        'kind = "ingest"\nsrc = "rows.npz"\nstore = "s.zarr"\n'
        f'[storage_options]\nendpoint_url = "http://minio:{PASSWORD}@127.0.0.1:9000"\n'
    )
    ledger = tmp_path / "ledger"
    result = CliRunner().invoke(cli, ["run", str(spec), "--ledger", str(ledger)])
    assert result.exit_code != 0
    assert (
        f"imgscale: error: {spec}: key 'storage_options.endpoint_url' has a URL with a password "
        "(user:password@); secrets go in the environment"
    ) in result.stderr
    assert not (tmp_path / "s.zarr").exists()
    assert PASSWORD.encode() not in (_ledger_bytes(ledger) if ledger.exists() else b"")


def test_a_password_in_a_job_value_is_refused_too(tmp_path: Path) -> None:
    spec = tmp_path / "job.toml"
    spec.write_text(
        f'kind = "ingest"\nsrc = "https://reader:{PASSWORD}@example.org/x.npz"\nstore = "s.zarr"\n'
    )
    result = CliRunner().invoke(cli, ["run", str(spec), "--dry-run"])
    assert result.exit_code != 0
    assert "key 'src' has a URL with a password (user:password@)" in result.stderr


def test_the_ledger_keeps_a_command_line_url_without_its_password(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    src = f"http://reader:{PASSWORD}@127.0.0.1:9/rows.npz"
    result = CliRunner().invoke(
        cli, ["ingest", src, str(tmp_path / "s.zarr"), "--ledger", str(ledger)]
    )
    assert result.exit_code != 0
    (record,) = Ledger(ledger).runs()
    assert record["outcome"] == "failed"
    assert "http://reader:***@127.0.0.1:9/rows.npz" in record["command"]
    assert record["spec"]["src"] == "http://reader:***@127.0.0.1:9/rows.npz"
    assert PASSWORD.encode() not in _ledger_bytes(ledger)
