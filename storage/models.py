"""Saved models: numeric arrays in a zarr group, everything else as JSON attributes.

A model is an ordered list of steps (one estimator, or the steps of a pipeline). Each step is
stored as its class name, its constructor parameters and its fitted state; loading reads arrays and
JSON and never executes anything from the file. Mapping class names back to classes is the caller's
job (``jobs.models``), so this module stays free of ``pipeline`` imports.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import dask.array as da
import numpy as np
import zarr

from imgscale.storage.errors import StoreError

MODEL_SCHEMA_VERSION = 1


@dataclass
class SavedStep:
    """One estimator as stored: class name, constructor parameters, fitted state."""

    kind: str
    params: dict
    arrays: dict[str, np.ndarray | da.Array] = field(default_factory=dict)
    scalars: dict = field(default_factory=dict)


def save_model(path: str | os.PathLike, steps: list[SavedStep], provenance: dict) -> None:
    """Write ``steps`` to a new zarr group at ``path``, atomically (temp dir, then rename)."""
    path = Path(path)
    if path.exists():
        raise StoreError(f"model {path}: already exists; expected a new path")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        root = zarr.open_group(tmp, mode="w", zarr_format=3)
        for i, step in enumerate(steps):
            group = root.create_group(f"step{i}")
            for name, value in step.arrays.items():
                _write_array(group, name, value)
        root.attrs["imgscale_model"] = {
            "schema_version": MODEL_SCHEMA_VERSION,
            "steps": [
                {"kind": s.kind, "params": _jsonable(s.params), "scalars": _jsonable(s.scalars)}
                for s in steps
            ],
            "provenance": _jsonable(provenance),
        }
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _write_array(group: zarr.Group, name: str, value: np.ndarray | da.Array) -> None:
    """A numpy array is written by this process; a dask array's blocks by the workers holding
    them (e.g. a kNN's reference rows), so no n-sized array passes through the client."""
    if not isinstance(value, da.Array):
        group.create_array(name, data=np.ascontiguousarray(value))
        return
    rows = max(value.chunks[0], default=0) or 1
    chunks = (rows, *value.shape[1:])
    array = group.create_array(name, shape=value.shape, dtype=value.dtype, chunks=chunks)
    # One writer per zarr chunk: the dask blocks are cut on the zarr chunk boundaries.
    da.store(value.rechunk(chunks), array, lock=False)


def load_model(path: str | os.PathLike) -> tuple[list[SavedStep], dict]:
    """Read the steps and provenance written by :func:`save_model`."""
    path = Path(path)
    try:
        root = zarr.open_group(path, mode="r", zarr_format=3)
        meta = root.attrs["imgscale_model"]
    except (FileNotFoundError, KeyError, ValueError) as exc:
        raise StoreError(f"model {path}: not an imgscale model ({exc})") from exc
    if meta.get("schema_version") != MODEL_SCHEMA_VERSION:
        raise StoreError(
            f"model {path}: schema version {meta.get('schema_version')!r}; "
            f"expected {MODEL_SCHEMA_VERSION}"
        )
    steps = []
    for i, step in enumerate(meta["steps"]):
        group = root[f"step{i}"]
        arrays = {name: np.asarray(array[...]) for name, array in group.arrays()}
        steps.append(SavedStep(step["kind"], step["params"], arrays, step["scalars"]))
    return steps, meta["provenance"]


def _jsonable(value):
    """Round-trip ``value`` through JSON so tuples become lists and numpy scalars plain numbers."""
    return json.loads(json.dumps(value, default=_json_default))


def _json_default(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
