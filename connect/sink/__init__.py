"""SinkTask and what the framework gives it.

Guarantees the framework makes to a sink task:
- ``start(config, context)`` once, then ``open(partitions)`` with the source partitions whose
  records are about to arrive (called again when new ones appear), then ``put`` batches in
  source order, per source partition.
- ``put`` may send asynchronously. A :class:`~connect.errors.RetriableError` from ``put`` means
  "nothing of this batch was accepted, call again with the same batch".
- Every record's outcome is tied to that record (a per-message callback or correlation id bound
  to it when it is sent), never found again by comparing content. A record the destination did
  not take is reported with ``context.errant_record_reporter.report(record, error)``:
  - a :class:`~connect.errors.RetriableError` means *transient* (timeout, lost connection, leader
    change, full queue, broker busy): the runner re-sends it, in order, and its source partition's
    offset does not move until it is acknowledged; it is never skipped by tolerance, hooks or
    the dead-letter destination;
  - any other error means *permanent for this record* (too large, invalid, refused): the runner
    asks the source task's RIP-45 hooks, then the dead-letter destination, then applies
    ``errors.tolerance``.
  The sink must never drop a record silently.
- Waits are bounded: ``context.time_left()`` says how many seconds the current call may block
  (the epoch deadline, or 0 once the worker asked to stop). A ``put`` that cannot hand every
  record to its client in time reports the rest as transient failures; a ``flush`` that cannot
  see every acknowledgement in time returns ``False``.
- ``pre_commit(offsets)`` (default: ``flush(offsets)``, then ``offsets`` if it completed, else
  ``{}``) is called at the end of an epoch and whenever ``max.in.flight.records`` are
  unacknowledged. The offsets it returns are committed: only partitions whose every record put so
  far was acknowledged or reported may be in it.
- *Asynchronous sinks* (which override ``checkpoint`` and ``wait_outcomes``) are never drained
  at a commit point. ``checkpoint()`` marks every record put so far and returns a callable that
  says, without blocking, whether each of those records has an outcome (acknowledged, or
  reported as failed); ``wait_outcomes(timeout)`` serves outcomes (e.g. delivery reports) for at
  most ``timeout`` seconds. The runner commits each source partition up to the last checkpoint
  whose records all have outcomes, so an epoch ends without waiting for the records in flight:
  they stay with the pair and are accounted in the next epoch. ``pre_commit`` is not called.
- ``close(partitions)`` and ``stop()`` when the pair stops or is reconfigured.
- A sink task writes only the pair's data: side outputs (dead letters, offset syncs) are written by
  the sink connector's side writer (:mod:`connect.sink.side`), never by another instance of it.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Sequence

from connect.records import ConnectRecord, SourceOffset, SourcePartition
from connect.sink.outcomes import OutcomeQueue
from connect.sink.resend import InOrderReports

__all__ = ["SinkTask", "SinkTaskContext", "ErrantRecordReporter", "Outstanding", "QueuedOutcomes"]


class Outstanding:
    """For asynchronous sinks: how many records put after one checkpoint have no outcome yet.

    A sink counts ``left`` up as it sends and down as each success or failure report is served;
    ``checkpoint`` starts a new one and returns the old one's ``done``."""

    __slots__ = ("left",)

    def __init__(self) -> None:
        self.left = 0

    def done(self) -> bool:
        return self.left <= 0


class QueuedOutcomes:
    """For asynchronous sinks whose client reports outcomes on a thread of its own (callbacks,
    futures): the callbacks only queue them (``_arrive``, an :class:`~connect.sink.outcomes.OutcomeQueue`),
    and the task's thread serves them (``_serve``, the subclass: handles what is queued, returns how
    many records it settled, and keeps ``_pending``). This gives the rest of the protocol:
    ``checkpoint``, ``wait_outcomes``, waiting for room under a pending limit, the flush loop, and
    ``_reports`` (:class:`~connect.sink.resend.InOrderReports`: failures and records not sent,
    reported so that the runner re-sends them in order). Call ``_init_outcomes`` in ``start``."""

    context: SinkTaskContext

    def _init_outcomes(self) -> None:
        self._outcome_queue = OutcomeQueue()
        self._outcomes = self._outcome_queue.items  # the callbacks' ``put``, inlined where it is hot
        self._arrived = self._outcome_queue.arrived
        self._gen = Outstanding()
        self._pending = 0  # records sent whose outcome was not served yet
        self._reports = InOrderReports(self.context.errant_record_reporter.report)

    def _arrive(self, item: Any) -> None:
        self._outcome_queue.put(item)

    def _serve(self) -> int:
        raise NotImplementedError

    def checkpoint(self) -> Callable[[], bool]:
        gen, self._gen = self._gen, Outstanding()
        return gen.done

    def wait_outcomes(self, timeout: float) -> None:
        if self._serve() or timeout <= 0:
            return
        self._outcome_queue.wait(timeout)
        self._serve()

    def _wait_for_room(self, most: int) -> bool:
        """Serve outcomes until fewer than ``most`` records are pending; False at the deadline."""
        while self._pending >= most:
            left = self.context.time_left()
            if left <= 0:
                return False
            self.wait_outcomes(min(left, 0.05))
        return True

    def _settle_all(self) -> bool:
        """Every outcome served, at most ``context.time_left()``; False if time ran out first."""
        while True:
            self._serve()
            if self._pending <= 0:
                return True
            left = self.context.time_left()
            if left <= 0:
                return False
            self.wait_outcomes(min(left, 0.2))


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
        self.deadline = float("inf")  # time.monotonic() value; the runner moves it each epoch
        # Set by the runner when the flow writes offset syncs (``connect.tasks.offsetsync.AckedPositions``):
        # the sink then calls ``positions.ack(record, target topic, partition label, position)`` for
        # every record the destination acknowledged.
        self.positions = None
        # Set by the runner before ``start`` for exactly-once delivery (``connect.sink.transactions``);
        # None: at-least-once.
        self.transactional_id: str | None = None
        self.pair: tuple[str, int] | None = None  # (connector, task number), set with transactional_id

    def time_left(self) -> float:
        """Seconds the current call may still block (0 when the deadline has passed)."""
        return max(self.deadline - time.monotonic(), 0.0)


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

    def metrics(self) -> Mapping[str, float]:
        """Gauges this task reports at each epoch's end (name -> number): exported as
        ``connect_task_metric{name=...}`` and shown in the task's REST status. Default: none."""
        return {}

    def put(self, records: Sequence[ConnectRecord]) -> None:
        """Deliver ``records`` (in order per source partition), or start delivering them.

        - Every record ends with exactly one outcome: delivered, or reported with
          ``self.context.errant_record_reporter.report(record, error)`` - a ``RetriableError`` for
          trouble that may pass (the runner re-sends that record, behind every earlier one), any
          other error (``DeliveryError``) for a permanent refusal (dead-letter topic or
          ``errors.tolerance``, else the pair fails). Never drop a record silently.
        - A synchronous sink may deliver here, or buffer and deliver in ``flush``. An asynchronous
          one sends here and reports outcomes later (``checkpoint``, ``wait_outcomes``; see
          ``QueuedOutcomes``). Offsets move only past records with an outcome.
        - Block at most ``self.context.time_left()`` seconds. An asynchronous sink reports records
          it could not hand to its client in time as not sent (``InOrderReports.not_sent``).
        - Raising ``RetriableError`` retries the whole call with backoff (within
          ``errors.retry.timeout``); any other exception fails the pair.
        - A record's ``value`` may be ``None`` (a tombstone), and its ``key`` too.
        """
        raise NotImplementedError

    # Kinds of ``connect.batch.NativeBatch`` this sink produces from (``put_native``): a pair whose
    # source's ``native_kind`` is one of them may move native batches (see ``connect.batch``).
    native_kinds: frozenset[str] = frozenset()

    def put_native(self, batch) -> None:
        """``put`` for a native batch: the same contract, every outcome tied to its own message
        (a failure reported with ``batch.record(i)``, the record of that message)."""
        raise NotImplementedError

    def flush(self, offsets: Mapping[str, SourceOffset]) -> bool | None:
        """Block until every record put so far was acknowledged or reported as failed, at most
        ``context.time_left()`` seconds; return ``False`` if time ran out first."""

    def pre_commit(self, offsets: Mapping[str, SourceOffset]) -> Mapping[str, SourceOffset]:
        """The offsets safe to commit: all of them after a complete flush, none otherwise."""
        return {} if self.flush(offsets) is False else offsets

    def checkpoint(self) -> Callable[[], bool] | None:
        """Asynchronous sinks: mark every record put so far; return a callable, cheap and never
        blocking, that is True once each of them was acknowledged or reported as failed.
        ``None`` (the default): a synchronous sink, flushed at every commit point."""
        return None

    def wait_outcomes(self, timeout: float) -> None:
        """Asynchronous sinks: serve acknowledgements and failure reports for at most ``timeout``
        seconds (0: only those already there), returning early once some were served."""
        time.sleep(timeout)

    def transactions(self):
        """Exactly-once delivery (:mod:`connect.sink.transactions`): the ``SinkTransactions`` of a sink
        started with ``context.transactional_id``. Default: this sink cannot write transactions."""
        from connect.errors import TransactionsUnavailableError

        raise TransactionsUnavailableError(f"{type(self).__name__} cannot write transactions (only the Kafka sink can)")

    def close(self, partitions: Sequence[SourcePartition]) -> None:
        """These source partitions will send no more records to this task instance."""

    def stop(self) -> None:
        """Release resources. Called once."""
