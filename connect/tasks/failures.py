"""What happens to a record that could not be written after retries.

Order of decision (first that accepts wins, and the record's offset may then advance):
1. ``SourceTask.dismiss_failed_msgs(records)`` (RIP-45) - the source says they may be dropped;
2. ``SourceTask.customer_failed_msgs(records)`` (RIP-45) - the source handled them itself;
3. the dead-letter topic (``errors.deadletterqueue.topic.name``), written by the sink
   connector's side writer (:mod:`connect.sink.side`: its own client, to the sink's cluster, one
   per pair kept across epochs: :class:`DeadLetterQueue`) and acknowledged by the broker before
   anything advances;
4. ``errors.tolerance=all`` - skipped.
Whatever none of them accepts is returned: the runner keeps its partition's offset where it was
and fails the task. Every record is counted in exactly one of the stats' buckets.

Only *permanent* failures come here. Transient ones (timeouts, lost connections, a full queue:
:class:`~connect.errors.RetriableError`) are re-sent by the runner and never reach the hooks, the
dead-letter topic or ``errors.tolerance``. Before the hooks are called, the source task's
``context.failures`` holds the ``(record, error)`` pairs, so a hook can see why each failed.
"""

from __future__ import annotations

import logging
from typing import Callable, Sequence

from connect.errors import ConnectError, RetriableError
from connect.records import ConnectRecord, partition_key
from connect.sink.side import SideWriter
from connect.source import SourceTask
from connect.tasks.results import EpochStats

__all__ = ["FailedRecordHandler", "PendingFailures", "DeadLetterQueue", "dead_letter_record"]

log = logging.getLogger(__name__)

Failure = tuple[ConnectRecord, BaseException]


def dead_letter_record(record: ConnectRecord, error: BaseException, *, connector: str, task: str,
                       with_headers: bool) -> ConnectRecord:
    """The record as written to the dead-letter topic, with Kafka Connect's error headers."""
    headers = list(record.headers or ())
    if with_headers:
        sp = record.source_partition
        context = (
            ("__connect.errors.topic", record.topic),
            ("__connect.errors.partition", sp.get("partition", sp.get("queue", ""))),
            ("__connect.errors.offset", next(iter(record.source_offset.values()), "")),
            ("__connect.errors.connector.name", connector),
            ("__connect.errors.task.id", task),
            ("__connect.errors.exception.class.name", type(error).__qualname__),
            ("__connect.errors.exception.message", str(error)),
        )
        headers.extend((name, str(value).encode()) for name, value in context)
    return ConnectRecord(record.topic, record.key, record.value, headers, record.timestamp,
                         record.source_partition, record.source_offset, None, record.value_schema)


class DeadLetterQueue:
    """A pair's dead-letter topic: its side writer, built by ``factory`` on first use and kept
    across epochs (its client and topic check are paid once, and letters still without an outcome
    when an epoch ends are waited for, not sent again, by the next), until :meth:`close` (the
    pair stops)."""

    def __init__(self, factory: Callable[[], SideWriter]) -> None:
        self._factory = factory
        self._writer: SideWriter | None = None
        # id(failed record) -> (that record, its dead letter) for letters the writer took and that
        # wait for an outcome: a retry waits for them instead of sending them again. The record is
        # held so its id cannot be reused while the entry lives.
        self._sent: dict[int, tuple[ConnectRecord, ConnectRecord]] = {}

    def write(self, failures: Sequence[Failure], letter: Callable[[ConnectRecord, BaseException], ConnectRecord],
              deadline: float) -> None:
        """Have the broker acknowledge a dead letter (``letter(record, error)``) of every failed
        record by ``deadline``. Raises RetriableError when it did not yet (call again with the
        records still failed), ConnectError when it refused one for good."""
        if self._writer is None:
            self._writer = self._factory()
        # Letters of records no longer among the failures (resolved otherwise, e.g. by a hook) are
        # forgotten: only the caller's unresolved records can wait for one.
        self._sent = {id(r): self._sent[id(r)] for r, _ in failures if id(r) in self._sent}
        fresh = [(r, e) for r, e in failures if id(r) not in self._sent]
        letters = [letter(r, e) for r, e in fresh]
        # Remembered as sent only once the writer took them: a writer that raised took nothing to
        # wait for, so the next attempt sends them again (at least once, never counted as written
        # without a letter).
        failed, complete = self._writer.write(letters, deadline)
        self._sent.update((id(r), (r, dead)) for (r, _), dead in zip(fresh, letters, strict=True))
        waiting = {id(dead) for _, dead in self._sent.values()}
        failed = [(dead, e) for dead, e in failed if id(dead) in waiting]  # not a forgotten one's
        if failed:
            refused = {id(dead) for dead, _ in failed}
            self._sent = {k: v for k, v in self._sent.items() if id(v[1]) not in refused}  # sent again next time
            record, error = failed[0]
            if all(isinstance(e, RetriableError) for _, e in failed):
                raise RetriableError(f"dead-letter topic did not take {len(failed)} record(s) yet: {error}")
            raise ConnectError(f"dead-letter topic rejected {len(failed)} record(s), first {record.position()}: {error}")
        if not complete:
            raise RetriableError("dead-letter writes not acknowledged before the epoch deadline")
        for r, _ in failures:
            self._sent.pop(id(r), None)

    def close(self) -> None:
        self._sent = {}
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()


class FailedRecordHandler:
    def __init__(self, *, source: SourceTask, stats: EpochStats, tolerance_all: bool, log_errors: bool,
                 dlq: DeadLetterQueue | None, connector: str, task: str, dlq_headers: bool,
                 deadline: Callable[[], float] = lambda: float("inf")):
        self._source = source
        self._stats = stats
        self._tolerance_all = tolerance_all
        self._log_errors = log_errors
        self._dlq = dlq
        self._connector = connector
        self._task = task
        self._dlq_headers = dlq_headers
        self._deadline = deadline

    def handle(self, failures: Sequence[Failure]) -> list[Failure]:
        """Resolve ``failures``; return the ones nothing accepted.

        Raises RetriableError when the dead-letter topic could not take them in time: the caller
        keeps them (and their partitions' offsets) for the next attempt.
        """
        if not failures:
            return []
        stats = self._stats
        if self._log_errors:
            for record, error in failures:
                log.error("[%s/%s] record %s failed: %s", self._connector, self._task, record.position(), error)
        records = [record for record, _ in failures]
        if self._source.context is not None:
            self._source.context.failures = list(failures)
        if self._source.dismiss_failed_msgs(records):
            stats.dismissed += len(records)
            return []
        if self._source.customer_failed_msgs(records):
            stats.customer_handled += len(records)
            return []
        if self._dlq is not None:
            self._dlq.write(failures, self._letter, self._deadline())
            stats.dead_lettered += len(failures)
            return []
        if self._tolerance_all:
            stats.skipped += len(failures)
            log.warning("[%s/%s] skipped %d failed record(s) (errors.tolerance=all)",
                        self._connector, self._task, len(failures))
            return []
        return list(failures)

    def _letter(self, record: ConnectRecord, error: BaseException) -> ConnectRecord:
        return dead_letter_record(record, error, connector=self._connector, task=self._task,
                                  with_headers=self._dlq_headers)


class PendingFailures:
    """A pair's permanent failures before they reach :class:`FailedRecordHandler`: records a stage
    (converter, transform) could not handle (``stage``, appended in place by the runner's loop), and
    failures the dead-letter topic could not take in time (``waiting``: tried again at the next
    commit point, their partitions held meanwhile)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.stage: list[Failure] = []
        self.waiting: list[Failure] = []

    def __bool__(self) -> bool:
        return bool(self.stage or self.waiting)

    def resolve(self, reported: list[Failure], handler: FailedRecordHandler, stats: EpochStats) -> list[Failure]:
        """Hooks -> DLQ -> tolerance for ``reported`` (the sink's permanent failures), the stage
        failures and those waiting; returns what nothing accepted. The DLQ being slow keeps them for later."""
        new = reported + self.stage
        self.stage.clear()  # in place: the runner's loop holds the list while it runs
        stats.errors += len(new)
        todo = self.waiting + new
        self.waiting = []
        if not todo:
            return []
        for reason, n in stats.count_reasons(new).items():
            log.warning("[%s] %d record(s) failed permanently: %s", self.name, n, reason)
        try:
            return handler.handle(todo)
        except RetriableError as exc:
            log.warning("[%s] %d failed record(s) wait for the dead-letter topic: %s", self.name, len(todo), exc)
            self.waiting = todo
            return []

    def held(self, unresolved: list[Failure]) -> set[str]:
        """The source partitions held by a failure waiting here or ``unresolved``."""
        return {partition_key(r.source_partition) for r, _ in (*self.waiting, *unresolved)}
