"""Embedded offset store: SQLite under the worker's data directory, which one worker owns.

One row per (connector, source partition); an epoch's offsets are written in one transaction,
so a crash leaves either the previous epoch's offsets or the new ones, never a mix. Connector
threads share the store; a lock serialises them.

The data directory is locked (``flock`` on ``worker.lock``) for the life of the store: a second
worker pointed at the same directory gets a clear error instead of interleaving its commits.
The kernel drops the lock when the process dies, so ``kill -9`` leaves nothing to clean up.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Mapping

import orjson

from connect.errors import ConnectError

__all__ = ["OffsetStore", "DataDirLocked"]


class DataDirLocked(ConnectError):
    """Another worker holds the data directory."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS offsets (
    connector TEXT NOT NULL,
    partition TEXT NOT NULL,
    offset    TEXT NOT NULL,
    updated   REAL NOT NULL,
    PRIMARY KEY (connector, partition)
)
"""


class OffsetStore:
    def __init__(self, data_dir: str | Path):
        self.path = Path(data_dir) / "offsets.sqlite"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock_fd = _lock_dir(self.path.parent)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute(_SCHEMA)

    def load(self, connector: str) -> dict[str, dict[str, Any]]:
        with self._lock:
            rows = self._db.execute("SELECT partition, offset FROM offsets WHERE connector = ?", (connector,)).fetchall()
        return {partition: orjson.loads(offset) for partition, offset in rows}

    def commit(self, connector: str, offsets: Mapping[str, Mapping[str, Any]]) -> None:
        if not offsets:
            return
        now = time.time()
        rows = [(connector, key, orjson.dumps(dict(value)).decode(), now) for key, value in offsets.items()]
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.executemany(
                "INSERT INTO offsets (connector, partition, offset, updated) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (connector, partition) DO UPDATE SET offset = excluded.offset, updated = excluded.updated",
                rows)

    def close(self) -> None:
        with self._lock:
            self._db.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


def _lock_dir(directory: Path) -> int:
    path = directory / "worker.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise DataDirLocked(f"data directory {directory.resolve()} is in use by another worker (pid {holder}); "
                            "stop it or give this one its own --data-dir") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd
