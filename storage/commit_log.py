"""The commit protocol of a store on an object store, where nothing renames and nothing locks.

On a local disk a store's commit record lives in its ``zarr.json``, replaced by rename, and one
flock excludes writers (storage/layout.py, storage/lock.py). An object store has neither, but it
has conditional writes: a PUT with ``If-None-Match: *`` creates an object only if its key is
free, decided by the server, so of two concurrent creators exactly one succeeds. The protocol::

    commits/{n:012d}.json         commit n: the whole commit record, created create-only
    claims/{n:012d}-{a:03d}.json  a writer's claim on commit n (attempt a), created create-only

**All-or-nothing.** A writer writes its row chunks and rows files first, at keys no committed
record names, then the new record as the single object ``commits/{n+1}``. Readers list
``commits/`` and take the highest number, whose object is complete because a PUT is atomic: they
see commit n or commit n+1, never a mixture. A writer killed anywhere before that PUT leaves
commit n the latest; what it wrote past commit n is removed by the next writer (as on a disk).

**One writer at a time.** Before writing anything, a writer creates ``claims/{n+1}-000`` (create-
only): of writers that read the same commit n, one creates it and the others are refused with one
line naming the holder. No writer waits on an object store. A claim holds the holder's host, pid
and a heartbeat the holder rewrites every few seconds; a claim whose holder is gone (same host and
its pid ended, or a heartbeat older than `STALE_AFTER_SECONDS`) is taken over by creating the next
attempt ``claims/{n+1}-{a+1}``, again create-only, so of two writers taking over one wins. The
commit itself is created create-only too, so even a holder that lost its claim unawares (a
heartbeat stalled past the limit) can never replace a commit; before that PUT it also checks that
no later attempt took its claim. The holder deletes its claim when it is done, and the records
older than the last `KEEP_COMMITS` (a reader that listed before the deletion reads again).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from upath import UPath

from imgscale.storage.errors import StoreError
from imgscale.storage.fs import put_object
from imgscale.storage.ledger import holder_gone, process_identity

COMMITS = "commits"
CLAIMS = "claims"
# A claim whose heartbeat is older than this is taken over even where its pid cannot be checked.
STALE_AFTER_SECONDS = 60.0
HEARTBEAT_SECONDS = 5.0
# Commit records kept: each read lists them, so the listing stays one short page.
KEEP_COMMITS = 16


def commit_file(path: UPath, n: int) -> UPath:
    return path / COMMITS / f"{n:012d}.json"


def latest_commit(path: UPath) -> int | None:
    """The highest commit number of the store at ``path``, or None if it has none."""
    numbers = _numbers(path / COMMITS, ".json")
    return max(numbers) if numbers else None


def read_commit(path: UPath) -> dict[str, Any]:
    """The latest commit record, with its number under ``"commit"``; StoreError if none."""
    for _ in range(10):  # a record pruned between listing and reading: list again
        n = latest_commit(path)
        if n is None:
            raise StoreError(
                f"store {path}: no {COMMITS}/ record; expected an imgscale feature store "
                "(one being created, or a creation that was killed, has none yet)"
            )
        file = commit_file(path, n)
        try:
            text = file.read_bytes()
            break
        except FileNotFoundError:
            continue
    else:
        raise StoreError(f"store {path}: commits are pruned faster than they can be read")
    try:
        record = json.loads(text)
    except ValueError as e:
        raise StoreError(f"{file}: not valid JSON ({e})") from e
    if not isinstance(record, dict):
        raise StoreError(f"{file}: a {type(record).__name__}; expected the commit record object")
    record["commit"] = n
    return record


def write_commit(path: UPath, record: dict[str, Any]) -> None:
    """Create the commit that follows ``record["commit"]`` (0 for a record without one).

    Create-only: StoreError if another writer committed that number first, and nothing changes.
    """
    n = record.get("commit", -1) + 1
    claim = _held.get(str(path))
    if claim is not None:
        claim.check_still_held(n)
    body = {**record, "commit": n}
    try:
        put_object(commit_file(path, n), json.dumps(body).encode(), create_only=True)
    except FileExistsError:
        raise StoreError(
            f"store {path}: commit {n} was made by another writer first; this writer's rows "
            "were not committed (run it again)"
        ) from None
    record["commit"] = n
    for old in _numbers(path / COMMITS, ".json"):
        if old <= n - KEEP_COMMITS:
            _delete(commit_file(path, old))


# The claim each store's writer in this process holds, by store URL (checked before a commit).
_held: dict[str, CommitClaim] = {}


class CommitClaim:
    """The object-store writer lock of the store at ``path``: a claim on its next commit.

    Same interface as `storage.lock.FileLock` except that it never waits: `acquire` raises a
    StoreError naming the holder if another live writer holds the claim.
    """

    def __init__(self, path: UPath) -> None:
        self.path = path
        self.file: UPath | None = None
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    def acquire(self, *, blocking: bool = True) -> bool:
        for _ in range(100):  # a commit landing between listing and claiming: claim the next
            n = latest_commit(self.path)
            target = 0 if n is None else n + 1
            if self._claim(target):
                if latest_commit(self.path) == n:
                    return True
                self.release()
        raise StoreError(f"store {self.path}: commits keep landing; could not claim the next one")

    def _claim(self, n: int) -> bool:
        """Create the claim on commit ``n``; False if commit ``n`` exists meanwhile."""
        folder = self.path / CLAIMS
        attempts = sorted(_attempts(folder, n))
        attempt = 0
        if attempts:
            last = attempts[-1]
            holder = _read_claim(folder / _claim_name(n, last))
            if holder is not None and not _gone(holder):
                if commit_file(self.path, n).exists():
                    return False
                raise StoreError(
                    f"store {self.path}: another writer is writing commit {n} (host "
                    f"{holder['host']}, pid {holder['pid']}, since {holder['since']}); no "
                    "waiting on an object store: run this again when it has finished"
                )
            attempt = last + 1
        file = folder / _claim_name(n, attempt)
        holder = {**process_identity(), "since": _now_text(), "heartbeat": time.time()}
        try:
            put_object(file, json.dumps(holder).encode(), create_only=True)
        except FileExistsError:
            raise StoreError(
                f"store {self.path}: another writer claimed commit {n} at the same moment; "
                "no waiting on an object store: run this again when it has finished"
            ) from None
        for earlier in attempts:  # claims of writers found gone
            _delete(folder / _claim_name(n, earlier))
        self.file, self._n, self._holder = file, n, holder
        _held[str(self.path)] = self
        self._stop.clear()
        self._beat = threading.Thread(target=self._heartbeat, daemon=True)
        self._beat.start()
        return True

    @property
    def commit(self) -> int:
        """The number of the commit this claim is on."""
        return self._n

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_SECONDS):
            self._holder["heartbeat"] = time.time()
            try:
                put_object(self.file, json.dumps(self._holder).encode())
            except OSError:
                pass  # a missed beat; the next one may get through

    def check_still_held(self, n: int) -> None:
        """StoreError unless this claim is on commit ``n`` and no later attempt took it over."""
        attempts = _attempts(self.path / CLAIMS, n)
        mine = int(self.file.name.split("-")[1].split(".")[0])
        if n != self._n or max(attempts, default=-1) != mine:
            raise StoreError(
                f"store {self.path}: this writer's claim on commit {n} was taken over (its "
                f"heartbeat stalled past {STALE_AFTER_SECONDS:g} s); nothing was committed"
            )

    def release(self) -> None:
        if self.file is None:
            return
        self._stop.set()
        if self._beat is not None:
            self._beat.join()
        _delete(self.file)
        _held.pop(str(self.path), None)
        self.file = None

    def __enter__(self) -> CommitClaim:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _claim_name(n: int, attempt: int) -> str:
    return f"{n:012d}-{attempt:03d}.json"


def _attempts(folder: UPath, n: int) -> list[int]:
    prefix = f"{n:012d}-"
    return [
        int(name[len(prefix) : -len(".json")])
        for name in _names(folder)
        if name.startswith(prefix) and name.endswith(".json")
    ]


def _numbers(folder: UPath, suffix: str) -> list[int]:
    return [
        int(name[: -len(suffix)])
        for name in _names(folder)
        if name.endswith(suffix) and name[: -len(suffix)].isdigit()
    ]


def _names(folder: UPath) -> list[str]:
    """Object names directly under ``folder``, listed fresh (no cached listing)."""
    fs = folder.fs
    fs.invalidate_cache(folder.path)
    try:
        return [entry.rsplit("/", 1)[-1] for entry in fs.ls(folder.path, detail=False)]
    except FileNotFoundError:
        return []


def _read_claim(file: UPath) -> dict[str, Any] | None:
    try:
        holder = json.loads(file.read_bytes())
    except FileNotFoundError:
        return None  # released meanwhile
    except ValueError:
        return {}  # unreadable: treated as gone
    return holder if isinstance(holder, dict) else {}


def _gone(holder: dict[str, Any]) -> bool:
    try:
        return holder_gone(
            holder["host"],
            holder["pid"],
            holder.get("pid_started"),
            holder["heartbeat"],
            STALE_AFTER_SECONDS,
        )
    except (KeyError, TypeError):
        return True


def _delete(file: UPath) -> None:
    try:
        file.fs.rm_file(file.path)
    except FileNotFoundError:
        pass


def _now_text() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
