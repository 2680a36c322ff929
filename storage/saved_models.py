"""Saved models: numeric arrays in a zarr group, everything else as JSON attributes.

A model is an ordered list of steps (one estimator, or the steps of a pipeline). Each step is
stored as its class name, its constructor parameters and its fitted state; loading reads arrays and
JSON and never executes anything from the file. Mapping class names back to classes is the caller's
job (``jobs.models``), so this module stays free of ``pipeline`` imports.

A model is verified as it loads: the JSON lists every array with its shape and dtype, every chunk
must be present (zarr would read a missing one as its fill value) and carries a crc32c that is
checked on read, so a damaged model file is refused with one line naming the model and the array
instead of answering with wrong weights. The JSON record itself (parameters, scalars, provenance
with the class names) carries a crc32c of its canonical form, so an edited class name or parameter
is refused too, not scored with.

On an object store (an ``s3://`` URL, storage/fs.py) no folder can be renamed, so a model's
arrays go under a fresh prefix ``{model}/{version}/`` and the model's root ``zarr.json``, which
names that prefix, is written last in one PUT: a reader sees the old model or the new one. With
``replace`` the old prefix is deleted after that PUT, so a load that had already read the old
root may then fail on a missing array (and is refused, never answered from a mixture).
"""

from __future__ import annotations

import ctypes
import glob
import json
import os
import re
import shutil
import socket
import tempfile
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import google_crc32c
import numpy as np
import psutil
import zarr
from zarr.codecs import Crc32cCodec, ZstdCodec

from imgscale.storage.errors import StoreError
from imgscale.storage.fs import (
    Location,
    is_local,
    location,
    put_object,
    remove_tree,
    zarr_target,
)

# Version 3 checksums the JSON record; version 2 lists each step's arrays and checksums every
# chunk; version 1 models did neither.
MODEL_SCHEMA_VERSION = 3
# Schema versions this imgscale reads: version 1 and 2 models load with a warning naming what
# goes unverified.
READABLE_SCHEMA_VERSIONS = (1, 2, MODEL_SCHEMA_VERSION)
# The key of the record's own checksum, over the record's canonical JSON without this key.
RECORD_CHECKSUM = "record_crc32c"
# zstd, then the checksum last so damage to the stored bytes is caught before decompression.
MODEL_CODECS = (ZstdCodec(level=1), Crc32cCodec())
# Every chunk is written, even one equal to the fill value, so a missing chunk means damage.
MODEL_ARRAY_CONFIG = {"write_empty_chunks": True}


@dataclass
class SavedStep:
    """One estimator as stored: class name, constructor parameters, fitted state."""

    kind: str
    params: dict
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    scalars: dict = field(default_factory=dict)


def save_model(
    path: str | os.PathLike, steps: list[SavedStep], provenance: dict, *, replace: bool = False
) -> None:
    """Write ``steps`` to a new zarr group at ``path``, atomically (temp dir, then rename).

    With ``replace``, an existing model at ``path`` is swapped for the new one in one atomic
    exchange of the two directories: a reader opens either the old model or the new, never a
    mixture or nothing, and a failed save leaves the old model untouched. A scratch folder that
    a killed save of the same model left behind is removed first; a write that fails (disk full)
    is one line naming the model and the file.
    """
    path = location(path)
    if not is_local(path):
        _save_on_object_store(path, steps, provenance, replace)
        return
    if path.parent.is_dir():
        _remove_abandoned_scratch(path)
    if path.exists() and not replace:
        raise StoreError(f"model {path}: already exists; expected a new path")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=_scratch_prefix(path), dir=path.parent))
    try:
        root = zarr.open_group(tmp, mode="w", zarr_format=3)
        _write_steps(root, steps)
        root.attrs["imgscale_model"] = _sealed(_model_meta(steps, provenance))
        if path.exists():
            load_model(path)  # only a model is ever replaced
            _exchange(tmp, path)
        else:
            os.replace(tmp, path)
    except OSError as exc:  # disk full, quota, permissions: name the model and the file
        where = exc.filename or tmp
        raise StoreError(
            f"model {path}: could not write {where} ({exc.strerror or exc}); nothing was saved"
        ) from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # the scratch, or the old model after a swap


# A save writes into ".{model}.saving-{pid}-{pid start, ms}-{host hash}-XXXX" beside the model:
# a later save of the same model removes such a folder once its process is gone (killed).
_SCRATCH = re.compile(r"\.saving-(\d+)-(\d+)-([0-9a-f]{8})-[^/]*$")


def _host_hash() -> str:
    return f"{google_crc32c.value(socket.gethostname().encode()):08x}"


def _scratch_prefix(path: Path) -> str:
    started = psutil.Process().create_time()
    return f".{path.name}.saving-{os.getpid()}-{round(started * 1000)}-{_host_hash()}-"


def _remove_abandoned_scratch(path: Path) -> None:
    """Remove scratch folders of saves of ``path`` whose process ended without removing them
    (SIGKILL, power loss): on this host, their pid is gone or belongs to a later process."""
    for scratch in path.parent.glob(f".{glob.escape(path.name)}.saving-*"):
        match = _SCRATCH.search(scratch.name)
        if not match or match.group(3) != _host_hash():
            continue  # another host's save: its process cannot be checked from here
        pid, started_ms = int(match.group(1)), int(match.group(2))
        try:
            alive = round(psutil.Process(pid).create_time() * 1000) == started_ms
        except psutil.Error:
            alive = False
        if not alive:
            shutil.rmtree(scratch, ignore_errors=True)


def _save_on_object_store(
    path: Location, steps: list[SavedStep], provenance: dict, replace: bool
) -> None:
    """`save_model` where nothing renames: arrays under a new prefix, then the root in one PUT."""
    root_file = path / "zarr.json"
    old = None
    if root_file.exists():
        if not replace:
            raise StoreError(f"model {path}: already exists; expected a new path")
        load_model(path)  # only a model is ever replaced
        old = _read_meta(zarr.open_group(**zarr_target(path), mode="r"), path).get("prefix")
    prefix = f"v-{uuid.uuid4().hex}"
    try:
        _write_steps(zarr.open_group(**zarr_target(path / prefix), mode="w"), steps)
        root = {
            "zarr_format": 3,
            "node_type": "group",
            "attributes": {
                "imgscale_model": _sealed({**_model_meta(steps, provenance), "prefix": prefix})
            },
        }
        put_object(root_file, json.dumps(root).encode())
    except BaseException:
        remove_tree(path / prefix)
        raise
    if old:
        remove_tree(path / old)


def _write_steps(root: zarr.Group, steps: list[SavedStep]) -> None:
    for i, step in enumerate(steps):
        group = root.create_group(f"step{i}")
        for name, value in step.arrays.items():
            _write_array(group, name, value)


def _model_meta(steps: list[SavedStep], provenance: dict) -> dict:
    """The model's JSON: each step's class, parameters, scalars and the arrays it must have."""
    return {
        "schema_version": MODEL_SCHEMA_VERSION,
        "steps": [
            {
                "kind": s.kind,
                "params": _jsonable(s.params),
                "scalars": _jsonable(s.scalars),
                "arrays": {
                    name: {"shape": list(value.shape), "dtype": np.dtype(value.dtype).str}
                    for name, value in s.arrays.items()
                },
            }
            for s in steps
        ],
        "provenance": _jsonable(provenance),
    }


def _record_checksum(meta: dict) -> str:
    """crc32c (hex) of the record's canonical JSON: sorted keys, no spaces, without the checksum."""
    record = {key: value for key, value in meta.items() if key != RECORD_CHECKSUM}
    canonical = json.dumps(record, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return f"{google_crc32c.value(canonical.encode()):08x}"


def _sealed(meta: dict) -> dict:
    """``meta`` with its checksum, so a load refuses an edited record."""
    return {**meta, RECORD_CHECKSUM: _record_checksum(meta)}


def _check_record(meta: dict, path: Location) -> None:
    stored = meta.get(RECORD_CHECKSUM)
    if stored is None:
        raise StoreError(
            f"model {path}: zarr.json has no {RECORD_CHECKSUM}; expected one in a schema version "
            f"{MODEL_SCHEMA_VERSION} model (the record was edited or damaged)"
        )
    if stored != _record_checksum(meta):
        raise StoreError(
            f"model {path}: zarr.json record does not match its {RECORD_CHECKSUM} {stored}; "
            "expected the parameters, class names and provenance it was saved with (edited or "
            "damaged)"
        )


# renameat2(2) flags: swap two existing paths atomically (Linux ≥ 3.15).
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _exchange(a: Path, b: Path) -> None:
    """Swap directories ``a`` and ``b`` in one atomic renameat2(RENAME_EXCHANGE)."""
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        raise StoreError(f"model {b}: replacing a model needs renameat2 (Linux, glibc ≥ 2.28)")
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) != 0:
        errno = ctypes.get_errno()
        raise StoreError(f"model {b}: could not swap in {a} ({os.strerror(errno)})")


def _write_array(group: zarr.Group, name: str, value: np.ndarray) -> None:
    group.create_array(
        name,
        data=np.ascontiguousarray(value),
        compressors=MODEL_CODECS,
        config=MODEL_ARRAY_CONFIG,
    )


def load_model(path: str | os.PathLike) -> tuple[list[SavedStep], dict]:
    """Read the steps and provenance written by :func:`save_model`."""
    path = location(path)
    try:
        root = zarr.open_group(**zarr_target(path), mode="r", zarr_format=3)
    except (FileNotFoundError, KeyError, ValueError) as exc:
        raise StoreError(f"model {path}: not an imgscale model ({exc})") from exc
    meta = _read_meta(root, path)
    version = meta.get("schema_version")
    if version not in READABLE_SCHEMA_VERSIONS:
        raise StoreError(
            f"model {path}: schema version {version!r}; expected one of "
            f"{list(READABLE_SCHEMA_VERSIONS)} (train it again with this imgscale)"
        )
    if version == 1:
        warnings.warn(
            f"model {path}: saved without checksums (schema version 1), so it loads unverified; "
            "train it again to have it verified on every load",
            UserWarning,
            stacklevel=2,
        )
    elif version == 2:
        warnings.warn(
            f"model {path}: saved without a record checksum (schema version 2), so its "
            "parameters and class names load unverified; train it again to have them verified",
            UserWarning,
            stacklevel=2,
        )
    else:
        _check_record(meta, path)
    try:
        arrays_root = root[meta["prefix"]] if meta.get("prefix") else root
    except KeyError:
        raise StoreError(
            f"model {path}: arrays folder {meta['prefix']} is missing; expected the arrays its "
            "zarr.json names (replaced while loading? load it again)"
        ) from None
    steps = []
    for i, step in enumerate(meta["steps"]):
        if version == 1:
            arrays = {name: np.asarray(a[...]) for name, a in root[f"step{i}"].arrays()}
        else:
            arrays = {
                name: _read_array(arrays_root, path, f"step{i}/{name}", expected)
                for name, expected in step["arrays"].items()
            }
        steps.append(SavedStep(step["kind"], step["params"], arrays, step["scalars"]))
    return steps, meta["provenance"]


def _read_meta(root: zarr.Group, path: Location) -> dict:
    try:
        return root.attrs["imgscale_model"]
    except KeyError as exc:
        raise StoreError(f"model {path}: not an imgscale model ({exc})") from exc


def _read_array(root: zarr.Group, path: Location, key: str, expected: dict) -> np.ndarray:
    """The array ``key``, after checking it is the one the model's JSON lists: its shape and
    dtype, every chunk present, every chunk's crc32c."""
    shape, dtype = tuple(expected["shape"]), np.dtype(expected["dtype"])
    what = f"model {path}: array {key}"
    try:
        array = root[key]
    except KeyError:
        raise StoreError(f"{what} is missing; expected {dtype} of shape {shape}") from None
    if not isinstance(array, zarr.Array) or array.shape != shape or array.dtype != dtype:
        found = (
            f"{array.dtype} of shape {array.shape}" if isinstance(array, zarr.Array) else "a group"
        )
        raise StoreError(f"{what} is {found}; expected {dtype} of shape {shape}")
    if array.nchunks_initialized != array.nchunks:
        raise StoreError(
            f"{what} has {array.nchunks_initialized} of its {array.nchunks} chunks; expected all "
            "(a chunk file was deleted)"
        )
    try:
        return np.asarray(array[...])
    except Exception as exc:  # zarr raises whatever its codecs raise on damaged bytes
        raise StoreError(
            f"{what} is damaged ({exc}); expected chunks matching their crc32c"
        ) from exc


def _jsonable(value):
    """Round-trip ``value`` through JSON so tuples become lists and numpy scalars plain numbers."""
    return json.loads(json.dumps(value, default=_json_default))


def _json_default(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
