"""Records of a task pair waiting to be put again, in the order they must go out.

Two kinds wait here (:class:`~connect.tasks.runner.TaskPairRunner` puts nothing new while any do):

- records the sink *sent and reported failed* transiently (timeout, lost connection), in the order
  the sink reported them (its put order), so per-partition order survives a sink's finite
  delivery timeout;
- records a put *never handed to its client* (``NotSentError``: no room until the deadline, or a
  put the epoch's end cut off). They are later than everything in flight: they wait until every
  generation with a record put before them is complete (:meth:`ResendQueue.waits`), and go out
  behind those of them that failed, whatever order the reports came in.

:class:`Resender` puts them again once due: the retry clock ``delivery`` paces the re-sends
(backoff; after ``errors.retry.timeout`` of failures it raises
:class:`~connect.errors.RetriesExhaustedError`), and a re-sent record's partition stays held until
the generation it went out in is complete (:meth:`~connect.tasks.commits.CommitAccounting.resent`).
"""

from __future__ import annotations

import time
from typing import Callable

from connect.errors import NotSentError, RetriableError
from connect.records import ConnectRecord, partition_key
from connect.tasks.commits import CommitAccounting
from connect.tasks.results import EpochStats
from connect.tasks.retry import RetryPolicy

__all__ = ["ResendQueue", "Resender", "DELIVERY"]

DELIVERY = "delivery"  # retry clock of transient delivery failures


class ResendQueue:
    """The records to put again, in order; ``due``: when the next re-send may go (monotonic, the
    retry backoff; the runner sets it)."""

    def __init__(self) -> None:
        self.records: list[ConnectRecord] = []
        self.due = 0.0
        # ``records[_unsent_from:]`` were never handed to the sink's client: they go out once
        # generation ``_unsent_after`` (and every earlier one) is complete
        self._unsent_from: int | None = None
        self._unsent_after = -1

    def __len__(self) -> int:
        return len(self.records)

    def __bool__(self) -> bool:
        return bool(self.records)

    def failed(self, records: list[ConnectRecord]) -> None:
        """Records sent and reported failed: in report order, ahead of any record never sent."""
        if not records:
            return
        if self._unsent_from is None:
            self.records.extend(records)
        else:
            self.records[self._unsent_from:self._unsent_from] = records
            self._unsent_from += len(records)

    def hold_unsent(self, records: list[ConnectRecord], after: int) -> None:
        """Records the sink never sent, later than all it holds: they wait for generation ``after``
        (the one holding the latest record put) to be complete."""
        if self._unsent_from is None:
            self._unsent_from = len(self.records)
        self.records.extend(records)
        self._unsent_after = after

    def waits(self, complete_through: Callable[[int], bool]) -> bool:
        """Records never sent wait while a record put before them may still fail."""
        return self._unsent_from is not None and not complete_through(self._unsent_after)

    def take(self) -> tuple[list[ConnectRecord], int | None]:
        """Everything, to be put now, and where the never-sent part starts (for :meth:`put_back`)."""
        batch, self.records = self.records, []
        unsent_from, self._unsent_from = self._unsent_from, None
        return batch, unsent_from

    def put_back(self, batch: list[ConnectRecord], unsent_from: int | None) -> None:
        """The put of a :meth:`take` failed with nothing taken: the batch goes back, in front."""
        self.records[:0] = batch
        if self._unsent_from is not None:
            self._unsent_from += len(batch)
        elif unsent_from is not None:
            self._unsent_from = unsent_from

    def partitions(self) -> set[str]:
        """The source partitions held by a record waiting here."""
        return {partition_key(r.source_partition) for r in self.records}


class Resender:
    """A :class:`ResendQueue` and what puts it again: ``put`` (the sink's), ``resending`` (told
    before each re-send), the pair's retry clocks and its :class:`~connect.tasks.commits.CommitAccounting`."""

    def __init__(self, put: Callable[[list[ConnectRecord]], None], retry: RetryPolicy, accounting: CommitAccounting,
                 resending: Callable[[list[ConnectRecord]], None]) -> None:
        self.queue = ResendQueue()
        self._put = put
        self._retry = retry
        self._acct = accounting
        self._resending = resending

    def __len__(self) -> int:
        return len(self.queue)

    def __bool__(self) -> bool:
        return bool(self.queue)

    def waits(self) -> bool:
        """Records never sent wait while a record put before them may still fail."""
        return self.queue.waits(self._acct.complete_through)

    def backoff_left(self) -> float:
        """Seconds until the next re-send is due."""
        return max(self.queue.due - time.monotonic(), 0.0)

    def send_due(self, stats: EpochStats) -> None:
        """Re-send the queue, in its order, once its backoff has passed and every record put before
        the ones never sent has an outcome."""
        queue = self.queue
        if not queue or time.monotonic() < queue.due or self.waits():
            return
        batch, unsent_from = queue.take()
        stats.retries += len(batch)
        self._resending(batch)
        try:
            self._put(batch)
        except RetriableError as exc:  # nothing of the batch was taken: keep it, in front
            queue.put_back(batch, unsent_from)
            queue.due = time.monotonic() + self._retry.failed(DELIVERY, exc)
            return
        self._acct.resent(batch)  # acknowledged once this generation is complete

    def defer(self, batch: list[ConnectRecord], stats: EpochStats) -> None:
        """Records polled but not taken by the sink: queued, in order, to be put before anything new
        (and after any record put before them that fails later)."""
        if not self.queue:
            self.queue.due = time.monotonic()
        self.queue.hold_unsent(batch, self._acct.last_seq())
        stats.records += len(batch)

    def failed(self, transient: list[tuple[ConnectRecord, BaseException]]) -> None:
        """Transient failures the sink reported, in its report order: queued, and the retry clock
        told (it raises RetriesExhaustedError once deliveries have been failing for errors.retry.timeout)."""
        queue = self.queue
        queue.failed([r for r, e in transient if not isinstance(e, NotSentError)])
        unsent = [r for r, e in transient if isinstance(e, NotSentError)]
        if unsent:
            queue.hold_unsent(unsent, self._acct.last_seq())
        error = next((e for _, e in transient if not getattr(e, "backpressure", False)), None)
        if error is not None:
            queue.due = time.monotonic() + self._retry.failed(DELIVERY, error)
        elif len(queue) == len(transient):  # only a full client: due once the records before are done
            queue.due = time.monotonic()

    def settle(self) -> None:
        """At a commit point: nothing waits and no re-sent record is unacknowledged: the delivery clock stops."""
        if not self.queue and not self._acct.awaiting and self._retry.failing(DELIVERY):
            self._retry.succeeded(DELIVERY)

    def held(self) -> set[str]:
        """The source partitions a re-send holds: waiting here, or re-sent and not yet acknowledged."""
        held = self.queue.partitions()
        held.update(self._acct.awaiting)
        return held
