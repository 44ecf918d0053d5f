"""What a sink offers for exactly-once delivery (``exactly.once.support``): one transaction per epoch.

A sink that can write transactions gets, before its ``start``, a ``transactional.id`` in
``SinkTaskContext.transactional_id`` (derived from the connector and task number, so it is the
same for every attempt of the pair, wherever it runs). It then opens its client in transactional
mode, and ``SinkTask.transactions()`` returns a :class:`SinkTransactions`. ``start`` must raise
:class:`~connect.errors.TransactionsUnavailableError` (with the reason) when the target refuses
transactions, so ``exactly.once.support=requested`` can fall back to at-least-once and
``required`` can fail with that reason.

The runner (:mod:`connect.tasks.exactlyonce`) then drives it:

- ``stored_offsets()`` once, after ``start`` (which fenced every earlier attempt of the pair and
  settled its open transaction): the pair's source offsets as committed in the target, read
  ``read_committed``. They, not the worker's store, are where the source resumes.
- ``claim()`` (optional) right after: commit a record naming this attempt, so an older attempt that
  is fenced can say which one fenced it;
- ``adopt(writer)`` (optional) for each side writer (dead letters, offset syncs) when it is built:
  one that writes to the same cluster joins the transaction;
- ``begin()`` before the first record of an epoch;
- ``commit(offsets)`` at the end of an epoch whose records all have outcomes: the offsets are
  written in the same transaction as the records, and both become visible together;
- ``abort()`` when anything failed: nothing of the transaction becomes visible.

``commit`` raises :class:`~connect.errors.ProducerFencedError` when a newer attempt of the pair
fenced this one (a zombie: it must stop), :class:`~connect.errors.TransactionAbortedError`
when the transaction could not be committed (it was aborted; the pair restarts from the target's
offsets).
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol

__all__ = ["SinkTransactions", "transactional_id"]


def transactional_id(connector: str, task: int) -> str:
    """Stable across restarts and attempts: the broker fences an older producer with the same id."""
    return f"connect-{connector}-{task}"


class SinkTransactions(Protocol):
    def stored_offsets(self) -> dict[str, dict[str, Any]]:
        """Partition key -> source offset, as committed in the target (``read_committed``)."""

    def begin(self) -> None:
        """Open the epoch's transaction (a no-op when one is open)."""

    def commit(self, offsets: Mapping[str, Mapping[str, Any]]) -> None:
        """Write ``offsets`` (partition key -> offset) in the open transaction and commit it."""

    def abort(self) -> None:
        """Abort the open transaction, if any; never raises."""

    @property
    def open(self) -> bool:
        """A transaction is open."""
