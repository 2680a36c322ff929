"""One writer at a time per store, via flock, so a killed writer never blocks the next one."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from imgscale.storage.layout import LOCK_FILE, PARTIAL_SUFFIX


class StoreLock:
    """Exclusive ``flock`` on ``<store>/.lock``.

    flock (not a lock file's existence) because the kernel drops it when the holder dies, so no
    stale-lock recovery is needed. Locks belong to the open file, so a second StoreLock in the same
    process blocks too: don't nest writers on one store.
    """

    def __init__(self, path: Path) -> None:
        self._file = path / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self._file, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None

    def __enter__(self) -> StoreLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def remove_partials(path: Path) -> int:
    """Delete tmp files a killed writer left; only safe while holding the lock."""
    removed = 0
    for tmp in path.rglob(f"*{PARTIAL_SUFFIX}"):
        tmp.unlink(missing_ok=True)
        removed += 1
    return removed
