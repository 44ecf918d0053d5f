"""What the runner tracks besides offsets (those: ``connect.tasks.commits``): the partitions its sink
was opened on. A small part of :class:`~connect.tasks.runner.TaskPairRunner` kept apart so the
runner holds only its loop, retries and failure routing."""

from __future__ import annotations

from typing import Any, Mapping

from connect.records import ConnectRecord, partition_key

__all__ = ["OpenedPartitions"]


class OpenedPartitions:
    """The source partitions ``SinkTask.open`` was called with, once each.

    Sources normally reuse one dict per partition, so identity finds known ones cheaply; new
    identities are checked by canonical key. The identity cache keeps the dicts alive (so an id
    cannot be reused by another partition) and is reset when it grows large, for sources that
    build a new dict per record.
    """

    def __init__(self) -> None:
        self.by_key: dict[str, Mapping[str, Any]] = {}  # partition key -> partition
        self._ids: dict[int, Mapping[str, Any]] = {}

    def unknown(self, last: dict[int, ConnectRecord]) -> bool:
        """Whether ``last`` (id(source partition) -> its last record) holds a partition not seen by identity."""
        return bool(last.keys() - self._ids.keys())

    def new(self, last: dict[int, ConnectRecord]) -> list[Mapping[str, Any]]:
        """The partitions of ``last`` not opened yet (now counted as opened)."""
        seen = self._ids
        if len(seen) > 10_000:
            seen.clear()
        new = {}
        for ident, record in last.items():
            if ident in seen:
                continue
            partition = record.source_partition
            seen[ident] = partition
            key = partition_key(partition)
            if key not in self.by_key:
                self.by_key[key] = new[key] = partition
        return list(new.values())

    def all(self) -> list[Mapping[str, Any]]:
        return list(self.by_key.values())

    def clear(self) -> None:
        self.by_key.clear()
        self._ids.clear()
