"""The results table: one row per measured figure, saved as parquet.

Columns: ``benchmark``, ``name``, ``value``, ``unit``, ``peer_value``, ``ratio`` (ours over the
peer or limit), ``scale``, ``machine``, ``imgscale_version``, ``commit``, ``time`` (UTC, ISO 8601),
then ``peer`` (what the peer or limit is), ``command`` (what regenerates the row) and ``detail``
(the record's other keys as JSON: sizes, spreads, settings).
"""

from __future__ import annotations

import json
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA = pa.schema(
    [
        ("benchmark", pa.string()),
        ("name", pa.string()),
        ("value", pa.float64()),
        ("unit", pa.string()),
        ("peer_value", pa.float64()),
        ("ratio", pa.float64()),
        ("scale", pa.string()),
        ("machine", pa.string()),
        ("imgscale_version", pa.string()),
        ("commit", pa.string()),
        ("time", pa.string()),
        ("peer", pa.string()),
        ("command", pa.string()),
        ("detail", pa.string()),
    ]
)
_OWN_KEYS = {"name", "value", "unit", "peer_value", "ratio", "peer"}


def provenance() -> tuple[str, str]:
    """(imgscale's installed version, the checkout's commit or "" outside a git checkout)."""
    try:
        installed = version("imgscale")
    except PackageNotFoundError:
        installed = ""
    import imgscale

    source = Path(imgscale.__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(source), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, check=True, timeout=10,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return installed, commit


def rows(records: list[dict], **columns: str) -> list[dict]:
    """Benchmark records as table rows; ``columns`` fills benchmark, scale, machine, …, command."""
    out = []
    for r in records:
        detail = {k: v for k, v in r.items() if k not in _OWN_KEYS}
        out.append(
            {
                **columns,
                "name": r["name"],
                "value": float(r["value"]),
                "unit": r["unit"],
                "peer_value": r.get("peer_value"),
                "ratio": r.get("ratio"),
                "peer": r.get("peer", ""),
                "detail": json.dumps(detail, default=str, sort_keys=True),
            }
        )
    return out


def write(path: Path, table_rows: list[dict]) -> None:
    """Save rows as the parquet table (written to a temporary name, then renamed)."""
    table = pa.Table.from_pylist(
        [{name: row.get(name) for name in SCHEMA.names} for row in table_rows], schema=SCHEMA
    )
    partial = path.with_name(path.name + ".partial")
    pq.write_table(table, partial)
    partial.replace(path)


def read(path: Path) -> list[dict]:
    """The rows of a results table; a file without the table's columns is refused."""
    table = pq.read_table(path)
    missing = [name for name in SCHEMA.names if name not in table.column_names]
    if missing:
        raise ValueError(f"{path}: not a results table (missing columns {', '.join(missing)})")
    return table.select(SCHEMA.names).to_pylist()


def merge(old: list[dict], new: list[dict]) -> list[dict]:
    """``old`` with every (benchmark, name, scale) that ``new`` measured replaced by ``new``'s."""
    fresh = {(r["benchmark"], r["name"], r["scale"]) for r in new}
    kept = [r for r in old if (r["benchmark"], r["name"], r["scale"]) not in fresh]
    return kept + new
