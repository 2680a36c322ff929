"""Exclusive file locks (flock): one writer per store, one creator per path, one scheduled run.

flock (not a lock file's existence) because the kernel drops the lock when the last holder of
the open file dies, so no stale-lock recovery is ever needed. Locks belong to the open file, so a
second lock on the same file in the same process blocks too: don't nest them.

A store on an object store has no flock: its writers claim the next commit instead
(`storage.commit_log.CommitClaim`), which `writer_lock` returns for such a store.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from imgscale.storage.commit_log import CommitClaim
from imgscale.storage.fs import Location, is_local
from imgscale.storage.layout import LOCK_FILE, PARTIAL_SUFFIX


class FileLock:
    """Exclusive ``flock`` on ``file`` (created if missing), held from `acquire` to `release`.

    ``fileno`` is the locked descriptor while held: a child process started with it in
    ``pass_fds`` holds the lock too, for as long as it runs.
    """

    def __init__(self, file: str | os.PathLike) -> None:
        self.file = Path(file)
        self.fileno: int | None = None

    def acquire(self, *, blocking: bool = True) -> bool:
        """Take the lock, waiting for it unless ``blocking`` is False; whether it was taken.

        A lock taken on a file that was meanwhile swapped for another at its path (a store
        compacted while this waited: `storage.compact`) is let go and taken on the new file."""
        while True:
            fd = os.open(self.file, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB)
                if _same_file(fd, self.file):
                    self.fileno = fd
                    return True
            except BlockingIOError:
                os.close(fd)
                return False
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)

    def release(self) -> None:
        if self.fileno is not None:
            os.close(self.fileno)  # closing the descriptor releases the flock
            self.fileno = None

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _same_file(fd: int, file: Path) -> bool:
    """Whether ``file`` is still the file open at ``fd``."""
    try:
        return os.path.samestat(os.fstat(fd), os.stat(file))
    except FileNotFoundError:
        return False


def writer_lock(path: Location) -> FileLock | CommitClaim:
    """The writer lock of the store at ``path``: a flock on ``<store>/.lock``, or on an object
    store the claim on its next commit."""
    if is_local(path):
        return FileLock(Path(path) / LOCK_FILE)
    return CommitClaim(path)


def remove_partials(path: Location) -> int:
    """Delete tmp files a killed writer left; only safe while holding the lock. (An object
    store has none: every object is written by one PUT.)"""
    if not is_local(path):
        return 0
    removed = 0
    for tmp in path.rglob(f"*{PARTIAL_SUFFIX}"):
        tmp.unlink(missing_ok=True)
        removed += 1
    return removed
