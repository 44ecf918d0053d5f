"""Files the worker keeps at rest (stores, keystore, locks): owner-only, never through a symlink.

They hold connector configs as submitted (literal secrets included), committed offsets and
credentials, so nobody but the worker's user reads them: directories are created 0700 (every level
this module creates, not just the last), files 0600, and a lock file is opened without following
symbolic links (a planted link must not make the worker truncate another file).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

__all__ = ["private_dir", "private_file", "open_lock_file"]


def private_dir(path: str | os.PathLike) -> Path:
    """``path`` as a directory readable by its owner only: missing levels are created 0700, and the
    directory itself is set to 0700 (it is the worker's own)."""
    path = Path(path).absolute()
    missing = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    for level in reversed(missing):
        try:
            level.mkdir(mode=0o700)
        except FileExistsError:
            pass
    os.chmod(path, 0o700)
    return path


def private_file(path: str | os.PathLike) -> Path:
    """``path`` exists and is readable by its owner only (created empty if missing; not a symlink)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    return Path(path)


def open_lock_file(path: str | os.PathLike) -> int:
    """A file descriptor of the lock file ``path`` (created 0600). Raises OSError naming the path
    when it is a symbolic link."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, f"{path} is a symlink; remove it (a lock file is never followed)") from None
        raise
    os.fchmod(fd, 0o600)
    return fd
