"""The results table: one row per measured figure, saved as parquet.

Columns: ``benchmark``, ``name``, ``value``, ``unit``, ``peer_value``, ``ratio`` (ours over the
peer or limit), ``scale``, ``machine``, ``imgscale_version``, ``commit``, ``time`` (UTC, ISO 8601),
then ``peer`` (what the peer or limit is), ``command`` (what regenerates the row) and ``detail``
(the record's other keys as JSON: sizes, spreads, settings).

A figure measured several times is the median of its ``repeats`` repetitions, with ``value_min``
and ``value_max`` its extremes and ``ratio_min`` and ``ratio_max`` those of its per-repetition
ratios; a figure measured once has ``repeats`` 1 and extremes equal to its value. The suite adds
what it knows of the run of the benchmark: ``noisy`` (its calibration moved or other
processes kept the cores busy, :mod:`imgscale.bench.calibration`), ``load_max``,
``calibration_drift``, ``other_cores``, ``code_hash`` (the measured code's hash,
:mod:`imgscale.bench.staleness`) and ``gemm_gflops`` (the host's GEMM rate in the calibrations:
the same cores, memory and CPU name can be hosts of different speed). A table written before
these columns existed reads with each figure measured once and the run's conditions unknown
(None).
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
        ("value_min", pa.float64()),
        ("value_max", pa.float64()),
        ("repeats", pa.int64()),
        ("ratio_min", pa.float64()),
        ("ratio_max", pa.float64()),
        ("noisy", pa.bool_()),
        ("load_max", pa.float64()),
        ("calibration_drift", pa.float64()),
        ("code_hash", pa.string()),
        ("other_cores", pa.float64()),
        ("gemm_gflops", pa.float64()),
    ]
)
# The columns a table written before figures had repetitions lacks; read() fills them.
ADDED_COLUMNS = SCHEMA.names[SCHEMA.get_field_index("value_min") :]
_SPREAD_KEYS = {"value_min", "value_max", "repeats", "ratio_min", "ratio_max"}
_OWN_KEYS = {"name", "value", "unit", "peer_value", "ratio", "peer", *_SPREAD_KEYS}


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


def rows(records: list[dict], **columns: object) -> list[dict]:
    """Benchmark records as table rows; ``columns`` fills benchmark, scale, machine, …, command
    and the run's conditions (noisy, load_max, calibration_drift, other_cores, code_hash,
    gemm_gflops). A record without repetitions is a figure measured once."""
    out = []
    for r in records:
        detail = {k: v for k, v in r.items() if k not in _OWN_KEYS}
        row = {
            **columns,
            "name": r["name"],
            "value": float(r["value"]),
            "unit": r["unit"],
            "peer_value": r.get("peer_value"),
            "ratio": r.get("ratio"),
            "peer": r.get("peer", ""),
            "detail": json.dumps(detail, default=str, sort_keys=True),
            **{key: r[key] for key in _SPREAD_KEYS if r.get(key) is not None},
        }
        out.append(_measured_once_unless_said(row))
    return out


def _measured_once_unless_said(row: dict) -> dict:
    """``row`` with the spread of a figure measured once where it gives none."""
    if row.get("repeats") is None:
        row["repeats"] = 1
    for low, high, middle in (
        ("value_min", "value_max", "value"),
        ("ratio_min", "ratio_max", "ratio"),
    ):
        if row.get(low) is None or row.get(high) is None:
            row[low] = row[high] = row.get(middle)
    return row


def write(path: Path, table_rows: list[dict]) -> None:
    """Save rows as the parquet table (written to a temporary name, then renamed)."""
    table = pa.Table.from_pylist(
        [{name: row.get(name) for name in SCHEMA.names} for row in table_rows], schema=SCHEMA
    )
    partial = path.with_name(path.name + ".partial")
    pq.write_table(table, partial)
    partial.replace(path)


def read(path: Path) -> list[dict]:
    """The rows of a results table; a file without the table's columns is refused. A table
    written before :data:`ADDED_COLUMNS` existed reads as figures measured once, in runs whose
    conditions are unknown."""
    table = pq.read_table(path)
    missing = [name for name in SCHEMA.names if name not in table.column_names]
    if [name for name in missing if name not in ADDED_COLUMNS]:
        raise ValueError(f"{path}: not a results table (missing columns {', '.join(missing)})")
    present = [name for name in SCHEMA.names if name in table.column_names]
    return [
        _measured_once_unless_said({name: row.get(name) for name in SCHEMA.names})
        for row in table.select(present).to_pylist()
    ]


def merge(old: list[dict], new: list[dict]) -> list[dict]:
    """``old`` with every (benchmark, name, scale) that ``new`` measured replaced by ``new``'s;
    where ``new`` measured it only in a noisy run, ``old``'s quiet figure is kept beside it, so
    the documents still have a quiet figure to show."""
    measured = {_figure(r) for r in new}
    quietly = {_figure(r) for r in new if not r.get("noisy")}
    kept = [
        r
        for r in old
        if _figure(r) not in measured or (_figure(r) not in quietly and not r.get("noisy"))
    ]
    return kept + new


def _figure(row: dict) -> tuple[str, str, str]:
    return row["benchmark"], row["name"], row["scale"]
