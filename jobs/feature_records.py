"""The record a store keeps of what described its rows (`imgscale.jobs.features` writes it),
compared and named without importing any descriptor: a model compares the record of the store
it learned from with the record of a store it is applied to."""

from __future__ import annotations

import json
from typing import Any


def same_features(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two records describe rows the same way: names, parameters, widths and model
    bytes, not the path a model was read from."""
    return _comparable(a) == _comparable(b)


def described_by(record: dict[str, Any]) -> str:
    """The descriptors as one phrase, a model's with the start of its sha256 (a vocabulary
    fitted again at the same path is another vocabulary)."""
    return ",".join(
        spelling(e) + (f" (sha256 {e['model_sha256'][:12]}…)" if "model_sha256" in e else "")
        for e in record["features"]
    )


def spelling(entry: dict[str, Any]) -> str:
    """One descriptor as ``--features`` spells it: ``gist``, ``fisher:VOCAB.model``."""
    return f"{entry['name']}:{entry['model']}" if "model" in entry else entry["name"]


def _comparable(record: dict[str, Any]) -> list[tuple]:
    return [
        (e["name"], json.dumps(e.get("params"), sort_keys=True), e["dim"], e.get("model_sha256"))
        for e in record.get("features", [])
    ]
