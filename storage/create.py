"""Creating stores: raw and PQ stores share one skeleton, and `create_or_open` makes one
atomically, removing it again if the caller's first write fails.

A store is a zarr group with its row array (float32 features, or uint8 codes beside a codec),
then the commit record, written last: until the record exists, `open_store` refuses the
directory. `create_or_open` builds the store in a scratch directory beside ``path`` and renames
it into place under a creation lock, so a creator killed half-way leaves no half-made store, and
of two concurrent creators one creates and the other opens.

On an object store (storage/fs.py) nothing renames a folder: the creator claims commit 0
(storage/commit_log.py), writes the skeleton in place and creates commit 0 last, so until then
`open_store` refuses the prefix just the same; a second creator is refused while the first one
lives, and a creation that was killed is cleared and made again by the next creator.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import shutil
import socket
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from imgscale.storage.classes import check_class_names
from imgscale.storage.commit_log import CLAIMS, latest_commit
from imgscale.storage.errors import StoreError
from imgscale.storage.fs import (
    Location,
    access_checked,
    has_entries,
    is_local,
    location,
    remove_tree,
    zarr_target,
)
from imgscale.storage.layout import (
    CODED_SCHEMA_VERSION,
    DEFAULT_CODEC,
    SCHEMA_VERSION,
    create_features_array,
    default_rows_per_chunk,
    write_classes,
    write_record,
)
from imgscale.storage.lock import FileLock, writer_lock
from imgscale.storage.row_codecs import RowCodec, coded_record, new_coded_store
from imgscale.storage.store import FeatureStore

SCRATCH_MARK = ".creating-"


def create_store(
    path: str | Path,
    dim: int,
    *,
    class_names: Sequence[str] | None = None,
    rows_per_chunk: int | None = None,
    provenance: dict[str, Any] | None = None,
    codec: str = DEFAULT_CODEC,
    descriptor: dict[str, Any] | None = None,
) -> FeatureStore:
    """Create an empty store at ``path`` (which must not exist or be an empty directory).

    ``codec`` names the chunk compression (see ``storage.layout.CODECS``); the default stores
    chunks uncompressed with a checksum, the fastest to stream. ``descriptor`` (JSON) records
    what computes the rows of a store made from images, so later batches can be checked
    against it (`FeatureStore.descriptor`).
    """
    path = location(path)
    if not isinstance(dim, int | np.integer) or dim < 1:
        raise StoreError(f"store {path}: dim {dim!r}; expected a positive integer")
    dim = int(dim)

    def arrays(rows_per_chunk: int) -> None:
        create_features_array(path, dim, rows_per_chunk, codec)

    record = {"schema_version": SCHEMA_VERSION, "encoding": "raw"}
    if descriptor is not None:
        record["descriptor"] = descriptor
    return _create(path, dim, rows_per_chunk, arrays, record, provenance, class_names)


def create_coded_store(
    path: str | Path,
    codec: RowCodec,
    *,
    class_names: Sequence[str] | None = None,
    rows_per_chunk: int | None = None,
    provenance: dict[str, Any] | None = None,
    source: dict[str, Any] | None = None,
    descriptor: dict[str, Any] | None = None,
) -> FeatureStore:
    """Create an empty coded store at ``path`` holding ``codec``, a `RowCodec` registered under
    its encoding (``imgscale.codecs``); rows are appended as its codes. ``descriptor``: as
    for `create_store`, when the codes are of signatures computed from images.

    ``rows_per_chunk`` defaults to that of a raw store of the same D, so a decoded chunk is the
    usual ~64 MiB of float32 and every estimator sees the same task sizes on either store.
    """
    path = location(path)
    record = {"schema_version": CODED_SCHEMA_VERSION, **coded_record(path, codec, source)}
    if descriptor is not None:
        record["descriptor"] = descriptor

    def arrays(rows_per_chunk: int) -> None:
        new_coded_store(path, codec, rows_per_chunk)

    return _create(path, codec.dim, rows_per_chunk, arrays, record, provenance, class_names)


def _create(
    path: Location,
    dim: int,
    rows_per_chunk: int | None,
    create_arrays: Callable[[int], None],
    record: dict[str, Any],
    provenance: dict[str, Any] | None,
    class_names: Sequence[str] | None,
) -> FeatureStore:
    """The skeleton every store shares: group, row arrays, then the commit record, last."""
    rows_per_chunk = default_rows_per_chunk(dim) if rows_per_chunk is None else int(rows_per_chunk)
    if rows_per_chunk < 1:
        raise StoreError(f"store {path}: rows_per_chunk {rows_per_chunk}; expected ≥ 1")
    names = check_class_names(class_names or [], f"store {path}")
    if not is_local(path):
        with writer_lock(path) as claim:
            if claim.commit != 0:
                raise StoreError(f"store {path}: exists; refusing to overwrite it")
            remove_tree(path, keep=CLAIMS)  # what a killed creation left
            _write_skeleton(path, dim, rows_per_chunk, create_arrays, record, provenance, names)
    else:
        if has_entries(path):
            raise StoreError(
                f"store {path}: path exists and is not empty; refusing to overwrite it"
            )
        path.mkdir(parents=True, exist_ok=True)
        _write_skeleton(path, dim, rows_per_chunk, create_arrays, record, provenance, names)
    return FeatureStore(path)


def _write_skeleton(
    path: Location,
    dim: int,
    rows_per_chunk: int,
    create_arrays: Callable[[int], None],
    record: dict[str, Any],
    provenance: dict[str, Any] | None,
    class_names: list[str],
) -> None:
    zarr.create_group(**zarr_target(path))
    create_arrays(rows_per_chunk)
    record = {
        "committed_rows": 0,
        "dim": dim,
        "dtype": "float32",
        "rows_per_chunk": rows_per_chunk,
        "created": _provenance(provenance),
        "batches": [],
        **record,
    }
    if class_names:
        write_classes(path, class_names, record)
    # The record goes last: until it exists, open_store refuses the directory.
    write_record(path, record)


@contextmanager
def create_or_open(
    path: str | os.PathLike,
    create: Callable[[Path], FeatureStore],
    *,
    exist_ok: bool = True,
) -> Iterator[tuple[FeatureStore, bool]]:
    """Open the store at ``path``, or create it with ``create(scratch)``; yield (store, created).

    ``create`` is `create_store` or `create_coded_store` with their arguments bound; it builds the
    store in a scratch directory that is renamed to ``path`` (missing, or an empty directory)
    once complete, under a lock beside ``path``. A store that exists is opened, or refused
    without ``exist_ok``. If the ``with`` block raises and this call created the store, the store
    is removed again, unless another writer has committed rows to it meanwhile, so a failed
    first write leaves ``path`` as it was (an empty directory given stays).
    """
    path = location(path)
    if not is_local(path):
        with _created_on_object_store(path, create, exist_ok) as opened:
            yield opened
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    created = False
    with _creation_lock(path):
        if _is_store_path(path):
            if not exist_ok:
                raise StoreError(
                    f"store {path}: path exists and is not empty; refusing to overwrite it"
                )
        else:
            pre_existing_dir = path.is_dir()
            for leftover in path.parent.glob(f".{path.name}{SCRATCH_MARK}*"):
                shutil.rmtree(leftover, ignore_errors=True)
            scratch = path.parent / f".{path.name}{SCRATCH_MARK}{uuid.uuid4().hex}"
            try:
                create(scratch)
                os.replace(scratch, path)  # replaces an empty directory too
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            created = True
    store = FeatureStore(path)
    try:
        yield store, created
    except BaseException:
        if created:
            _remove_if_empty(path, pre_existing_dir)
        raise


@contextmanager
def _creation_lock(path: Path) -> Iterator[None]:
    """The lock serialising creators of the store at ``path``: a file beside it, removed by its
    holder before letting go, so none stays beside a store once created. A creator waiting on
    the removed file takes a new one (`FileLock.acquire` checks the file it locked is still the
    one at its path); one killed while holding it leaves a file whose flock went with it, so the
    next creator takes it and removes it."""
    lock = FileLock(path.parent / f".{path.name}.create.lock")
    with lock:
        try:
            yield
        finally:
            lock.file.unlink(missing_ok=True)


@contextmanager
def _created_on_object_store(
    path: Location, create: Callable[[Location], FeatureStore], exist_ok: bool
) -> Iterator[tuple[FeatureStore, bool]]:
    """`create_or_open` on an object store: ``create`` writes in place, commit 0 last."""
    with access_checked(path):
        created = latest_commit(path) is None
    if not created and not exist_ok:
        raise StoreError(f"store {path}: exists; refusing to overwrite it")
    store = create(path) if created else FeatureStore(path)
    try:
        yield store, created
    except BaseException:
        if created:
            _remove_if_empty(path, False)
        raise


def _is_store_path(path: Path) -> bool:
    # An empty directory counts as missing, so callers may pre-create the target.
    return has_entries(path)


def _remove_if_empty(path: Location, keep_directory: bool) -> None:
    with writer_lock(path):
        if FeatureStore(path).committed_rows:
            return
        remove_tree(path, keep=CLAIMS if not is_local(path) else None)
    if keep_directory:
        path.mkdir(exist_ok=True)


def _provenance(extra: dict[str, Any] | None) -> dict[str, Any]:
    try:
        version = importlib.metadata.version("imgscale")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return {
        # Two stores made in the same second on one host are still told apart (a model records
        # the stamp of the store it was trained on; an embedded store, its source's).
        "id": uuid.uuid4().hex,
        "time": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "imgscale_version": version,
        "host": socket.gethostname(),
        **(extra or {}),
    }
