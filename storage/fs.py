"""Where a store or a model lives: a local POSIX path, or an object-store URL read through fsspec.

A local path (or a ``file://`` URL) becomes a `pathlib.Path`, and the commit protocol uses what a
POSIX file system gives: rename replaces a file atomically and flock excludes writers. Any other
URL (``s3://``, ``gs://``, ``memory://``) becomes a `upath.UPath`, which has the same path API
(``/``, ``exists``, ``glob``, ``read_bytes``...) and carries the fsspec ``storage_options``, so a
path pickled to a worker on another host reaches the same bucket with the same options (the
credentials come from that host's environment). On an object store a PUT replaces an object
atomically but nothing renames a folder and nothing locks: `storage.commit_log` holds the commit
protocol there.

The endpoint of an S3-compatible server comes from the standard ``AWS_ENDPOINT_URL`` variable,
which botocore reads, or from ``storage_options={"endpoint_url": ...}`` (given to `location`, or
for a whole job through `use_storage_options`: a spec's ``[storage_options]`` table).
Credentials never travel in the options: each process reads its own environment.
"""

from __future__ import annotations

import contextlib
import contextvars
import io
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from upath import UPath

from imgscale.storage.errors import StoreError

if TYPE_CHECKING:  # pyarrow is imported by the functions that read or write parquet
    import pyarrow as pa

# A store's or model's location: local, or on an object store.
Location: TypeAlias = Path | UPath
# Object stores whose fsspec implementation creates an object only if its key is free in one
# request the server decides (S3's If-None-Match: *, GCS's ifGenerationMatch=0; memory:// is one
# process). fsspec's fallback elsewhere checks, then writes: two writers could both create.
ATOMIC_CREATE = ("s3", "s3a", "gs", "gcs", "memory")


def is_url(path: str | os.PathLike) -> bool:
    """Whether ``path`` names an object-store location (a URL other than ``file://``)."""
    if isinstance(path, UPath):
        return path.protocol not in ("", "file", "local")
    return "://" in str(path) and not str(path).startswith("file://")


_default_options: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "storage_options", default=None
)


@contextlib.contextmanager
def use_storage_options(options: dict[str, Any]) -> Iterator[None]:
    """Within the block, a URL given to `location` without options gets ``options``."""
    token = _default_options.set(dict(options))
    try:
        yield
    finally:
        _default_options.reset(token)


def current_storage_options() -> dict[str, Any]:
    """The options of the enclosing `use_storage_options` (none outside one)."""
    return dict(_default_options.get() or {})


def location(path: str | os.PathLike, storage_options: dict[str, Any] | None = None) -> Location:
    """``path`` as a `Path` (local paths and ``file://`` URLs) or a `UPath` (any other URL,
    with ``storage_options``, by default those of the enclosing `use_storage_options`)."""
    if isinstance(path, UPath) and is_url(path):
        return path if storage_options is None else UPath(str(path), **storage_options)
    text = os.fspath(path) if not isinstance(path, UPath) else str(path)
    if text.startswith("file://"):
        return Path(text.removeprefix("file://"))
    if is_url(text):
        options = (_default_options.get() or {}) if storage_options is None else storage_options
        return UPath(text, **options)
    return Path(text)


@contextlib.contextmanager
def access_checked(path: Location) -> Iterator[None]:
    """Turn an object store's refusal of ``path`` (fsspec's PermissionError, "Forbidden") into a
    StoreError that names the URL, the endpoint and where the credentials came from: a wrong key
    in the environment and a stale profile look the same from the server's one word."""
    try:
        yield
    except PermissionError as exc:
        if is_local(path):
            raise
        cause = f" ({exc.__cause__})" if exc.__cause__ is not None else f" ({exc})"
        raise StoreError(
            f"{path}: access denied by {_endpoint(path)}{cause}; credentials: "
            f"{credential_source(path)}"
        ) from exc


def _endpoint(path: UPath) -> str:
    options = path.storage_options
    endpoint = options.get("endpoint_url") or options.get("client_kwargs", {}).get("endpoint_url")
    return endpoint or os.environ.get("AWS_ENDPOINT_URL") or "the object store"


# botocore's names for where it found credentials, as a user would look for them.
_CREDENTIAL_METHODS = {
    "env": "the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)",
    "shared-credentials-file": "profile {profile!r} of the credentials file {credentials}",
    "config-file": "profile {profile!r} of the config file {config}",
    "iam-role": "the instance's IAM role (instance metadata)",
    "container-role": "the container's role (ECS/EKS credentials endpoint)",
    "assume-role": "a role assumed by profile {profile!r} of {config}",
    "assume-role-with-web-identity": "a web identity token (AWS_WEB_IDENTITY_TOKEN_FILE)",
    "sso": "SSO of profile {profile!r} of {config}",
}


def credential_source(path: Location) -> str:
    """Where the credentials for ``path`` come from: its storage options, or where botocore
    found them (environment, a profile of the credentials or config file, a role), or none."""
    options = path.storage_options if isinstance(path, UPath) else {}
    if options.get("key") or options.get("secret"):
        return "the storage options (key, secret)"
    if options.get("anon"):
        return "none (anonymous access, anon=True)"
    if path.protocol not in ("s3", "s3a"):
        return f"those of the {path.protocol}:// file system's own configuration"
    import botocore.session

    profile = options.get("profile") or os.environ.get("AWS_PROFILE") or "default"
    session = botocore.session.Session(profile=profile if options.get("profile") else None)
    try:
        credentials = session.get_credentials()
    except Exception as exc:  # a broken profile or config file: say so, it is the answer
        return f"none usable ({type(exc).__name__}: {exc})"
    if credentials is None:
        return "none found (environment, credentials and config files, instance role)"
    files = {
        "profile": profile,
        "credentials": os.path.expanduser(session.get_config_variable("credentials_file")),
        "config": os.path.expanduser(session.get_config_variable("config_file")),
    }
    method = _CREDENTIAL_METHODS.get(credentials.method, f"botocore's {credentials.method!r}")
    key = credentials.access_key or ""
    return method.format(**files) + (f", access key {key[:4]}…" if key else "")


def is_local(path: Location) -> bool:
    return not is_url(path)


def absolute(path: Location) -> Location:
    """``path`` made absolute (a URL is already): workers do not share the client's folder."""
    return path.absolute() if is_local(path) else path


def zarr_target(path: Location) -> dict[str, Any]:
    """The ``store=`` (and ``storage_options=``) arguments zarr's open and create functions take
    for ``path``: a folder for a local path, a URL opened as zarr's ``FsspecStore`` otherwise."""
    if is_local(path):
        return {"store": str(path)}
    return {"store": str(path), "storage_options": dict(path.storage_options)}


def read_table(file: Location, **options: Any) -> pa.Table:
    """A parquet file, local or remote (fetched whole: rows files and class tables are small);
    ``options`` are `pyarrow.parquet.read_table`'s (``columns``, ``read_dictionary``...)."""
    import pyarrow.parquet as pq

    if is_local(file):
        return pq.read_table(file, **options)
    return pq.read_table(io.BytesIO(file.read_bytes()), **options)


def read_parquet_schema(file: Location) -> pa.Schema:
    """A parquet file's schema, from its footer (a remote file is fetched whole)."""
    import pyarrow.parquet as pq

    if is_local(file):
        return pq.read_schema(file)
    return pq.read_schema(io.BytesIO(file.read_bytes()))


def table_bytes(table: pa.Table, **options: Any) -> bytes:
    """``table`` as parquet file bytes; ``options`` as `pyarrow.parquet.write_table`'s."""
    import pyarrow.parquet as pq

    buffer = io.BytesIO()
    pq.write_table(table, buffer, **options)
    return buffer.getvalue()


def put_object(file: UPath, data: bytes, *, create_only: bool = False) -> None:
    """Write one object in one PUT: a reader sees the old object or the new one, never half.

    ``create_only`` sends ``If-None-Match: *`` (fsspec's ``mode="create"``): FileExistsError if
    the object exists, decided by the server, so of two concurrent creators exactly one succeeds.
    StoreError for an object store without such a create (see `ATOMIC_CREATE`).
    """
    if create_only and file.protocol not in ATOMIC_CREATE:
        raise StoreError(
            f"{file}: {file.protocol}:// has no atomic create-only write, which the commits of "
            f"stores need; expected one of {', '.join(p + '://' for p in ATOMIC_CREATE)}"
        )
    file.fs.pipe_file(file.path, data, mode="create" if create_only else "overwrite")


def remove_tree(path: Location, *, keep: str | None = None) -> None:
    """Delete ``path`` and everything under it (on an object store, except the objects under
    ``path / keep``); missing is fine."""
    if is_local(path):
        shutil.rmtree(path, ignore_errors=True)
        return
    kept = f"{path.path.rstrip('/')}/{keep}/" if keep else None
    found = path.fs.find(path.path)
    doomed = [key for key in found if kept is None or not key.startswith(kept)]
    if doomed:
        path.fs.rm(doomed)


def tree_bytes(path: Location) -> int:
    """Bytes of every file under ``path``."""
    if is_local(path):
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return int(path.fs.du(path.path, total=True))


def has_entries(path: Location) -> bool:
    """Whether ``path`` is a file, or a folder (prefix) holding anything."""
    if is_local(path):
        return path.exists() and (not path.is_dir() or any(path.iterdir()))
    return path.exists()


def publish_file(finished: Path, target: str | os.PathLike) -> None:
    """Put the finished local file ``finished`` at ``target`` whole: renamed onto a local target
    (``finished`` must be on the same disk), uploaded to an object store in one PUT (or one
    multipart upload, which also appears at once) and then deleted. A reader sees the old file
    or the new one."""
    target = location(target)
    if is_local(target):
        os.replace(finished, target)
        return
    target.fs.put_file(str(finished), target.path)
    finished.unlink()
