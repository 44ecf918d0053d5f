"""Exactly-once delivery for a task pair (``exactly.once.support``): one transaction per epoch.

How the runner uses it (:class:`~connect.tasks.runner.TaskPairRunner`):

- :func:`open_pair` starts the sink *before* the source, with a ``transactional.id`` derived from
  the connector and task number (:func:`connect.sink.transactions.transactional_id`). Starting a
  transactional client fences every earlier attempt of the pair (a replayed Spark attempt, a lost
  executor still running, the pairs of a driver killed with -9) and settles its open transaction.
  Only then are the pair's offsets read from the target (``read_committed``): the source resumes
  there, not from the worker's store, so records and offsets always agree.
- Each epoch opens a transaction before its first record; every record of the epoch goes into it.
- At the end of the epoch the runner drains what is in flight (within the grace). When every
  record has an outcome and nothing is held (no re-send, no failed record waiting for the
  dead-letter topic), the offsets the epoch reached are written into the same transaction and it
  is committed: records and offsets become visible together. When something is still in flight
  at the end of the grace, the transaction stays open into the next epoch (its offsets with it).
- A record that fails transiently aborts the transaction (it cannot be re-sent inside it in
  order): the epoch fails with :class:`~connect.errors.TransactionAbortedError` and the worker
  restarts the pair with backoff, from the offsets in the target. A fenced attempt fails with
  :class:`~connect.errors.ProducerFencedError` and is not restarted (a newer attempt runs).

``requested`` falls back to at-least-once when the sink or its target cannot write transactions,
and says so (a warning and the ``delivery`` field of the task's status); ``required`` fails naming
the key and the reason.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Mapping

from connect.errors import ConfigIssue, NotSentError, TransactionAbortedError, TransactionsUnavailableError
from connect.sink import SinkTask
from connect.sink.side import SideWriter
from connect.sink.transactions import SinkTransactions, transactional_id
from connect.source import OffsetStorageReader, SourceTaskContext

__all__ = ["EpochTransactions", "open_pair", "adopting", "config_issues", "EXACTLY_ONCE", "AT_LEAST_ONCE"]

log = logging.getLogger(__name__)

EXACTLY_ONCE = "exactly-once"
AT_LEAST_ONCE = "at-least-once"


class EpochTransactions:
    """The pair's transactions, one per epoch; offsets reached but not yet committed wait in ``pending``."""

    def __init__(self, transactions: SinkTransactions, name: str) -> None:
        self._txns = transactions
        self.name = name
        self.pending: dict[str, dict[str, Any]] = {}

    def begin(self) -> None:
        self._txns.begin()

    def adopt(self, writer):
        """A side writer that writes to the target cluster joins the transactions (``SinkTransactions.adopt``)."""
        adopt = getattr(self._txns, "adopt", None)
        return adopt(writer) if adopt is not None else writer

    def end_epoch(self, committed: Mapping[str, Mapping[str, Any]], settled: bool, stats) -> dict[str, dict[str, Any]]:
        """The epoch's offsets join ``pending``; when ``settled`` (every record of the transaction has
        an outcome, nothing held) they are committed with the records. Returns the offsets committed."""
        self.pending.update((k, dict(v)) for k, v in committed.items())
        if not settled or not self._txns.open:
            return {}
        offsets, started = self.pending, time.monotonic()
        self._txns.commit(offsets)  # raises: the runner aborts and fails the epoch
        self.pending = {}
        stats.transactions += 1
        stats.commit_s += time.monotonic() - started
        return offsets

    def abort(self, stats) -> None:
        """Abort the open transaction (the epoch failed): its offsets are forgotten with its records."""
        self.pending = {}
        if self._txns.open:
            self._txns.abort()
            stats.aborted += 1

    def abort_failed(self, stats) -> None:
        """:meth:`abort` for an epoch that failed: an error aborting is logged, the epoch's own is the one reported."""
        try:
            self.abort(stats)
        except Exception as exc:  # noqa: BLE001 - the epoch's own failure is the one reported
            log.warning("[%s] aborting the transaction: %s", self.name, exc)

    @staticmethod
    def refuse_resend(transient: list) -> None:
        """A record sent in the transaction failed transiently: re-sent inside it, it would land after
        later records, so the transaction is aborted (raises). Records never sent may still go out."""
        sent = next(((r, e) for r, e in transient if not isinstance(e, NotSentError)), None)
        if sent is not None:
            raise TransactionAbortedError(f"{sent[0].position()} failed ({sent[1]}); the epoch's transaction is "
                                          "aborted and the pair restarts from the offsets in the target")


def adopting(factory: Callable[[], SideWriter] | None,
             transactions: Callable[[], EpochTransactions | None]) -> Callable[[], SideWriter] | None:
    """``factory`` building side writers that join the pair's transactions (known once the pair has
    started: ``transactions`` is asked when a writer is built)."""
    if factory is None:
        return None

    def build() -> SideWriter:
        writer = factory()
        txn = transactions()
        return txn.adopt(writer) if txn is not None else writer

    return build


def config_issues(mode: str, sink_connector: type, source_config: Mapping[str, str],
                  sink_config: Mapping[str, str] | None = None, epoch_bound_ms: int = 0) -> list[ConfigIssue]:
    """What ``validate`` and ``run`` refuse before anything runs: ``required`` with a sink that cannot write
    transactions, a source told to read records of transactions not committed, and epochs
    (``epoch_bound_ms``: epoch.max.ms + epoch.grace.ms) the target would abort as too long."""
    if mode == "disabled":
        return []
    issues = []
    task = sink_connector.task_class()
    if mode == "required" and getattr(task, "transactions", None) is SinkTask.transactions:
        issues.append(ConfigIssue("exactly.once.support", mode, (
            f"the sink {sink_connector.__name__} cannot write transactions, so it cannot be exactly-once: only the "
            "Kafka sink can (requested: exactly-once where possible, at-least-once elsewhere)")))
    timeout = sink_connector.transaction_timeout_ms(sink_config or {}) if hasattr(
        sink_connector, "transaction_timeout_ms") else None
    if timeout is not None and epoch_bound_ms * 2 > timeout:
        issues.append(ConfigIssue("epoch.max.ms", None, (
            f"with epoch.grace.ms, epochs may last {epoch_bound_ms} ms: more than half the sink's transaction "
            f"timeout ({timeout} ms; sink.producer.override.transaction.timeout.ms raises it, up to the broker's "
            "transaction.max.timeout.ms), so the target could abort an epoch's transaction")))
    for key in ("consumer.override.isolation.level", "client.override.isolation.level"):
        if str(source_config.get(key, "")).strip().lower() == "read_uncommitted":
            issues.append(ConfigIssue(f"source.{key}", None, (
                "must not be read_uncommitted with exactly.once.support: the source would copy records of "
                "transactions that are later aborted")))
    return issues


def open_pair(sink: SinkTask, sink_config: Mapping[str, Any], source_context: SourceTaskContext, mode: str,
              connector: str, task: int, name: str, start_source: Callable[[], None]) -> tuple[EpochTransactions | None, str]:
    """Start the sink in transactional mode (``mode``: required or requested), read the pair's offsets
    from the target, then start the source from them. Returns (transactions or None, delivery mode)."""
    sink.context.transactional_id = transactional_id(connector, task)
    sink.context.pair = (connector, task)
    try:
        if type(sink).transactions is SinkTask.transactions:  # cannot: known without starting it twice
            sink.transactions()
        sink.start(sink_config, sink.context)
        txns = sink.transactions()
    except TransactionsUnavailableError as exc:
        if type(sink).transactions is not SinkTask.transactions:
            _stop_quietly(sink)
        if mode == "required":
            raise TransactionsUnavailableError(f"exactly.once.support=required, but {exc}") from None
        log.warning("[%s] exactly.once.support=requested: delivery is at-least-once: %s", name, exc)
        sink.context.transactional_id = None
        sink.start(sink_config, sink.context)
        _start_source(sink, start_source)
        return None, f"{AT_LEAST_ONCE} (exactly.once.support=requested: {exc})"
    try:
        offsets = txns.stored_offsets()
        claim = getattr(txns, "claim", None)  # a record saying which attempt holds the pair now
        if claim is not None:
            claim()
    except BaseException:
        _stop_quietly(sink)
        raise
    log.info("[%s] exactly-once: transactional.id %s, %d offset(s) read from the target",
             name, sink.context.transactional_id, len(offsets))
    source_context.offset_storage_reader = OffsetStorageReader(offsets)
    _start_source(sink, start_source)
    return EpochTransactions(txns, name), EXACTLY_ONCE


def _start_source(sink: SinkTask, start_source: Callable[[], None]) -> None:
    try:
        start_source()
    except BaseException:
        _stop_quietly(sink)
        raise


def _stop_quietly(sink: SinkTask) -> None:
    try:
        sink.stop()
    except Exception as exc:  # noqa: BLE001 - the start's own error is the one to report
        log.debug("stopping a sink that did not start: %s", exc)
