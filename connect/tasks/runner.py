"""TaskPairRunner: one SourceTask feeding one SinkTask, one epoch at a time.

This is what one Spark partition executes (see ``worker.runtime.partition``), and what unit tests drive
directly. The runtime describes the pair in a :class:`~connect.tasks.plan.PairPlan`; the runner starts
its tasks, and each epoch moves records between them with a :class:`~connect.tasks.mover.RecordMover`
(poll -> stages -> put, backpressure, commit points, re-sends) and returns the offsets that are now
safe to persist, with stats and any failure. When something fails that nothing accepts, the
partitions it touched keep their previous offsets and the epoch ends FAILED.

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

import logging
import os
import socket
import threading
import time
import traceback

from connect.batch import native_allowed
from connect.errors import ConnectError, ProducerFencedError, RetriableError, RetriesExhaustedError, TaskFailedError
from connect.sink import SinkTaskContext
from connect.source import OffsetStorageReader, SourceTaskContext
from connect.tasks.bridge import BridgeLease
from connect.tasks.exactlyonce import AT_LEAST_ONCE, EpochTransactions, adopting, open_pair
from connect.tasks.failures import DeadLetterQueue, FailedRecordHandler
from connect.tasks.gcpause import gc_pause, gc_resume
from connect.tasks.listeners import AckListeners
from connect.tasks.mover import EpochCarry, RecordMover
from connect.tasks.offsetsync import OffsetSyncListener
from connect.tasks.plan import PairPlan
from connect.tasks.results import FAILED, RUNNING, EpochResult, EpochStats
from connect.tasks.retry import EpochOver

__all__ = ["TaskPairRunner"]

log = logging.getLogger(__name__)

_HOST = socket.gethostname()


class TaskPairRunner:
    """Owns a started source task and sink task; ``run_epoch`` moves records between them.

    State that outlives an epoch (records put but not yet acknowledged, transient failures
    waiting to be re-sent, the retry clocks) lives in its mover, so the next epoch of the same
    runner continues where this one stopped.
    """

    def __init__(self, plan: PairPlan):
        self.connector = plan.connector
        self.task_id = plan.task_id
        self.name = plan.name
        self.source = plan.source
        self.sink = plan.sink
        self.policy = policy = plan.policy
        self._chain = plan.stages
        self._stop_requested = plan.stop_requested
        # exactly-once: side writers to the target cluster join the epoch's transaction (built lazily,
        # once ``self._txn`` is known)
        dlq_factory, offset_syncs_factory = (adopting(f, lambda: self._txn)
                                             for f in (plan.dlq_factory, plan.offset_syncs_factory))
        self._dlq = DeadLetterQueue(dlq_factory) if dlq_factory is not None else None  # one writer per pair
        self._failed = False
        self._start_offsets_due = True
        self._returned_offsets: dict | None = None
        self._txn: EpochTransactions | None = None  # exactly-once: one transaction per epoch
        self.delivery = AT_LEAST_ONCE
        # Side parts following the acknowledgements (offset syncs: ``offset_syncs_factory`` writes them).
        self._listeners = AckListeners(
            [*plan.listeners, OffsetSyncListener.for_policy(policy, offset_syncs_factory, self.name)], self.name)
        halted = threading.Event()
        self._mover = mover = RecordMover(plan, self._listeners, halted)
        self._carry: EpochCarry | None = None  # the next epoch, opened by ``bridge``
        self._lease = BridgeLease(mover.set_deadline, lambda: mover.deadline, halted)
        self._bridgeable = False  # the last epoch moved records cleanly: the next may start early
        self.source.context = SourceTaskContext(self.name, plan.source_config,
                                                OffsetStorageReader(plan.offsets, lookup=plan.offset_lookup))
        self.sink.context = SinkTaskContext(self.name, plan.sink_config, mover.reporter)
        self._start(plan)

    def _start(self, plan: PairPlan) -> None:
        policy = self.policy
        try:
            self._listeners.attach(self.sink.context)
            self._mover.native = self._native_path(policy)
            if policy.exactly_once != "disabled":  # the sink first: its offsets are where the source starts
                self._txn, self.delivery = open_pair(
                    self.sink, plan.sink_config, self.source.context, policy.exactly_once, self.connector,
                    self.task_id, self.name, lambda: self.source.start(plan.source_config, self.source.context))
                self._mover.txn = self._txn
            else:
                self.source.start(plan.source_config, self.source.context)
                try:
                    self.sink.start(plan.sink_config, self.sink.context)
                except BaseException:
                    self.source.stop()
                    raise
        except BaseException:
            self._chain.close()  # the transforms configured for this pair (a restart builds new ones)
            raise

    def _native_path(self, policy) -> bool:
        """Whether this pair moves native batches (``connect.batch``); tells the source."""
        native, why = native_allowed(self.source, self.sink, self._chain.native, policy.native_batches, {
            "the source wants commit_record": self._mover.wants_commit_record,
            "offset syncs follow every record": self.sink.context.positions is not None})
        if not native and getattr(self.source, "native_kind", None) is not None:
            log.info("[%s] moves records, not native batches: %s", self.name, why)
        self.source.context.native_batches = native
        return native

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
        self._mover.set_deadline(end_polling)
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
            self._mover.set_deadline(float("inf"))
            gc_resume()
        stats.delivery = self.delivery
        return self._result(epoch, state, committed, stats, carry.started, trace, retriable)

    def _epoch(self, carry: EpochCarry, max_records: int, end_polling: float, drain: bool) -> dict:
        """Move records, then settle within the grace period; returns the offsets the epoch commits."""
        mover, stats, committed = self._mover, carry.stats, carry.committed
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
            mover.move(max_records, carry)
        except EpochOver:
            pass
        # The final commit point and failure handling get the grace period, from the deadline
        # or from now if the epoch ended early (stop signal, record count).
        mover.set_deadline(min(end_polling, time.monotonic()) + self.policy.epoch_grace_ms / 1000)
        # An asynchronous sink's records in flight stay with the pair (next epoch), unless it stops.
        # (A synchronous sink was flushed by the commit point already.)
        # Exactly-once: the transaction commits only with every record of it acknowledged.
        drain = mover.asynchronous and (drain or self._stop_requested() or self._txn is not None)
        mover.settle(drain, carry)
        if self._txn is not None:
            committed = self._txn.end_epoch(committed, mover.settled(), stats)
        stats.in_flight = mover.acct.in_flight + len(mover.resend)
        stats.retrying = mover.retrying()
        self._returned_offsets = dict(committed) if committed else None
        # (exactly-once: an epoch is one transaction, nothing moves between two)
        self._bridgeable = stats.records > 0 and not (stats.transient or stats.errors or stats.retries or
                                                    mover.resend) and self._txn is None
        return committed

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

    def _open_epoch(self) -> EpochCarry:
        p, mover = self.policy, self._mover
        stats = EpochStats()
        mover.retry.on_retry = lambda: setattr(stats, "retries", stats.retries + 1)
        handler = FailedRecordHandler(
            source=self.source, stats=stats, tolerance_all=p.tolerance_all, log_errors=p.log_errors,
            dlq=self._dlq, connector=self.connector, task=str(self.task_id),
            dlq_headers=p.dlq_context_headers, deadline=lambda: mover.deadline)
        return EpochCarry(stats, handler)

    def _partition_lag(self) -> dict[str, list[float]] | None:
        """Per source partition: [records behind the source's end, seconds behind] (``CommitAccounting.partition_lag``)."""
        try:
            behind = self.source.lag_by_partition()
        except Exception:  # noqa: BLE001 - informational
            return None
        return self._mover.acct.partition_lag(behind) if behind else None

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

    def offsets_persisted(self) -> None:
        """The driver persisted the offsets the last epoch returned: tell the source (``commit``,
        then ``offsets_committed`` with those offsets)."""
        if self._returned_offsets:
            offsets, self._returned_offsets = self._returned_offsets, None
            self.source.commit()
            self.source.offsets_committed(offsets)

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
        if not self._bridgeable or self._mover.resend or lease.halted.is_set() or self._stop_requested():
            return
        if self._carry is None:
            self._carry = self._open_epoch()
        carry = self._carry
        gc_pause()
        lease.begin(until)
        try:
            if not lease.halted.is_set():
                self._mover.move(self.policy.epoch_max_records, carry)
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

    # -- lifecycle -----------------------------------------------------------------------------
    def stop(self) -> None:
        errors = []
        opened = self._mover.opened
        self._mover.set_deadline(time.monotonic() + 1.0)  # a stopping sink may flush a little, not wait long
        for step in (lambda: self.sink.close(opened.all()), self.sink.stop, self._listeners.close,
                     self._chain.close, self.source.stop, lambda: self._dlq and self._dlq.close()):
            try:
                step()
            except Exception as exc:  # noqa: BLE001 - stop everything, report the first failure
                errors.append(exc)
        opened.clear()
        if errors:
            raise ConnectError(f"task {self.name} did not stop cleanly: {errors[0]}") from errors[0]
