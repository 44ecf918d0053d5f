"""Records of a task pair waiting to be put again, in the order they must go out.

Two kinds wait here (:class:`~connect.tasks.runner.TaskPairRunner` puts nothing new while any do):

- records the sink *sent and reported failed* transiently (timeout, lost connection), in the order
  the sink reported them (its put order), so per-partition order survives a sink's finite
  delivery timeout;
- records a put *never handed to its client* (``NotSentError``: no room until the deadline, or a
  put the epoch's end cut off). They are later than everything in flight: they wait until every
  generation with a record put before them is complete (:meth:`ResendQueue.waits`), and go out
  behind those of them that failed, whatever order the reports came in.
"""

from __future__ import annotations

from typing import Callable

from connect.records import ConnectRecord, partition_key

__all__ = ["ResendQueue"]


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
