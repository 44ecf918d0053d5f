"""The worker's stores: connector configs, task offsets and statuses, behind small interfaces.

Two implementations: the embedded one here (a SQLite file under the worker's data directory,
which one worker owns; the default) and the broker-backed one in ``worker.stores.kafkastore``
(compacted Kafka topics, as Kafka Connect's config/offset/status topics).

:class:`OffsetStore` keeps one row per (connector, source partition); an epoch's offsets are
written in one transaction, so a crash leaves either the previous epoch's offsets or the new
ones, never a mix. Connector threads share the store; a lock serialises them. ``connect run``
uses it alone; the worker service (``connect worker start``) uses :class:`SqliteStores`, which
adds the config and status tables to the same file.

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
from typing import Any, Mapping, Protocol

import attrs
import orjson

from connect.errors import ConnectError
from connect.files import open_lock_file, private_dir, private_file

__all__ = ["OffsetStore", "DataDirLocked", "OffsetBackend", "ConfigBackend", "StatusBackend", "Stores",
           "StoredConnector", "StoredStatus", "SqliteStores", "TARGET_STATES"]

TARGET_STATES = ("RUNNING", "PAUSED", "STOPPED")


@attrs.frozen
class StoredConnector:
    """A connector as submitted: its config exactly as given (provider references unresolved)
    and the state it should be in."""

    name: str
    config: dict[str, str]
    target_state: str = "RUNNING"


@attrs.frozen
class StoredStatus:
    """The last state reported for a connector (``task`` None) or one of its task pairs."""

    connector: str
    task: int | None
    state: str
    worker_id: str
    trace: str | None = None


class OffsetBackend(Protocol):
    def load(self, connector: str) -> dict[str, dict[str, Any]]:
        """Committed offsets of a connector: partition key -> offset."""

    def commit(self, connector: str, offsets: Mapping[str, Mapping[str, Any] | None]) -> None:
        """Store offsets atomically; an offset of None removes the partition (it starts afresh)."""

    def reset(self, connector: str) -> None:
        """Remove every offset of a connector."""

    def close(self) -> None: ...


class ConfigBackend(Protocol):
    def connectors(self) -> dict[str, StoredConnector]:
        """Every stored connector, by name."""

    def put(self, name: str, config: Mapping[str, str], target_state: str | None = None) -> None:
        """Create or replace a connector's config (keeping its target state unless one is given)."""

    def put_target_state(self, name: str, state: str) -> None: ...

    def delete(self, name: str) -> None: ...


class StatusBackend(Protocol):
    def put(self, status: StoredStatus) -> None: ...

    def statuses(self, connector: str) -> list[StoredStatus]:
        """The connector's own status (task None) and its tasks', as last put."""

    def delete(self, connector: str) -> None: ...


class Stores(Protocol):
    offsets: OffsetBackend
    configs: ConfigBackend
    statuses: StatusBackend

    @property
    def fenced(self) -> str | None:
        """Why these stores take no write any more (another worker took them over), or None. The
        herder stops its connectors once it is set: their epochs would copy records whose offsets
        can never be committed."""

    def close(self) -> None: ...


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
        self.path = private_dir(data_dir) / "offsets.sqlite"
        self._lock_fd = _lock_dir(self.path.parent)
        for suffix in ("", "-wal", "-shm"):  # SQLite gives its side files the database file's mode
            if suffix == "" or Path(f"{self.path}{suffix}").exists():
                private_file(f"{self.path}{suffix}")
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute(_SCHEMA)

    def load(self, connector: str) -> dict[str, dict[str, Any]]:
        with self._lock:
            rows = self._db.execute("SELECT partition, offset FROM offsets WHERE connector = ?", (connector,)).fetchall()
        return {partition: orjson.loads(offset) for partition, offset in rows}

    def commit(self, connector: str, offsets: Mapping[str, Mapping[str, Any] | None]) -> None:
        if not offsets:
            return

        self._write(connector, offsets)

    def _write(self, connector: str, offsets: Mapping[str, Mapping[str, Any] | None]) -> None:
        now = time.time()
        rows = [(connector, key, orjson.dumps(dict(value)).decode(), now) for key, value in offsets.items()
                if value is not None]
        gone = [(connector, key) for key, value in offsets.items() if value is None]
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.executemany(
                "INSERT INTO offsets (connector, partition, offset, updated) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (connector, partition) DO UPDATE SET offset = excluded.offset, updated = excluded.updated",
                rows)
            self._db.executemany("DELETE FROM offsets WHERE connector = ? AND partition = ?", gone)

    def reset(self, connector: str) -> None:
        with self._lock, self._db:
            self._db.execute("DELETE FROM offsets WHERE connector = ?", (connector,))

    def close(self) -> None:
        with self._lock:
            self._db.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


_WORKER_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS connectors (
        name         TEXT PRIMARY KEY,
        config       TEXT NOT NULL,
        target_state TEXT NOT NULL,
        updated      REAL NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS statuses (
        connector TEXT NOT NULL,
        task      INTEGER NOT NULL,  -- -1: the connector itself
        state     TEXT NOT NULL,
        worker_id TEXT NOT NULL,
        trace     TEXT,
        PRIMARY KEY (connector, task))""",
)


class _SqliteConfigs:
    def __init__(self, store: OffsetStore):
        self._db, self._lock = store._db, store._lock

    def connectors(self) -> dict[str, StoredConnector]:
        with self._lock:
            rows = self._db.execute("SELECT name, config, target_state FROM connectors ORDER BY name").fetchall()
        return {name: StoredConnector(name, orjson.loads(config), state) for name, config, state in rows}

    def put(self, name: str, config: Mapping[str, str], target_state: str | None = None) -> None:
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute(
                "INSERT INTO connectors (name, config, target_state, updated) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (name) DO UPDATE SET config = excluded.config, updated = excluded.updated"
                + (", target_state = excluded.target_state" if target_state else ""),
                (name, orjson.dumps(dict(config)).decode(), target_state or "RUNNING", time.time()))

    def put_target_state(self, name: str, state: str) -> None:
        with self._lock, self._db:
            self._db.execute("UPDATE connectors SET target_state = ?, updated = ? WHERE name = ?",
                             (state, time.time(), name))

    def delete(self, name: str) -> None:
        with self._lock, self._db:
            self._db.execute("DELETE FROM connectors WHERE name = ?", (name,))


class _SqliteStatuses:
    def __init__(self, store: OffsetStore):
        self._db, self._lock = store._db, store._lock

    def put(self, status: StoredStatus) -> None:
        task = -1 if status.task is None else status.task
        with self._lock, self._db:
            self._db.execute(
                "INSERT INTO statuses (connector, task, state, worker_id, trace) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (connector, task) DO UPDATE SET state = excluded.state, worker_id = excluded.worker_id, "
                "trace = excluded.trace", (status.connector, task, status.state, status.worker_id, status.trace))

    def statuses(self, connector: str) -> list[StoredStatus]:
        with self._lock:
            rows = self._db.execute("SELECT task, state, worker_id, trace FROM statuses WHERE connector = ? "
                                    "ORDER BY task", (connector,)).fetchall()
        return [StoredStatus(connector, None if task < 0 else task, state, worker, trace)
                for task, state, worker, trace in rows]

    def delete(self, connector: str) -> None:
        with self._lock, self._db:
            self._db.execute("DELETE FROM statuses WHERE connector = ?", (connector,))


class SqliteStores:
    """The embedded stores: offsets, connector configs and statuses in ``offsets.sqlite`` under
    the data directory (locked for this worker)."""

    def __init__(self, data_dir: str | Path):
        self.offsets = OffsetStore(data_dir)
        with self.offsets._lock:
            for ddl in _WORKER_SCHEMA:
                self.offsets._db.execute(ddl)
        self.configs = _SqliteConfigs(self.offsets)
        self.statuses = _SqliteStatuses(self.offsets)

    @property
    def fenced(self) -> str | None:
        """Never: the data directory is locked for this worker (``DataDirLocked``), so no other
        worker can take these stores over while it runs."""
        return None

    def close(self) -> None:
        self.offsets.close()


def _lock_dir(directory: Path) -> int:
    path = directory / "worker.lock"
    fd = open_lock_file(path)
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
