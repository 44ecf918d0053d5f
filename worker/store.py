"""Embedded offset store: SQLite under the worker's data directory.

One row per (connector, source partition); an epoch's offsets are written in one transaction,
so a crash leaves either the previous epoch's offsets or the new ones, never a mix.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any, Mapping

import orjson

__all__ = ["OffsetStore"]

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
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute(_SCHEMA)

    def load(self, connector: str) -> dict[str, dict[str, Any]]:
        rows = self._db.execute("SELECT partition, offset FROM offsets WHERE connector = ?", (connector,))
        return {partition: orjson.loads(offset) for partition, offset in rows}

    def commit(self, connector: str, offsets: Mapping[str, Mapping[str, Any]]) -> None:
        if not offsets:
            return
        now = time.time()
        rows = [(connector, key, orjson.dumps(dict(value)).decode(), now) for key, value in offsets.items()]
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.executemany(
                "INSERT INTO offsets (connector, partition, offset, updated) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (connector, partition) DO UPDATE SET offset = excluded.offset, updated = excluded.updated",
                rows)

    def close(self) -> None:
        self._db.close()
