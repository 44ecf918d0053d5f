"""RecordMover: the loop that moves a task pair's records, poll -> stages -> put, and its commit points.

Records stream to the sink as soon as they are polled; when ``max.in.flight.records`` are
unacknowledged the mover stops polling and asks the sink to ``pre_commit`` (backpressure).
:class:`~connect.tasks.runner.TaskPairRunner` opens and closes the epochs it runs in.

At-least-once: an offset moves into an epoch's ``committed`` only when every record at or before it
in its source partition was acknowledged, or - for a *permanent* failure - accepted by a RIP-45 hook,
the dead-letter topic or ``errors.tolerance=all``. A *transient* failure (timeout, lost connection,
full queue) is never skipped: the record is re-sent in order, with backoff, and its partition's
offset stays where it was until the re-sent record is acknowledged. A transient failure holds the
pair: it is taken as soon as the sink reports it (right after the put or the wait for outcomes that
brought it), and nothing new is put before the failed records are re-sent, in the sink's put order
(records a put never handed to its client behind them: :mod:`connect.tasks.resend`).
When something fails that nothing accepts, :class:`~connect.errors.TaskFailedError` is raised: the
partitions it touched keep their previous offsets.

Commit points: the records put between two commit points form a *generation*; which offsets
they make safe, for synchronous and asynchronous (checkpointing) sinks, is kept by
:class:`~connect.tasks.commits.CommitAccounting`. Backpressure waits for the oldest generation,
not for all of them. Every wait (poll, a full producer queue, flush, retry backoff) is cut at the
mover's deadline (:meth:`RecordMover.set_deadline`), raising :class:`~connect.tasks.retry.EpochOver`.
"""

from __future__ import annotations

import gc
import logging
import operator
import threading
import time
from typing import Any

from connect.batch import NativeBatch
from connect.errors import RetriableError, TaskFailedError
from connect.sink import ErrantRecordReporter, SinkTask
from connect.source import SourceTask
from connect.tasks.bookkeeping import OpenedPartitions
from connect.tasks.commits import CommitAccounting, Generation
from connect.tasks.exactlyonce import EpochTransactions
from connect.tasks.failures import FailedRecordHandler, PendingFailures
from connect.tasks.listeners import AckListeners
from connect.tasks.plan import PairPlan
from connect.tasks.resend import DELIVERY, Resender
from connect.tasks.results import EpochStats
from connect.tasks.retry import EpochOver, RetryPolicy

__all__ = ["EpochCarry", "RecordMover"]

log = logging.getLogger(__name__)

_VALUE = operator.attrgetter("value")
_KEY = operator.attrgetter("key")


def _payload_bytes(batch) -> int:
    """Key + value bytes of a batch holding None or non-bytes payloads."""
    return sum(len(x) for r in batch for x in (r.key, r.value) if isinstance(x, (bytes, bytearray, str)))


class EpochCarry:
    """What an epoch accumulates (its stats, failed-record handler, offsets committed), opened
    early when the pair keeps moving records between two epochs (``TaskPairRunner.bridge``)."""

    __slots__ = ("stats", "handler", "committed", "started", "error")

    def __init__(self, stats: EpochStats, handler: FailedRecordHandler) -> None:
        self.stats = stats
        self.handler = handler
        self.committed: dict[str, dict[str, Any]] = {}
        self.started = time.time()
        self.error: BaseException | None = None  # raised by the bridge: the next epoch fails with it


class RecordMover:
    """Moves records of one pair and keeps what outlives an epoch: records put but not yet
    acknowledged (``acct``), transient failures waiting to be re-sent (``resend``), permanent ones
    waiting to be resolved (``pending``) and the retry clocks (``retry``)."""

    def __init__(self, plan: PairPlan, listeners: AckListeners, halted: threading.Event) -> None:
        self.name = plan.name
        self.source: SourceTask = plan.source
        self.sink: SinkTask = plan.sink
        self.chain = plan.stages
        self._stop_requested = plan.stop_requested
        self._halted = halted  # a bridge's halt: moving stops at the next batch
        self._listeners = listeners
        self._max_in_flight = plan.policy.max_in_flight_records
        self.asynchronous = type(plan.sink).checkpoint is not SinkTask.checkpoint
        self._checkpoint_every = max(self._max_in_flight // 4, 1) if self.asynchronous else self._max_in_flight
        self.wants_commit_record = type(plan.source).commit_record is not SourceTask.commit_record
        self.native = False  # moves native batches (``connect.batch``); set once the pair has started
        self.txn: EpochTransactions | None = None  # exactly-once: one transaction per epoch
        self.reporter = ErrantRecordReporter()
        self.retry = RetryPolicy(plan.policy.retry_timeout_ms, plan.policy.retry_delay_max_ms)
        self.opened = OpenedPartitions()
        self.acct = CommitAccounting(plan.source.commit_record if self.wants_commit_record else None)
        # transient failures and records never sent, waiting to be put again
        self.resend = Resender(lambda batch: self.sink.put(batch), self.retry, self.acct,
                               lambda batch: self._listeners.resending(batch))
        self.pending = PendingFailures(self.name)  # permanent failures: of stages, or waiting for the DLQ
        self.deadline = float("inf")

    # -- time --------------------------------------------------------------------------------
    def set_deadline(self, deadline: float) -> None:
        self.deadline = self.source.context.deadline = self.sink.context.deadline = deadline

    def time_left(self) -> float:
        return max(self.deadline - time.monotonic(), 0.0)

    # -- the loop ----------------------------------------------------------------------------
    def move(self, max_records: int, carry: EpochCarry) -> None:
        """Poll and put until the deadline or the record budget is reached, or a stop is requested."""
        max_in_flight = self._max_in_flight
        checkpoint_every = self._checkpoint_every
        chain = self.chain.apply if self.chain else None
        native_chain = self.chain.native if self.native else None
        stage_failures = self.pending.stage
        stats = carry.stats
        acct, resend = self.acct, self.resend
        polled = acct.polled
        halt = self._halted
        source_ctx = getattr(self.source, "context", None)
        while stats.records < max_records:
            if halt.is_set():
                return
            if self._stop_requested():
                self.set_deadline(time.monotonic())
                return
            if time.monotonic() >= self.deadline:
                return
            if (resend or acct.in_flight + len(resend) >= max_in_flight) and self._no_room(carry):
                continue
            if acct.put >= checkpoint_every:
                self.commit_point(carry)
            if source_ctx is not None:
                source_ctx.poll_limit = min(max_records - stats.records, max_in_flight - acct.in_flight - len(resend))
            batch = self.retry.call("source poll", self.source.poll, self.time_left)
            if not batch:
                continue
            native = batch.__class__ is NativeBatch
            # Last record per source partition; offsets follow what was polled, whatever the stages
            # make of it: a record a stage failed advances its partition only once resolved.
            # A native batch knows its own (offsets per batch, not per record).
            last = batch.last if native else {id(r.source_partition): r for r in batch}
            polled.update(last)
            if self.opened.unknown(last):
                new = self.opened.new(last)
                if new:
                    self.sink.open(new)
            if native:
                if native_chain is not None:  # header-only stages: overlays, no records
                    batch, dropped = native_chain(batch)
                    if dropped:
                        stats.filtered += dropped
                    if not batch:
                        continue
            elif chain is not None:  # replication, converters, transforms
                batch, dropped, failed = chain(batch)
                if dropped:
                    stats.filtered += dropped
                if failed:
                    stage_failures.extend(failed)
                if not batch:
                    continue
            self._put_batch(batch, native, carry)

    def _no_room(self, carry: EpochCarry) -> bool:
        """Records waiting to be re-sent, or too many unacknowledged: nothing new may be polled yet.
        Re-sends what is due and waits for progress; True when the loop must look again."""
        acct, resend, max_in_flight = self.acct, self.resend, self._max_in_flight
        if resend:
            # Records waiting to be re-sent go out before anything new (order is kept).
            resend.send_due(carry.stats)
            self._take_failures(carry)
            if resend:
                self._await_progress()
                if resend.waits():  # see which generations completed meanwhile
                    self.commit_point(carry)
                else:
                    self._take_failures(carry)
                return True
        if acct.in_flight + len(resend) >= max_in_flight:
            self.commit_point(carry)
            if acct.in_flight + len(resend) >= max_in_flight:
                # Still too much unacknowledged: wait for the oldest generation (an outage:
                # for the next re-send), not a spin.
                self._await_progress()
                self._take_failures(carry)
            return True
        return False

    def _put_batch(self, batch, native: bool, carry: EpochCarry) -> None:
        stats = carry.stats
        put = self.sink.put_native if native else self.sink.put
        try:
            self.retry.call("sink put", lambda b=batch, p=put: p(b), self.time_left)
        except EpochOver:
            # The sink did not take the batch in time, and its offsets are in this generation
            # already: it goes out first next time (no commit point passes records not sent).
            self.resend.defer(batch.records() if native else batch, stats)
            raise
        if native:
            size = batch.payload_bytes()
        else:
            try:  # payload bytes, at C speed when every key and value is bytes or None
                size = sum(map(len, filter(None, map(_VALUE, batch)))) + sum(map(len, filter(None, map(_KEY, batch))))
            except TypeError:
                size = _payload_bytes(batch)
        self.acct.sent(batch)
        stats.records += len(batch)
        stats.bytes += size
        last_ts = batch[-1].timestamp
        if last_ts:
            now_ms = time.time() * 1000
            stats.observe_batch_latency(now_ms - (batch[0].timestamp or last_ts), now_ms - last_ts, len(batch))
        if self.reporter.failed:  # one list length per batch: a failure is taken before anything new goes out
            self._take_failures(carry)

    def _await_progress(self) -> None:
        """Wait for something to change: the next re-send's backoff, or (asynchronous sink) an
        outcome of the records in flight. Raises EpochOver when the deadline is reached."""
        left = self.time_left()
        if left <= 0:
            raise EpochOver
        resend = self.resend
        if not self.asynchronous or (resend and not self.acct.generations):
            self.retry.wait(resend.backoff_left(), self.time_left)
            return
        wait = min(left, 0.1)
        if resend and not resend.waits():
            wait = min(wait, resend.backoff_left())
        self.sink.wait_outcomes(wait)

    def settle(self, drain: bool, carry: EpochCarry) -> None:
        """The epoch's last commit point; re-sends due before the deadline, and (``drain``) outcomes."""
        resend = self.resend
        try:
            resend.send_due(carry.stats)
            self.commit_point(carry)
            # (exactly-once: dead letters waiting for their acknowledgement too, as they are in the transaction)
            while resend or (drain and (self.acct.generations or (self.txn is not None and self.pending.waiting))):
                # A transient blip is re-sent within the grace period if it allows; a stop drains.
                self._await_progress()
                self._take_failures(carry)
                resend.send_due(carry.stats)
                self.commit_point(carry)
        except EpochOver:
            pass

    def settled(self) -> bool:
        """Every record put has an outcome and nothing is held: the transaction may commit."""
        return self.acct.settled() and not (self.resend or self.pending)

    # -- transient failures ------------------------------------------------------------------
    def _take_failures(self, carry: EpochCarry) -> None:
        """Eager intake: a transient failure the sink reported (in a put, or while serving outcomes) is
        taken at once by a commit point, which queues it for re-sending, so no new record is put
        between its report and its re-send: the pair (each of its partitions) is held until then.
        Permanent failures alone wait for the next regular commit point (they hold nothing)."""
        failed = self.reporter.failed
        if failed and any(isinstance(e, RetriableError) for _, e in failed):
            self.commit_point(carry)

    def _queue_resend(self, transient: list, stats: EpochStats) -> None:
        stats.transient += len(transient)
        if self.txn is not None:
            self.txn.refuse_resend(transient)
        for reason, n in stats.count_reasons(transient).items():
            log.warning("[%s] %d record(s) not delivered, transient (re-sent, offsets held): %s", self.name, n, reason)
        self.resend.failed(transient)

    def retrying(self) -> list[dict[str, Any]]:
        """What is failing transiently right now, for the operator (status, progress, metrics)."""
        out = []
        for what, seconds, reason in self.retry.streaks():
            held = self.resend.held() if what == DELIVERY else set()
            out.append({"operation": what, "reason": reason, "for_s": round(seconds, 1), "partitions": sorted(held)})
        return out

    # -- commit points (the accounting: connect.tasks.commits) ---------------------------------
    def _complete_generations(self) -> list[Generation]:
        """The generations whose records (and every earlier one's) all have outcomes: the
        checkpoints an asynchronous sink says are done, or all once a synchronous sink's flush
        (``pre_commit``) answers for every partition."""
        if self.asynchronous:
            self.sink.wait_outcomes(0)
            return self.acct.checkpointed()
        offsets = self.acct.unflushed()
        safe = self.retry.call("sink flush", lambda: self.sink.pre_commit(offsets), self.time_left)
        return self.acct.flushed(offsets, safe)

    def commit_point(self, carry: EpochCarry) -> None:
        """Close the generation, see which ones completed, sort out failed records, and move
        ``carry.committed`` forward where allowed."""
        acct, stats = self.acct, carry.stats
        acct.close(self.sink.checkpoint if self.asynchronous else None)
        stats.flushes += 1
        complete = self._complete_generations()
        # Every failure of a complete generation was reported before it completed: take them now.
        failures = self.reporter.take()
        acct.failures_reported(failures)
        transient = [f for f in failures if isinstance(f[1], RetriableError)]
        if transient:  # an outcome, not an acknowledgement: they count once a re-send is delivered
            acct.unacknowledged(len(transient), stats)
            self._queue_resend(transient, stats)
        acct.acknowledge(complete, stats)
        self.resend.settle()
        unresolved = self.pending.resolve([f for f in failures if not isinstance(f[1], RetriableError)],
                                          carry.handler, stats)
        blocked = self.resend.held()
        blocked.update(self.pending.held(unresolved))
        acct.release(blocked, carry.committed, stats)
        self._listeners.commit_point()
        gc.collect(1)
        if unresolved:
            record, error = unresolved[0]
            raise TaskFailedError(
                f"{len(unresolved)} record(s) could not be written and nothing tolerated them "
                f"(no hook accepted them, no errors.deadletterqueue.topic.name, errors.tolerance=none); "
                f"first: {record.position()}: {type(error).__name__}: {error}") from error
