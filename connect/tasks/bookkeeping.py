"""What the runner tracks besides offsets: the partitions its sink was opened on, and the records
waiting for ``SourceTask.commit_record``. Small parts of :class:`~connect.tasks.runner.TaskPairRunner`
kept apart so the runner holds only its loop, accounting, retries and failure routing."""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Mapping

from connect.records import ConnectRecord, partition_key

__all__ = ["OpenedPartitions", "RecordCommits"]


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


class RecordCommits:
    """``SourceTask.commit_record`` for acknowledged records, once their partition is not blocked."""

    def __init__(self, commit_record: Callable[[ConnectRecord, Any], None]):
        self._commit_record = commit_record
        self.held: list[ConnectRecord] = []  # complete, waiting for commit_record (partition blocked)
        self.failed: Counter[int] = Counter()  # reported failures, matched to records for commit_record

    def __bool__(self) -> bool:
        return bool(self.held)

    def failures_reported(self, failures: list) -> None:
        self.failed.update(id(r) for r, _ in failures)

    def hold(self, records: list[ConnectRecord]) -> None:
        self.held.extend(records)

    def release(self, blocked: set[str]) -> None:
        """``commit_record`` for each held record whose partition is not blocked; a record reported
        as failed is not acknowledged (its re-sent copy may be, later)."""
        failed = self.failed
        keys: dict[int, str] = {}
        keep = []
        for r in self.held:
            if failed and failed.get(id(r)):
                failed[id(r)] -= 1
                if not failed[id(r)]:
                    del failed[id(r)]
                continue
            sp = r.source_partition
            key = keys.get(id(sp))
            if key is None:
                key = keys[id(sp)] = partition_key(sp)
            if key in blocked:
                keep.append(r)
            else:
                self._commit_record(r, None)
        self.held = keep
