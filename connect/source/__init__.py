"""SourceTask and what the framework gives it.

Guarantees the framework makes to a source task:
- ``start`` is called once, before any ``poll``; ``context.offset_storage_reader`` then answers with
  the last *committed* offset of each source partition: the offset of the last record the sink
  acknowledged. Resume *after* it (offset + 1 for Kafka), not at it.
- ``poll`` is called from one thread, in a loop; it should return within about
  ``poll.timeout.ms`` and never later than ``context.time_left()`` seconds (an empty list or None
  when nothing arrived), so the epoch can end on time.
- ``commit`` is called after the driver persisted the offsets of records returned so far (at the
  start of the next epoch in the same process; not at all if the pair moved to another process).
- ``offsets_committed(offsets)`` follows ``commit`` with the persisted offsets themselves.
- ``commit_record(record, metadata)`` is called for each record the sink acknowledged, only if
  the subclass overrides it (it costs a call per record); ``metadata`` is None when the sink does
  not report positions.
- ``dismiss_failed_msgs`` / ``customer_failed_msgs`` (RIP-45) receive the records the sink could
  not write after retries. Returning True lets their offsets advance: dismissed means "drop them,
  this task does not need them"; customer means "this task has taken care of them itself". Both
  default to False (just log). Either way every such record is counted in the epoch stats.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, Callable, Mapping, Sequence

from connect.records import ConnectRecord, SourceOffset, SourcePartition, partition_key

__all__ = ["SourceTask", "SourceTaskContext", "OffsetStorageReader"]

log = logging.getLogger(__name__)


class OffsetStorageReader:
    """Read-only view of committed offsets, keyed by source partition.

    Either a fixed map (tests, standalone use), or a ``lookup(keys) -> {key: offset or None}``
    the worker provides: a task then learns the offsets of the partitions it asks for, and only
    those (Kafka Connect's OffsetStorageReader reads its store the same way). Answers are cached
    for the life of the task.
    """

    def __init__(self, offsets: Mapping[str, Mapping[str, Any]] | None = None,
                 lookup: Callable[[list[str]], Mapping[str, SourceOffset | None]] | None = None):
        self._answers: dict[str, SourceOffset | None] = dict(offsets or {})
        self._lookup = lookup

    def offset(self, partition: SourcePartition) -> SourceOffset | None:
        return self.offsets([partition])[partition_key(partition)]

    def offsets(self, partitions: Sequence[SourcePartition]) -> dict[str, SourceOffset | None]:
        return self.offsets_by_key([partition_key(p) for p in partitions])

    def offsets_by_key(self, keys: Sequence[str]) -> dict[str, SourceOffset | None]:
        missing = [k for k in keys if k not in self._answers]
        if missing and self._lookup is not None:
            found = self._lookup(missing)
            self._answers.update((k, found.get(k)) for k in missing)
        return {k: self._answers.get(k) for k in keys}


class SourceTaskContext:
    def __init__(self, task_id: str, configs: Mapping[str, Any], offset_storage_reader: OffsetStorageReader):
        self.task_id = task_id
        self.configs = dict(configs)
        self.offset_storage_reader = offset_storage_reader
        self.deadline = float("inf")  # time.monotonic() value; the runner moves it each epoch
        self.failures: list = []  # (record, error) pairs the RIP-45 hooks are being asked about
        # Set by the runner before ``start``: ``poll`` may return a ``connect.batch.NativeBatch`` of the
        # source's ``native_kind`` (the pair's sink produces from it and no stage needs records).
        self.native_batches = False
        # Set by the runner before each ``poll``: the most records it wants from that poll (what is left
        # of the epoch's record budget and of max.in.flight.records). A source that batches by count
        # returns at most this many; more only overshoots those bounds.
        self.poll_limit = sys.maxsize

    def time_left(self) -> float:
        """Seconds the current call may still block (0 when the deadline has passed)."""
        return max(self.deadline - time.monotonic(), 0.0)


class SourceTask:
    """Reads records from a source system. Subclass and implement ``start``, ``poll``, ``stop``."""

    # The kind of ``connect.batch.NativeBatch`` ``poll`` returns when ``context.native_batches``
    # (None: never; records only).
    native_kind: str | None = None

    def __init__(self) -> None:
        self.context: SourceTaskContext | None = None

    def version(self) -> str:
        return "0.1.0"

    def start(self, config: Mapping[str, Any], context: SourceTaskContext) -> None:
        """Open clients and position on ``context.offset_storage_reader``'s offsets.

        The runner has already set ``self.context = context``.
        """
        raise NotImplementedError

    def poll(self) -> Sequence[ConnectRecord] | None:
        """The next records, in source order per ``source_partition``; ``None`` or empty when
        there is nothing now. Called again and again on one thread while the epoch lasts.

        - Block at most ``self.context.time_left()`` seconds (the epoch's deadline); return what
          was read so far rather than wait past it.
        - Return at most ``self.context.poll_limit`` records (more only overshoots the epoch's and
          ``max.in.flight.records``' bounds).
        - Each record carries ``source_partition`` and ``source_offset``: the offset committed for
          that partition once the record and every one before it were delivered, and what ``start``
          is given back after a restart. A record returned is never returned again by this task
          instance; a restart replays from the last committed offset.
        - Raise ``RetriableError`` for trouble that may pass (the broker is unreachable): the call is
          retried with backoff within ``errors.retry.timeout``. Any other exception fails the pair,
          its trace in the status.
        - With ``self.context.native_batches`` set, a source whose ``native_kind`` is not None may
          return a ``connect.batch.NativeBatch`` instead of records.
        """
        raise NotImplementedError

    def commit(self) -> None:
        """Offsets up to the last acknowledged record were persisted."""

    def offsets_committed(self, offsets: Mapping[str, SourceOffset]) -> None:
        """Called after ``commit`` with the offsets that were persisted (keyed by ``partition_key``),
        e.g. to mirror them into the source system for its monitoring tools."""

    def commit_record(self, record: ConnectRecord, metadata: Any) -> None:
        """``record`` was acknowledged by the sink (only called when overridden)."""

    def stop(self) -> None:
        """Release resources. Called once, possibly while ``poll`` is not running."""

    def start_offsets(self) -> Mapping[str, SourceOffset]:
        """Offsets to persist for partitions this task positioned (latest, a timestamp...) but
        read nothing from yet, keyed by ``partition_key``; the last offset *before* the start.

        Without them a restart before the first record would resolve "latest" again and could
        skip records written meanwhile. The runner persists them once, for partitions that have
        no committed offset.
        """
        return {}

    def take_gaps(self) -> list:
        """Records the source dropped before this task copied them, found since the last call
        (``connect.source.gaps.SourceGap``, one per partition and range); the runner hands them to
        the worker at each epoch's end, which records them durably. Default: the source cannot tell."""
        return []

    def metrics(self) -> Mapping[str, float]:
        """Gauges this task reports at each epoch's end (name -> number): exported as
        ``connect_task_metric{name=...}`` and shown in the task's REST status. Default: none."""
        return {}

    def lag_by_partition(self) -> Mapping[str, int] | None:
        """Records behind the source's end, per assigned partition (keyed by ``partition_key``);
        None when the source cannot tell. The runner adds seconds behind and the worker exports
        both per partition (``connect_partition_lag_records`` / ``_seconds``)."""
        return None

    def lag(self) -> int | None:
        """Records known to be waiting in the source for this task, if the source can tell."""
        return None

    def dismiss_failed_msgs(self, records: Sequence[ConnectRecord]) -> bool:
        self._no_hook("dismiss_failed_msgs")
        return False

    def customer_failed_msgs(self, records: Sequence[ConnectRecord]) -> bool:
        self._no_hook("customer_failed_msgs")
        return False

    def _no_hook(self, hook: str) -> None:
        """Say once per task (not per failed record) that ``hook`` is the default one, which keeps nothing."""
        told = getattr(self, "_hooks_told", None)
        if told is None:
            told = set()
            try:
                self._hooks_told = told
            except AttributeError:  # a subclass with __slots__: it says so every time
                pass
        if hook not in told:
            told.add(hook)
            log.info("%s does not override %s: failed records go on to the dead-letter topic or errors.tolerance "
                     "(said once per task)", type(self).__name__, hook)
