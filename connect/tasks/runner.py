"""TaskPairRunner: one SourceTask feeding one SinkTask, one epoch at a time.

This is what one Spark partition executes (see ``worker.runtime.partition``), and what unit tests drive
directly. Within an epoch, records stream to the sink as soon as they are polled; when
``max.in.flight.records`` are unacknowledged the runner stops polling and asks the sink to
``pre_commit`` (backpressure); at the end of the epoch it does so once more and returns the
offsets that are now safe to persist, with stats and any failure.

At-least-once: an offset is returned only when every record at or before it in its source
partition was acknowledged, or - for a *permanent* failure - accepted by a RIP-45 hook, the
dead-letter topic or ``errors.tolerance=all``. A *transient* failure (timeout, lost connection,
full queue) is never skipped: the record is re-sent in order, with backoff, and its partition's
offset stays where it was until the re-sent record is acknowledged. A transient failure holds the
pair: it is taken as soon as the sink reports it (right after the put or the wait for outcomes that
brought it), and nothing new is put before the failed records are re-sent, in the sink's put order
(records a put never handed to its client behind them: :mod:`connect.tasks.resend`).
When something fails that nothing accepts, the partitions it touched keep their previous offsets
and the epoch ends FAILED.

Commit points: the records put between two commit points form a *generation*; which offsets
they make safe, for synchronous and asynchronous (checkpointing) sinks, is kept by
:class:`~connect.tasks.commits.CommitAccounting`. Backpressure waits for the oldest generation,
not for all of them.

Bounded epochs: polling stops at ``epoch_max_ms`` (or at once when the worker asks to stop);
failure handling gets ``epoch_grace_ms`` more. Every wait (poll, a full producer queue, flush,
retry backoff) is cut at that bound. An epoch of an asynchronous sink returns the offsets
acknowledged so far and does not wait for the records in flight; a stop drains them within the
grace. What was not acknowledged by the end of an epoch stays with this runner - in the sink's
client, or queued for re-sending - and is accounted in the next epoch; a runner that is not
reused (the pair moved, the process died) leaves those records to be replayed from the
committed offsets.
"""

from __future__ import annotations

import gc
import logging
import operator
import os
import socket
import time
import traceback
from typing import Any, Callable, Mapping, Sequence

from connect.batch import NativeBatch, native_allowed
from connect.errors import (
    ConnectError,
    ProducerFencedError,
    RetriableError,
    RetriesExhaustedError,
    TaskFailedError,
)
from connect.sink import ErrantRecordReporter, SinkTask, SinkTaskContext
from connect.sink.side import SideWriter
from connect.source import OffsetStorageReader, SourceTask, SourceTaskContext
from connect.tasks.bookkeeping import OpenedPartitions
from connect.tasks.bridge import BridgeLease
from connect.tasks.commits import CommitAccounting, Generation
from connect.tasks.exactlyonce import AT_LEAST_ONCE, EpochTransactions, adopting, open_pair
from connect.tasks.failures import DeadLetterQueue, FailedRecordHandler, PendingFailures
from connect.tasks.gcpause import gc_pause, gc_resume
from connect.tasks.listeners import AckListener, AckListeners
from connect.tasks.offsetsync import OffsetSyncListener
from connect.tasks.policy import RunnerPolicy
from connect.tasks.resend import DELIVERY, Resender
from connect.tasks.results import FAILED, RUNNING, EpochResult, EpochStats
from connect.tasks.retry import EpochOver, RetryPolicy
from connect.tasks.stages import StageChain, build_chain

__all__ = ["TaskPairRunner"]

log = logging.getLogger(__name__)

_VALUE = operator.attrgetter("value")
_KEY = operator.attrgetter("key")
_HOST = socket.gethostname()


def _payload_bytes(batch) -> int:
    """Key + value bytes of a batch holding None or non-bytes payloads."""
    return sum(len(x) for r in batch for x in (r.key, r.value) if isinstance(x, (bytes, bytearray, str)))


class _Carry:
    """What an epoch accumulates (its stats, failed-record handler, offsets committed), opened
    early when the pair keeps moving records between two epochs (``bridge``)."""

    __slots__ = ("stats", "handler", "committed", "started", "error")

    def __init__(self, stats: EpochStats, handler: FailedRecordHandler) -> None:
        self.stats = stats
        self.handler = handler
        self.committed: dict[str, dict[str, Any]] = {}
        self.started = time.time()
        self.error: BaseException | None = None  # raised by the bridge: the next epoch fails with it


class TaskPairRunner:
    """Owns a started source task and sink task; ``run_epoch`` moves records between them.

    State that outlives an epoch (records put but not yet acknowledged, transient failures
    waiting to be re-sent, the retry clocks) lives here, so the next epoch of the same runner
    continues where this one stopped.
    """

    def __init__(self, *, connector: str, task_id: int, source: SourceTask, sink: SinkTask,
                 source_config: Mapping[str, Any], sink_config: Mapping[str, Any], policy: RunnerPolicy,
                 offsets: Mapping[str, Mapping[str, Any]] | None = None,
                 offset_lookup: Callable[[list[str]], Mapping[str, Any]] | None = None,
                 dlq_factory: Callable[[], SideWriter] | None = None,
                 offset_syncs_factory: Callable[[], SideWriter] | None = None,
                 stages: StageChain | None = None,
                 listeners: Sequence[AckListener] = (),
                 stop_requested: Callable[[], bool] = lambda: False):
        self.connector = connector
        self.task_id = task_id
        self.name = f"{connector}-{task_id}"
        self.source = source
        self.sink = sink
        self.policy = policy
        # poll -> stages (replication, converters, transforms) -> put; ``stages`` given by the worker
        # (with the connector's transforms) or built from the policy and the converters
        self._chain = stages if stages is not None else build_chain(policy, source_config, sink_config)
        self._stop_requested = stop_requested
        # exactly-once: side writers to the target cluster join the epoch's transaction (built lazily,
        # once ``self._txn`` is known)
        dlq_factory, offset_syncs_factory = (adopting(f, lambda: self._txn) for f in (dlq_factory, offset_syncs_factory))
        self._dlq = DeadLetterQueue(dlq_factory) if dlq_factory is not None else None  # one writer per pair
        self._reporter = ErrantRecordReporter()
        self._retry = RetryPolicy(policy.retry_timeout_ms, policy.retry_delay_max_ms)
        self._opened = OpenedPartitions()
        self._wants_commit_record = type(source).commit_record is not SourceTask.commit_record
        self._failed = False
        self._start_offsets_due = True
        self._returned_offsets: dict | None = None
        self._async = type(sink).checkpoint is not SinkTask.checkpoint
        self._checkpoint_every = max(policy.max_in_flight_records // 4, 1)
        # -- carried across epochs --
        self._acct = CommitAccounting(self.source.commit_record if self._wants_commit_record else None)
        # transient failures and records never sent, waiting to be put again
        self._resend = Resender(lambda batch: self.sink.put(batch), self._retry, self._acct,
                                lambda batch: self._listeners.resending(batch))
        self._pending = PendingFailures(self.name)  # permanent failures: of stages, or waiting for the DLQ
        self._deadline = float("inf")
        self._carry: _Carry | None = None  # the next epoch, opened by ``bridge``
        self._lease = BridgeLease(self._set_deadline, lambda: self._deadline)
        self._bridgeable = False  # the last epoch moved records cleanly: the next may start early
        self.source.context = SourceTaskContext(self.name, source_config,
                                                OffsetStorageReader(offsets, lookup=offset_lookup))
        self.sink.context = SinkTaskContext(self.name, sink_config, self._reporter)
        self._txn: EpochTransactions | None = None  # exactly-once: one transaction per epoch
        self.delivery = AT_LEAST_ONCE
        # Side parts following the acknowledgements (offset syncs: ``offset_syncs_factory`` writes them).
        self._listeners = AckListeners(
            [*listeners, OffsetSyncListener.for_policy(policy, offset_syncs_factory, self.name)], self.name)
        self._start(source_config, sink_config)

    def _start(self, source_config: Mapping[str, Any], sink_config: Mapping[str, Any]) -> None:
        policy = self.policy
        try:
            self._listeners.attach(self.sink.context)
            self._native = self._native_path(policy)
            if policy.exactly_once != "disabled":  # the sink first: its offsets are where the source starts
                self._txn, self.delivery = open_pair(
                    self.sink, sink_config, self.source.context, policy.exactly_once, self.connector, self.task_id,
                    self.name, lambda: self.source.start(source_config, self.source.context))
            else:
                self.source.start(source_config, self.source.context)
                try:
                    self.sink.start(sink_config, self.sink.context)
                except BaseException:
                    self.source.stop()
                    raise
        except BaseException:
            self._chain.close()  # the transforms configured for this pair (a restart builds new ones)
            raise

    def _native_path(self, policy: RunnerPolicy) -> bool:
        """Whether this pair moves native batches (``connect.batch``); tells the source."""
        native, why = native_allowed(self.source, self.sink, self._chain.native, policy.native_batches, {
            "the source wants commit_record": self._wants_commit_record,
            "offset syncs follow every record": self.sink.context.positions is not None})
        if not native and getattr(self.source, "native_kind", None) is not None:
            log.info("[%s] moves records, not native batches: %s", self.name, why)
        self.source.context.native_batches = native
        return native

    # -- time --------------------------------------------------------------------------------
    def _set_deadline(self, deadline: float) -> None:
        self._deadline = self.source.context.deadline = self.sink.context.deadline = deadline

    def _time_left(self) -> float:
        return max(self._deadline - time.monotonic(), 0.0)

    def mark_open_gaps(self, gaps: int) -> None:
        """The connector's open source gaps (the worker's ledger): a replication flow marks what it writes."""
        self._chain.mark_open_gaps(gaps)

    # -- one epoch ---------------------------------------------------------------------------
    def run_epoch(self, epoch: int, *, max_ms: int | None = None, max_records: int | None = None,
                  drain: bool = False) -> EpochResult:
        """One epoch. ``drain``: wait (within the grace period) for every record in flight to be
        acknowledged, as a stop does: the pair is about to run elsewhere, from these offsets."""
        p = self.policy
        max_ms = p.epoch_max_ms if max_ms is None else max_ms
        max_records = p.epoch_max_records if max_records is None else max_records
        self._lease.reset()
        carry, self._carry = self._carry or self._open_epoch(), None
        stats = carry.stats
        end_polling = time.monotonic() + max_ms / 1000
        self._set_deadline(end_polling)
        state, trace, retriable = RUNNING, None, False
        # Records are acyclic and freed by reference counting; the cyclic collector would
        # re-scan every in-flight record many times per epoch. Pause it and collect the young
        # generations at each commit point instead.
        gc_pause()
        try:
            committed = self._epoch(carry, max_records, end_polling, drain)
        except Exception as exc:  # noqa: BLE001 - every failure is reported with its trace
            self._failed = True
            self._bridgeable = False
            state = FAILED
            committed = carry.committed
            # A fenced runner never commits again; the driver discards its result when a newer attempt
            # holds the pair (fencing token), and otherwise restarts the pair with backoff.
            retriable = isinstance(exc, (RetriesExhaustedError, RetriableError, ProducerFencedError))
            if self._txn is not None:  # nothing of it becomes visible, its offsets included
                committed = {}
                stats.fenced += isinstance(exc, ProducerFencedError)
                self._txn.abort_failed(stats)
            trace = "".join(traceback.format_exception(exc))
            log.error("task %s failed in epoch %d: %s", self.name, epoch, exc)
        finally:
            self._set_deadline(float("inf"))
            gc_resume()
        stats.delivery = self.delivery
        return self._result(epoch, state, committed, stats, carry.started, trace, retriable)

    def _epoch(self, carry: _Carry, max_records: int, end_polling: float, drain: bool) -> dict:
        """Move records, then settle within the grace period; returns the offsets the epoch commits."""
        stats, handler, committed = carry.stats, carry.handler, carry.committed
        if self._failed:
            raise TaskFailedError("task failed in an earlier epoch; restart it")
        if carry.error is not None:
            raise carry.error
        if self._start_offsets_due:
            self._start_offsets_due = False
            if self._persist_start_offsets(committed):
                max_records = 0
        if self._txn is not None:
            self._txn.begin()
        try:
            self._move(max_records, committed, handler, stats)
        except EpochOver:
            pass
        # The final commit point and failure handling get the grace period, from the deadline
        # or from now if the epoch ended early (stop signal, record count).
        self._set_deadline(min(end_polling, time.monotonic()) + self.policy.epoch_grace_ms / 1000)
        # An asynchronous sink's records in flight stay with the pair (next epoch), unless it stops.
        # (A synchronous sink was flushed by the commit point already.)
        # Exactly-once: the transaction commits only with every record of it acknowledged.
        drain = self._async and (drain or self._stop_requested() or self._txn is not None)
        self._settle(drain, committed, handler, stats)
        if self._txn is not None:
            committed = self._txn.end_epoch(committed, self._settled(), stats)
        stats.in_flight = self._acct.in_flight + len(self._resend)
        stats.retrying = self._retrying()
        self._returned_offsets = dict(committed) if committed else None
        # (exactly-once: an epoch is one transaction, nothing moves between two)
        self._bridgeable = stats.records > 0 and not (stats.transient or stats.errors or stats.retries or
                                                    self._resend) and self._txn is None
        return committed

    def _settle(self, drain: bool, committed: dict, handler: FailedRecordHandler, stats: EpochStats) -> None:
        """The epoch's last commit point; re-sends due within the grace, and (``drain``) outcomes."""
        try:
            self._resend.send_due(stats)
            self._commit_point(committed, handler, stats)
            # (exactly-once: dead letters waiting for their acknowledgement too, as they are in the transaction)
            while self._resend or (drain and (self._acct.generations or (self._txn is not None and self._pending.waiting))):
                # A transient blip is re-sent within the grace period if it allows; a stop drains.
                self._await_progress()
                self._take_failures(committed, handler, stats)
                self._resend.send_due(stats)
                self._commit_point(committed, handler, stats)
        except EpochOver:
            pass

    def _result(self, epoch: int, state: str, committed: dict, stats: EpochStats, started: float,
                trace: str | None, retriable: bool) -> EpochResult:
        """The epoch's result, with what the tasks say of themselves (lag, gaps, metrics)."""
        lag = reported = None
        try:
            lag = self.source.lag()
        except Exception:  # noqa: BLE001 - lag is informational
            pass
        partition_lag = self._partition_lag()
        try:
            gaps = [g.as_dict() for g in self.source.take_gaps()] or None
            if gaps:
                self._listeners.source_gaps(gaps)  # offset syncs say so too (connect.tasks.offsetsync)
        except Exception as exc:  # noqa: BLE001 - a source that cannot say must not lose the epoch's offsets
            log.warning("[%s] source gaps: %s", self.name, exc)
            gaps = None
        try:
            reported = {**self.source.metrics(), **self.sink.metrics(), **self._listeners.metrics()} or None
        except Exception as exc:  # noqa: BLE001 - so are the tasks' own gauges
            log.warning("[%s] task metrics: %s", self.name, exc)
        return EpochResult(self.connector, self.task_id, epoch, state, committed, stats.as_dict(), started,
                           time.time(), lag=lag, trace=trace, pid=os.getpid(), retriable=retriable, host=_HOST,
                           metrics=reported, partition_lag=partition_lag, gaps=gaps)

    def _settled(self) -> bool:
        """Every record put has an outcome and nothing is held: the transaction may commit."""
        return self._acct.settled() and not (self._resend or self._pending)

    def _open_epoch(self) -> _Carry:
        p = self.policy
        stats = EpochStats()
        self._retry.on_retry = lambda: setattr(stats, "retries", stats.retries + 1)
        handler = FailedRecordHandler(
            source=self.source, stats=stats, tolerance_all=p.tolerance_all, log_errors=p.log_errors,
            dlq=self._dlq, connector=self.connector, task=str(self.task_id),
            dlq_headers=p.dlq_context_headers, deadline=lambda: self._deadline)
        return _Carry(stats, handler)

    # -- between epochs ----------------------------------------------------------------------
    def bridge(self, until: float) -> None:
        """Between two epochs: keep moving records until ``until`` (monotonic), ``halt()`` or a stop
        request, so the pipeline does not pause while the next epoch is being scheduled. Only in
        the steady state: after an epoch that moved records with no failure and nothing waiting to be
        re-sent (setting up targets, re-sends and the like get a whole epoch's time).

        What it polls, puts and sees acknowledged belongs to the next epoch: its stats, its budget
        of records and the offsets it returns. Nothing is committed meanwhile, so a process lost
        during a bridge replays it like any epoch in progress. The caller runs it while no epoch
        runs (the pair's lock), and ``halt()`` gives the pair back at the next batch (at most one
        source poll's wait). Not once a stop was requested (a stop drains in an epoch of its own).
        ``renew_bridge`` extends ``until`` while it runs (:class:`~connect.tasks.bridge.BridgeLease`)."""
        lease = self._lease
        if not self._bridgeable or self._resend or lease.halted.is_set() or self._stop_requested():
            return
        if self._carry is None:
            self._carry = self._open_epoch()
        carry = self._carry
        gc_pause()
        lease.begin(until)
        try:
            if not lease.halted.is_set():
                self._move(self.policy.epoch_max_records, carry.committed, carry.handler, carry.stats)
        except EpochOver:
            pass
        except Exception as exc:  # noqa: BLE001 - the next epoch reports it (FAILED, with its trace)
            carry.error = exc
        finally:
            lease.end()
            gc_resume()

    def renew_bridge(self, until: float) -> None:
        """Let the bridge run until ``until`` (monotonic) if that is later than its lease (from another
        thread; also for the bridge about to start). The driver starts a connector's next epoch only
        once every pair's result is in: a pair that ended its epoch early (its record budget)
        would otherwise stand idle after its lease until the slowest sibling ended (issue 36)."""
        self._lease.renew(until)

    def halt(self) -> None:
        """Stop a ``bridge`` (from another thread): its loop ends at the next batch."""
        self._lease.halt()

    def _partition_lag(self) -> dict[str, list[float]] | None:
        """Per source partition: [records behind the source's end, seconds behind] (``CommitAccounting.partition_lag``)."""
        try:
            behind = self.source.lag_by_partition()
        except Exception:  # noqa: BLE001 - informational
            return None
        return self._acct.partition_lag(behind) if behind else None

    def _persist_start_offsets(self, committed: dict) -> bool:
        """Persist where never-committed partitions start (latest, a timestamp, the low watermark)
        in an epoch of its own, before any record moves: a crash or restart after that resumes
        there instead of resolving the start position again."""
        proposed = self.source.start_offsets()
        if not proposed:
            return False
        known = self.source.context.offset_storage_reader.offsets_by_key(list(proposed))
        fresh = {k: dict(v) for k, v in proposed.items() if known.get(k) is None}
        committed.update(fresh)
        return bool(fresh)

    def _move(self, max_records: int, committed: dict, handler: FailedRecordHandler, stats: EpochStats) -> None:
        """Poll and put until the epoch's time or record budget is spent, or a stop is requested."""
        max_in_flight = self.policy.max_in_flight_records
        checkpoint_every = self._checkpoint_every if self._async else max_in_flight
        chain = self._chain.apply if self._chain else None
        native_chain = self._chain.native if self._native else None
        stage_failures = self._pending.stage
        acct, resend = self._acct, self._resend
        polled = acct.polled
        halt = self._lease.halted
        source_ctx = getattr(self.source, "context", None)
        while stats.records < max_records:
            if halt.is_set():
                return
            if self._stop_requested():
                self._set_deadline(time.monotonic())
                return
            if time.monotonic() >= self._deadline:
                return
            if (resend or acct.in_flight + len(resend) >= max_in_flight) and \
                    self._no_room(max_in_flight, committed, handler, stats):
                continue
            if acct.put >= checkpoint_every:
                self._commit_point(committed, handler, stats)
            if source_ctx is not None:
                source_ctx.poll_limit = min(max_records - stats.records, max_in_flight - acct.in_flight - len(resend))
            batch = self._retry.call("source poll", self.source.poll, self._time_left)
            if not batch:
                continue
            native = batch.__class__ is NativeBatch
            # Last record per source partition; offsets follow what was polled, whatever the stages
            # make of it: a record a stage failed advances its partition only once resolved.
            # A native batch knows its own (offsets per batch, not per record).
            last = batch.last if native else {id(r.source_partition): r for r in batch}
            polled.update(last)
            if self._opened.unknown(last):
                new = self._opened.new(last)
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
            self._put_batch(batch, native, committed, handler, stats)

    def _no_room(self, max_in_flight: int, committed: dict, handler: FailedRecordHandler, stats: EpochStats) -> bool:
        """Records waiting to be re-sent, or too many unacknowledged: nothing new may be polled yet.
        Re-sends what is due and waits for progress; True when the loop must look again."""
        acct, resend = self._acct, self._resend
        if resend:
            # Records waiting to be re-sent go out before anything new (order is kept).
            self._resend.send_due(stats)
            self._take_failures(committed, handler, stats)
            if resend:
                self._await_progress()
                if resend.waits():  # see which generations completed meanwhile
                    self._commit_point(committed, handler, stats)
                else:
                    self._take_failures(committed, handler, stats)
                return True
        if acct.in_flight + len(resend) >= max_in_flight:
            self._commit_point(committed, handler, stats)
            if acct.in_flight + len(resend) >= max_in_flight:
                # Still too much unacknowledged: wait for the oldest generation (an outage:
                # for the next re-send), not a spin.
                self._await_progress()
                self._take_failures(committed, handler, stats)
            return True
        return False

    def _put_batch(self, batch, native: bool, committed: dict, handler: FailedRecordHandler,
                   stats: EpochStats) -> None:
        put = self.sink.put_native if native else self.sink.put
        try:
            self._retry.call("sink put", lambda b=batch, p=put: p(b), self._time_left)
        except EpochOver:
            # The sink did not take the batch in time, and its offsets are in this generation
            # already: it goes out first next time (no commit point passes records not sent).
            self._resend.defer(batch.records() if native else batch, stats)
            raise
        if native:
            size = batch.payload_bytes()
        else:
            try:  # payload bytes, at C speed when every key and value is bytes or None
                size = sum(map(len, filter(None, map(_VALUE, batch)))) + sum(map(len, filter(None, map(_KEY, batch))))
            except TypeError:
                size = _payload_bytes(batch)
        self._acct.sent(batch)
        stats.records += len(batch)
        stats.bytes += size
        last_ts = batch[-1].timestamp
        if last_ts:
            now_ms = time.time() * 1000
            stats.observe_batch_latency(now_ms - (batch[0].timestamp or last_ts), now_ms - last_ts, len(batch))
        if self._reporter.failed:  # one list length per batch: a failure is taken before anything new goes out
            self._take_failures(committed, handler, stats)

    def _await_progress(self) -> None:
        """Wait for something to change: the next re-send's backoff, or (asynchronous sink) an
        outcome of the records in flight. Raises EpochOver when the epoch's time is up."""
        left = self._time_left()
        if left <= 0:
            raise EpochOver
        resend = self._resend
        if not self._async or (resend and not self._acct.generations):
            self._retry.wait(resend.backoff_left(), self._time_left)
            return
        wait = min(left, 0.1)
        if resend and not resend.waits():
            wait = min(wait, resend.backoff_left())
        self.sink.wait_outcomes(wait)

    def offsets_persisted(self) -> None:
        """The driver persisted the offsets the last epoch returned: tell the source (``commit``,
        then ``offsets_committed`` with those offsets)."""
        if self._returned_offsets:
            offsets, self._returned_offsets = self._returned_offsets, None
            self.source.commit()
            self.source.offsets_committed(offsets)

    # -- transient failures ------------------------------------------------------------------
    def _take_failures(self, committed: dict, handler: FailedRecordHandler, stats: EpochStats) -> None:
        """Eager intake: a transient failure the sink reported (in a put, or while serving outcomes) is
        taken at once by a commit point, which queues it for re-sending, so no new record is put
        between its report and its re-send: the pair (each of its partitions) is held until then.
        Permanent failures alone wait for the next regular commit point (they hold nothing)."""
        failed = self._reporter.failed
        if failed and any(isinstance(e, RetriableError) for _, e in failed):
            self._commit_point(committed, handler, stats)

    def _queue_resend(self, transient: list, stats: EpochStats) -> None:
        stats.transient += len(transient)
        if self._txn is not None:
            self._txn.refuse_resend(transient)
        for reason, n in stats.count_reasons(transient).items():
            log.warning("[%s] %d record(s) not delivered, transient (re-sent, offsets held): %s", self.name, n, reason)
        self._resend.failed(transient)

    # -- commit points (the accounting: connect.tasks.commits) ---------------------------------
    def _complete_generations(self) -> list[Generation]:
        """The generations whose records (and every earlier one's) all have outcomes: the
        checkpoints an asynchronous sink says are done, or all once a synchronous sink's flush
        (``pre_commit``) answers for every partition."""
        if self._async:
            self.sink.wait_outcomes(0)
            return self._acct.checkpointed()
        offsets = self._acct.unflushed()
        safe = self._retry.call("sink flush", lambda: self.sink.pre_commit(offsets), self._time_left)
        return self._acct.flushed(offsets, safe)

    def _commit_point(self, committed: dict, handler: FailedRecordHandler, stats: EpochStats) -> None:
        """Close the generation, see which ones completed, sort out failed records, and move
        ``committed`` forward where allowed."""
        acct = self._acct
        acct.close(self.sink.checkpoint if self._async else None)
        stats.flushes += 1
        complete = self._complete_generations()
        # Every failure of a complete generation was reported before it completed: take them now.
        failures = self._reporter.take()
        acct.failures_reported(failures)
        transient = [f for f in failures if isinstance(f[1], RetriableError)]
        if transient:  # an outcome, not an acknowledgement: they count once a re-send is delivered
            acct.unacknowledged(len(transient), stats)
            self._queue_resend(transient, stats)
        acct.acknowledge(complete, stats)
        self._resend.settle()
        unresolved = self._pending.resolve([f for f in failures if not isinstance(f[1], RetriableError)], handler, stats)
        blocked = self._resend.held()
        blocked.update(self._pending.held(unresolved))
        acct.release(blocked, committed, stats)
        self._listeners.commit_point()
        gc.collect(1)
        if unresolved:
            record, error = unresolved[0]
            raise TaskFailedError(
                f"{len(unresolved)} record(s) could not be written and nothing tolerated them "
                f"(no hook accepted them, no errors.deadletterqueue.topic.name, errors.tolerance=none); "
                f"first: {record.position()}: {type(error).__name__}: {error}") from error

    def _retrying(self) -> list[dict[str, Any]]:
        """What is failing transiently right now, for the operator (status, progress, metrics)."""
        out = []
        for what, seconds, reason in self._retry.streaks():
            held = self._resend.held() if what == DELIVERY else set()
            out.append({"operation": what, "reason": reason, "for_s": round(seconds, 1), "partitions": sorted(held)})
        return out

    # -- lifecycle -----------------------------------------------------------------------------
    def stop(self) -> None:
        errors = []
        self._set_deadline(time.monotonic() + 1.0)  # a stopping sink may flush a little, not wait long
        for step in (lambda: self.sink.close(self._opened.all()), self.sink.stop, self._listeners.close,
                     self._chain.close, self.source.stop, lambda: self._dlq and self._dlq.close()):
            try:
                step()
            except Exception as exc:  # noqa: BLE001 - stop everything, report the first failure
                errors.append(exc)
        self._opened.clear()
        if errors:
            raise ConnectError(f"task {self.name} did not stop cleanly: {errors[0]}") from errors[0]
