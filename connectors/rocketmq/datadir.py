"""The embedded broker's data directory: created owner-only, and held by one broker at a time.

The directory holds every message and consumer offset, so it is created 0700 (missing parents
too) and its files 0600, whatever the umask. Two brokers on one directory would both append at
commit-log offset 0 and cut each other's acknowledged records on the next recovery, so a broker
takes an exclusive ``flock`` on ``<dir>/lock`` (as RocketMQ's ``DefaultMessageStore`` locks
``<storePathRootDir>/lock``) before it reads anything; the second one stops with an error naming
the holder. The lock is released by the kernel when the process ends, ``kill -9`` included.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from connect.files import open_lock_file, private_dir

__all__ = ["DataDirBusyError", "DataDirLock", "make_private_dir", "private_opener", "PRIVATE_FILE"]

PRIVATE_DIR, PRIVATE_FILE = 0o700, 0o600
_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


class DataDirBusyError(OSError):
    """Another broker holds the data directory."""

    def __str__(self) -> str:
        return self.strerror  # the sentence naming the holder, without "[Errno 16]"


def make_private_dir(path: Path) -> None:
    """``mkdir -p`` with mode 0700 for every directory it creates, and the data directory itself
    set to 0700 (the worker's stores share the rule: :func:`connect.files.private_dir`)."""
    private_dir(path)


def private_opener(path: str, flags: int) -> int:
    """``open(..., opener=private_opener)``: created 0600, and a symlink planted in the data
    directory is refused rather than followed (ELOOP)."""
    return os.open(path, flags | _NOFOLLOW, PRIVATE_FILE)


class DataDirLock:
    """An exclusive ``flock`` on ``<dir>/lock``; its content says who holds it (pid, then the
    address once the broker listens), for the error the next broker prints."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / "lock"
        self._fd = open_lock_file(self.path)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._fd, 256, 0).decode("utf-8", "replace").strip() or "holder unknown"
            os.close(self._fd)
            raise DataDirBusyError(errno.EBUSY, f"data directory {data_dir} is in use by another broker ({holder}): "
                                                f"stop it or choose another --data-dir") from None
        self.describe(f"pid {os.getpid()}")

    def describe(self, holder: str) -> None:
        os.ftruncate(self._fd, 0)  # only once the lock is ours: the holder's own words stay until then
        os.pwrite(self._fd, holder.encode() + b"\n", 0)

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = -1
