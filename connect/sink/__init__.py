"""SinkTask and what the framework gives it.

Guarantees the framework makes to a sink task:
- ``start(config, context)`` once, then ``open(partitions)`` with the source partitions whose
  records are about to arrive (called again when new ones appear), then ``put`` batches in
  source order, per source partition.
- ``put`` may send asynchronously. A :class:`~connect.errors.RetriableError` from ``put`` means
  "nothing of this batch was accepted, call again with the same batch".
- A record that the sink accepted but the destination rejected is reported with
  ``context.errant_record_reporter.report(record, error)``; the runner then retries it, sends it
  to the dead-letter destination, asks the source task's RIP-45 hooks, or applies
  ``errors.tolerance``. The sink must never drop a record silently.
- ``pre_commit(offsets)`` (default: ``flush(offsets)``, then return ``offsets``) is called at the end
  of an epoch and whenever ``max.in.flight.records`` are unacknowledged: it must block until every
  record put so far was acknowledged or reported. The offsets it returns are the ones committed.
- ``close(partitions)`` and ``stop()`` when the pair stops or is reconfigured.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from connect.records import ConnectRecord, SourceOffset, SourcePartition

__all__ = ["SinkTask", "SinkTaskContext", "ErrantRecordReporter"]


class ErrantRecordReporter:
    """Collects records the destination rejected, with the error, for the runner to handle."""

    def __init__(self) -> None:
        self.failed: list[tuple[ConnectRecord, BaseException]] = []

    def report(self, record: ConnectRecord, error: BaseException) -> None:
        self.failed.append((record, error))

    def take(self) -> list[tuple[ConnectRecord, BaseException]]:
        failed, self.failed = self.failed, []
        return failed


class SinkTaskContext:
    def __init__(self, task_id: str, configs: Mapping[str, Any], reporter: ErrantRecordReporter | None = None):
        self.task_id = task_id
        self.configs = dict(configs)
        self.errant_record_reporter = reporter or ErrantRecordReporter()


class SinkTask:
    """Writes records to a destination. Implement ``start``, ``put``, ``flush``, ``stop``."""

    def __init__(self) -> None:
        self.context: SinkTaskContext | None = None

    def version(self) -> str:
        return "0.1.0"

    def start(self, config: Mapping[str, Any], context: SinkTaskContext) -> None:
        """Open clients. The runner has already set ``self.context = context``."""
        raise NotImplementedError

    def open(self, partitions: Sequence[SourcePartition]) -> None:
        """Records from these source partitions are about to arrive."""

    def put(self, records: Sequence[ConnectRecord]) -> None:
        raise NotImplementedError

    def flush(self, offsets: Mapping[str, SourceOffset]) -> None:
        """Block until every record put so far was acknowledged or reported as failed."""

    def pre_commit(self, offsets: Mapping[str, SourceOffset]) -> Mapping[str, SourceOffset]:
        self.flush(offsets)
        return offsets

    def close(self, partitions: Sequence[SourcePartition]) -> None:
        """These source partitions will send no more records to this task instance."""

    def stop(self) -> None:
        """Release resources. Called once."""
