"""Abandoning a Kafka sink task's producer, so that a transient failure holds its partition.

librdkafka alone does not keep the rule that nothing put after a record that failed transiently is
delivered before that record's re-send (an idempotent producer whose messages time out bumps its
epoch and goes on sending the later ones). So when a record fails transiently, when the oldest
unacknowledged record is older than the sink's delivery timeout (:class:`~connectors.kafka.puts.PutLog`)
or when the producer is in a fatal state, the task *abandons* its producer: everything queued and in
flight is purged, every failed record is reported transient in put order
(:class:`connect.sink.resend.InOrderReports`), the old producer is never pooled again and a fresh one
(fresh idempotence sequence numbers) takes over. A shared producer is retired instead (every task on
it re-sends its own records on a fresh one); under exactly-once the epoch's transaction is aborted.

:class:`ProducerAbandonment` is the part of :class:`~connectors.kafka.sink.KafkaSinkTask` that does
this; it works on the task's producer state: ``_producer``, ``_shared`` (a shared producer, or None),
``_txns`` (exactly-once, or None), ``_conf``, ``_owner``, ``_puts``, ``_reports``, the flags
``_broken`` (why the producer must be abandoned), ``_purging``, ``_tainted`` and ``_fenced``, the
delivery timeout (``_timeout_ms``, ``_timeout_key``) and the task's ``_settle`` (shared producers).
"""

from __future__ import annotations

import logging
import time

from confluent_kafka import KafkaException

from connect.errors import RetriesExhaustedError, TransactionAbortedError
from connectors.kafka.clients import POOL
from connectors.kafka.producers import PRODUCERS

__all__ = ["ProducerAbandonment"]

log = logging.getLogger("connectors.kafka.sink")  # the task's log, as before the split


class ProducerAbandonment:
    """When and how a Kafka sink task abandons its producer (see the module doc)."""

    def _must_abandon(self) -> bool:
        """A failure or fatal state of the producer, its retirement (shared), or a timed-out record."""
        return self._broken is not None or (self._shared is not None and self._shared.retired is not None) or \
            self._puts.expired()

    def _abandon(self, why: str | None = None) -> str:
        """Abandon the producer: purge what it queued and has in flight, report every record held
        or purged as transient in put order, and start a fresh producer (a purge does not reset
        the idempotence sequence numbers; a new producer does). The old one is never pooled.
        Returns why (the error text of its records)."""
        if self._shared is not None:
            return self._abandon_shared(why)
        if self._txns is not None:
            self._abandon_transaction(why)
        if why is None:
            why = self._broken or (f"timed out after {self._timeout_ms} ms ({self._timeout_key}): the producer "
                                   "was abandoned")
        old = self._producer
        self._tainted = True
        log.warning("producer of %s: delivery %s; every record without an outcome is re-sent in order by a fresh "
                    "producer", self._owner, why)
        # Purge fails every queued and in-flight message back; serving all those delivery reports
        # hands each record to the runner as a transient failure (re-sent). Every one must be
        # served: a record whose report is lost would count as delivered.
        left = -1
        self._purging = why
        try:
            old.purge()
            deadline = time.monotonic() + 10
            while (left := old.flush(0.5)) > 0 and time.monotonic() < deadline:
                pass
        except (KafkaException, SystemError):
            pass
        finally:
            self._purging = None
        self._report_held(why, left)
        self._producer = POOL.acquire("producer", f"{self._owner}-fresh", self._conf)
        return why

    def _abandon_transaction(self, why: str | None) -> None:
        """Exactly-once: a failed record cannot be re-sent inside the transaction in order; the epoch
        fails (the runner aborts the transaction) and the pair restarts from the target's offsets."""
        why = why or self._broken or "a record failed"
        if self._fenced:
            raise self._txns.fenced_error(why)
        raise TransactionAbortedError(f"transactional.id {self._txns.txn_id}: delivery {why}; the epoch's "
                                      "transaction is aborted and the pair restarts from the offsets in the target")

    def _report_held(self, why: str, left: int) -> None:
        """After an abandonment: every held or purged record reported transient, in put order."""
        self._broken = None
        for put in self._reports.report_held():
            put.left -= 1
            put.gen.left -= 1
        if left != 0:
            # Outcomes unknown: fail the pair (restarted with backoff, from committed offsets).
            raise RetriesExhaustedError(f"producer abandoned ({why}) and {max(left, 0)} of its messages report no "
                                        "outcome; restarting the task")
        self._puts.clear()

    def _abandon_shared(self, why: str | None) -> str:
        """``_abandon`` on a shared producer: retire it (every task's records on it are purged, each
        task re-sends its own in order on a fresh one), wait for an outcome of each of this task's
        records, report them in put order and take the fresh shared producer."""
        shared = self._shared
        why = why or self._broken or shared.retired or "not confirmed: the shared producer was abandoned"
        self._tainted = True
        if shared.retired is None:
            log.warning("producer of %s: delivery %s; the shared producer is retired and every record without an "
                        "outcome is re-sent in order by a fresh one", self._owner, why)
        shared.retire(why)
        self._purging = why
        try:
            self._settle(10)
        finally:
            self._purging = None
        self._report_held(why, self._puts.unsettled() - len(self._reports))
        fresh = PRODUCERS.acquire(self._conf)
        self._shared, self._producer = fresh, fresh.producer
        PRODUCERS.release(shared)
        return why
