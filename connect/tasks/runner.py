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
brought it), and nothing new is put before the failed records are re-sent, in the order the sink
reported them (its put order), so per-partition order survives a sink's finite delivery timeout.
Records a put never handed to its client (``NotSentError``: no room until the deadline, say) are
later than everything in flight: they wait until every record put before them has an outcome, and
go out behind those of them that failed, whatever order the reports came in.
When something fails that nothing accepts, the partitions it touched keep their previous offsets
and the epoch ends FAILED.

Commit points and checkpoints: the records put between two commit points form a *generation*.
A synchronous sink is flushed at each commit point (every generation completes at once, or none
does). An asynchronous sink (``SinkTask.checkpoint``, e.g. Kafka's) is never drained: each
commit point closes a generation with a checkpoint, and a source partition's offset moves to
where it stood at the last checkpoint whose records - and every earlier one's - all have
outcomes. Backpressure waits for the oldest generation, not for all of them.

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
import threading
import time
import traceback
from collections import deque
from typing import Any, Callable, Mapping, Sequence

from connect.batch import NativeBatch, native_allowed
from connect.errors import ConnectError, NotSentError, RetriableError, RetriesExhaustedError, TaskFailedError
from connect.records import ConnectRecord, partition_key
from connect.sink import ErrantRecordReporter, SinkTask, SinkTaskContext
from connect.sink.side import SideWriter
from connect.source import OffsetStorageReader, SourceTask, SourceTaskContext
from connect.tasks.bookkeeping import OpenedPartitions, RecordCommits
from connect.tasks.failures import DeadLetterQueue, FailedRecordHandler
from connect.tasks.listeners import AckListener, AckListeners
from connect.tasks.offsetsync import OffsetSyncListener
from connect.tasks.policy import RunnerPolicy
from connect.tasks.results import FAILED, RUNNING, EpochResult, EpochStats
from connect.tasks.retry import EpochOver, RetryPolicy
from connect.tasks.stages import StageChain, build_chain

__all__ = ["TaskPairRunner"]

log = logging.getLogger(__name__)

_VALUE = operator.attrgetter("value")
_KEY = operator.attrgetter("key")
_HOST = socket.gethostname()
_DELIVERY = "delivery"  # retry clock of transient delivery failures


def _payload_bytes(batch) -> int:
    """Key + value bytes of a batch holding None or non-bytes payloads."""
    return sum(len(x) for r in batch for x in (r.key, r.value) if isinstance(x, (bytes, bytearray, str)))


class _Generation:
    """Records put between two commit points: where their partitions stood, and whether each has an outcome."""

    __slots__ = ("seq", "done", "offsets", "records", "size", "stamps")

    def __init__(self, seq: int, done: Callable[[], bool] | None, offsets: dict[str, dict[str, Any]],
                 records: list[ConnectRecord] | None, size: int, stamps: dict[str, int]):
        self.seq = seq
        self.done = done  # None: a synchronous sink, completed by a flush
        self.offsets = offsets  # partition key -> offset of its last record polled in this generation
        self.records = records  # records put (only for sources that want commit_record)
        self.size = size
        self.stamps = stamps  # partition key -> timestamp of its last record (latency, lag in seconds)


class _Carry:
    """What an epoch accumulates (its stats, failed-record handler, offsets committed), opened
    early when the pair keeps moving records between two epochs (``pump``)."""

    __slots__ = ("stats", "handler", "committed", "started", "error")

    def __init__(self, stats: EpochStats, handler: FailedRecordHandler) -> None:
        self.stats = stats
        self.handler = handler
        self.committed: dict[str, dict[str, Any]] = {}
        self.started = time.time()
        self.error: BaseException | None = None  # raised by the pump: the next epoch fails with it


_GC_LOCK = threading.Lock()
_GC_PAUSES = [0, False]  # epochs and pumps running with the cyclic collector paused; was it enabled before


def gc_pause() -> None:
    """Pause the cyclic collector for an epoch or pump. Counted: a process runs many pairs at once
    (shared hosting), and the collector comes back when the last of them ends, as it was."""
    with _GC_LOCK:
        if _GC_PAUSES[0] == 0:
            _GC_PAUSES[1] = gc.isenabled()
            gc.disable()
        _GC_PAUSES[0] += 1


def gc_resume() -> None:
    with _GC_LOCK:
        _GC_PAUSES[0] -= 1
        if _GC_PAUSES[0] == 0 and _GC_PAUSES[1]:
            gc.enable()


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
        self._polled: dict[int, ConnectRecord] = {}  # id(source_partition) -> last record polled, this generation
        self._put = 0  # records put in this generation
        self._records: list[ConnectRecord] | None = [] if self._wants_commit_record else None  # put, this generation
        self._generations: deque[_Generation] = deque()  # closed, not yet complete, oldest first
        self._seq = 0  # sequence number of the open generation
        self._done_seq = -1  # every generation up to this one is complete
        self._in_flight = 0  # records put and not yet in a complete generation
        self._ready: dict[str, dict[str, Any]] = {}  # offsets of complete generations, partition still blocked
        # records acknowledged (delivered or resolved) not yet counted committed: a partition was held
        self._uncounted = 0
        self._commits = RecordCommits(self.source.commit_record)
        self._resend: list[ConnectRecord] = []  # transient failures, in order, waiting to be re-sent
        self._resend_at = 0.0
        # ``_resend[_unsent_from:]`` were never handed to the sink's client (NotSentError): they go
        # out once generation ``_unsent_after`` (and every earlier one) is complete, so a failure of
        # a record put before them, reported later, still goes out ahead of them
        self._unsent_from: int | None = None
        self._unsent_after = -1
        self._awaiting: dict[str, int] = {}  # partition key of a re-sent record -> generation it went out in
        self._permanent: list[tuple[ConnectRecord, BaseException]] = []  # not yet resolved (DLQ busy)
        self._stage_failures: list[tuple[ConnectRecord, BaseException]] = []  # records a stage could not handle
        self._deadline = float("inf")
        self._acked_ts: dict[str, int] = {}  # partition key -> timestamp of its newest acknowledged record
        self._carry: _Carry | None = None  # the next epoch, opened by ``pump``
        self._halt = threading.Event()  # set by ``halt``: moving stops at the next batch
        self._lease_lock = threading.Lock()  # ``renew_pump`` (another thread) against ``pump``
        self._lease = 0.0  # the latest lease asked for the pump after the last epoch (monotonic)
        self._pumping = False
        self._pumpable = False  # the last epoch moved records cleanly: the next may start early
        self.source.context = SourceTaskContext(self.name, source_config,
                                                OffsetStorageReader(offsets, lookup=offset_lookup))
        self.sink.context = SinkTaskContext(self.name, sink_config, self._reporter)
        # Side parts following the acknowledgements (offset syncs: ``offset_syncs_factory`` writes them).
        self._listeners = AckListeners(
            [*listeners, OffsetSyncListener.for_policy(policy, offset_syncs_factory, self.name)], self.name)
        try:
            self._listeners.attach(self.sink.context)
            self._native = self._native_path(policy)
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
        self._halt.clear()
        self._lease = 0.0
        carry, self._carry = self._carry or self._open_epoch(), None
        stats, handler, committed, started = carry.stats, carry.handler, carry.committed, carry.started
        end_polling = time.monotonic() + max_ms / 1000
        self._set_deadline(end_polling)
        state, trace, retriable = RUNNING, None, False
        # Records are acyclic and freed by reference counting; the cyclic collector would
        # re-scan every in-flight record many times per epoch. Pause it and collect the young
        # generations at each commit point instead.
        gc_pause()
        try:
            if self._failed:
                raise TaskFailedError("task failed in an earlier epoch; restart it")
            if carry.error is not None:
                raise carry.error
            if self._start_offsets_due:
                self._start_offsets_due = False
                if self._persist_start_offsets(committed):
                    max_records = 0
            try:
                self._move(max_records, committed, handler, stats)
            except EpochOver:
                pass
            # The final commit point and failure handling get the grace period, from the deadline
            # or from now if the epoch ended early (stop signal, record count).
            self._set_deadline(min(end_polling, time.monotonic()) + p.epoch_grace_ms / 1000)
            # An asynchronous sink's records in flight stay with the pair (next epoch), unless it stops.
            # (A synchronous sink was flushed by the commit point already.)
            drain = self._async and (drain or self._stop_requested())
            try:
                self._resend_due(stats)
                self._commit_point(committed, handler, stats)
                while self._resend or (drain and self._generations):
                    # A transient blip is re-sent within the grace period if it allows; a stop drains.
                    self._await_progress()
                    self._take_failures(committed, handler, stats)
                    self._resend_due(stats)
                    self._commit_point(committed, handler, stats)
            except EpochOver:
                pass
            stats.in_flight = self._in_flight + len(self._resend)
            stats.retrying = self._retrying()
            self._returned_offsets = dict(committed) if committed else None
            self._pumpable = stats.records > 0 and not (stats.transient or stats.errors or stats.retries or self._resend)
        except Exception as exc:  # noqa: BLE001 - every failure is reported with its trace
            self._failed = True
            self._pumpable = False
            state = FAILED
            retriable = isinstance(exc, (RetriesExhaustedError, RetriableError))
            trace = "".join(traceback.format_exception(exc))
            log.error("task %s failed in epoch %d: %s", self.name, epoch, exc)
        finally:
            self._set_deadline(float("inf"))
            gc_resume()
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
    def pump(self, until: float) -> None:
        """Between two epochs: keep moving records until ``until`` (monotonic), ``halt()`` or a stop
        request, so the pipeline does not pause while the next epoch is being scheduled. Only in
        the steady state: after an epoch that moved records with no failure and nothing waiting to be
        re-sent (setting up targets, re-sends and the like get a whole epoch's time).

        What it polls, puts and sees acknowledged belongs to the next epoch: its stats, its budget
        of records and the offsets it returns. Nothing is committed meanwhile, so a process lost
        during a pump replays it like any epoch in progress. The caller runs it while no epoch
        runs (the pair's lock), and ``halt()`` gives the pair back at the next batch (at most one
        source poll's wait). Not once a stop was requested (a stop drains in an epoch of its own).
        ``renew_pump`` extends ``until`` while it runs."""
        if not self._pumpable or self._resend or self._halt.is_set() or self._stop_requested():
            return
        if self._carry is None:
            self._carry = self._open_epoch()
        carry = self._carry
        gc_pause()
        with self._lease_lock:  # a renewal that came before the pump started counts too
            self._lease = max(self._lease, until)
            self._pumping = True
            self._set_deadline(self._lease)
        try:
            if not self._halt.is_set():
                self._move(self.policy.epoch_max_records, carry.committed, carry.handler, carry.stats)
        except EpochOver:
            pass
        except Exception as exc:  # noqa: BLE001 - the next epoch reports it (FAILED, with its trace)
            carry.error = exc
        finally:
            with self._lease_lock:
                self._pumping = False
                self._set_deadline(float("inf"))
            gc_resume()

    def renew_pump(self, until: float) -> None:
        """Let the pump run until ``until`` (monotonic) if that is later than its lease (from another
        thread; also for the pump about to start). The driver starts a connector's next epoch only
        once every pair's result is in: a pair that ended its epoch early (its record budget)
        would otherwise stand idle after its lease until the slowest sibling ended (issue 36)."""
        with self._lease_lock:
            self._lease = max(self._lease, until)
            if self._pumping and until > self._deadline:
                self._set_deadline(until)

    def halt(self) -> None:
        """Stop a ``pump`` (from another thread): its loop ends at the next batch."""
        self._halt.set()

    def _partition_lag(self) -> dict[str, list[float]] | None:
        """Per source partition: [records behind the source's end, seconds behind]. Seconds behind is
        the age of the newest acknowledged record while records remain to copy (0 when caught up):
        how old the data the target has just received is."""
        try:
            behind = self.source.lag_by_partition()
        except Exception:  # noqa: BLE001 - informational
            return None
        if not behind:
            return None
        now_ms = time.time() * 1000
        out = {}
        for key, records in behind.items():
            ts = self._acked_ts.get(key)
            seconds = max(now_ms - ts, 0.0) / 1000 if records > 0 and ts is not None else 0.0
            out[key] = [float(records), seconds]
        return out

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
        stage_failures = self._stage_failures
        retry, time_left = self._retry, self._time_left
        polled = self._polled
        halt = self._halt
        source_ctx = getattr(self.source, "context", None)
        while stats.records < max_records:
            if halt.is_set():
                return
            if self._stop_requested():
                self._set_deadline(time.monotonic())
                return
            if time.monotonic() >= self._deadline:
                return
            if self._resend:
                # Records waiting to be re-sent go out before anything new (order is kept).
                self._resend_due(stats)
                self._take_failures(committed, handler, stats)
                if self._resend:
                    self._await_progress()
                    if self._unsent_waits():  # see which generations completed meanwhile
                        self._commit_point(committed, handler, stats)
                    else:
                        self._take_failures(committed, handler, stats)
                    continue
            if self._in_flight + len(self._resend) >= max_in_flight:
                self._commit_point(committed, handler, stats)
                if self._in_flight + len(self._resend) >= max_in_flight:
                    # Still too much unacknowledged: wait for the oldest generation (an outage:
                    # for the next re-send), not a spin.
                    self._await_progress()
                    self._take_failures(committed, handler, stats)
                continue
            if self._put >= checkpoint_every:
                self._commit_point(committed, handler, stats)
            if source_ctx is not None:
                source_ctx.poll_limit = min(max_records - stats.records, max_in_flight - self._in_flight - len(self._resend))
            batch = retry.call("source poll", self.source.poll, time_left)
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
            put = self.sink.put_native if native else self.sink.put
            try:
                retry.call("sink put", lambda b=batch, p=put: p(b), time_left)
            except EpochOver:
                # The sink did not take the batch in time, and its offsets are in this generation
                # already: it goes out first next time (no commit point passes records not sent).
                self._defer(batch.records() if native else batch, stats)
                raise
            if native:
                size = batch.payload_bytes()
            else:
                try:  # payload bytes, at C speed when every key and value is bytes or None
                    size = sum(map(len, filter(None, map(_VALUE, batch)))) + sum(map(len, filter(None, map(_KEY, batch))))
                except TypeError:
                    size = _payload_bytes(batch)
            self._sent(batch)
            stats.records += len(batch)
            stats.bytes += size
            last_ts = batch[-1].timestamp
            if last_ts:
                now_ms = time.time() * 1000
                stats.observe_batch_latency(now_ms - (batch[0].timestamp or last_ts), now_ms - last_ts, len(batch))
            if self._reporter.failed:  # one list length per batch: a failure is taken before anything new goes out
                self._take_failures(committed, handler, stats)

    def _sent(self, batch: list[ConnectRecord]) -> None:
        n = len(batch)
        self._put += n
        self._in_flight += n
        if self._records is not None:
            self._records.extend(batch)

    def _await_progress(self) -> None:
        """Wait for something to change: the next re-send's backoff, or (asynchronous sink) an
        outcome of the records in flight. Raises EpochOver when the epoch's time is up."""
        left = self._time_left()
        if left <= 0:
            raise EpochOver
        if not self._async or (self._resend and not self._generations):
            self._retry.wait(max(self._resend_at - time.monotonic(), 0.0), self._time_left)
            return
        wait = min(left, 0.1)
        if self._resend and not self._unsent_waits():
            wait = min(wait, max(self._resend_at - time.monotonic(), 0.0))
        self.sink.wait_outcomes(wait)

    def offsets_persisted(self) -> None:
        """The driver persisted the offsets the last epoch returned: tell the source (``commit``,
        then ``offsets_committed`` with those offsets)."""
        if self._returned_offsets:
            offsets, self._returned_offsets = self._returned_offsets, None
            self.source.commit()
            self.source.offsets_committed(offsets)

    # -- transient failures ------------------------------------------------------------------
    def _resend_due(self, stats: EpochStats) -> None:
        """Re-send the transient failures, in their order, once their backoff has passed and every
        record put before the ones never sent has an outcome."""
        if not self._resend or time.monotonic() < self._resend_at or self._unsent_waits():
            return
        batch, self._resend = self._resend, []
        unsent_from, self._unsent_from = self._unsent_from, None
        stats.retries += len(batch)
        self._listeners.resending(batch)
        try:
            self.sink.put(batch)
        except RetriableError as exc:  # nothing of the batch was taken: keep it, in front
            self._resend[:0] = batch
            if self._unsent_from is not None:
                self._unsent_from += len(batch)
            elif unsent_from is not None:
                self._unsent_from = unsent_from
            self._resend_at = time.monotonic() + self._retry.failed(_DELIVERY, exc)
            return
        seq = self._seq  # acknowledged once this generation is complete
        self._awaiting.update((partition_key(r.source_partition), seq) for r in batch)
        self._sent(batch)

    def _take_failures(self, committed: dict, handler: FailedRecordHandler, stats: EpochStats) -> None:
        """Eager intake: a transient failure the sink reported (in a put, or while serving outcomes) is
        taken at once by a commit point, which queues it for re-sending, so no new record is put
        between its report and its re-send: the pair (each of its partitions) is held until then.
        Permanent failures alone wait for the next regular commit point (they hold nothing)."""
        failed = self._reporter.failed
        if failed and any(isinstance(e, RetriableError) for _, e in failed):
            self._commit_point(committed, handler, stats)

    def _defer(self, batch: list[ConnectRecord], stats: EpochStats) -> None:
        """Records polled but not taken by the sink: queued, in order, to be put before anything new
        (and after any record put before them that fails later)."""
        if not self._resend:
            self._resend_at = time.monotonic()
        self._hold_unsent(batch)
        stats.records += len(batch)

    def _queue_resend(self, transient: list, stats: EpochStats) -> None:
        stats.transient += len(transient)
        for reason, n in stats.count_reasons(transient).items():
            log.warning("[%s] %d record(s) not delivered, transient (re-sent, offsets held): %s", self.name, n, reason)
        failed = [r for r, e in transient if not isinstance(e, NotSentError)]
        if failed:  # sent and failed: in the sink's report order, ahead of any record never sent
            if self._unsent_from is None:
                self._resend.extend(failed)
            else:
                self._resend[self._unsent_from:self._unsent_from] = failed
                self._unsent_from += len(failed)
        if len(failed) < len(transient):
            self._hold_unsent([r for r, e in transient if isinstance(e, NotSentError)])
        error = next((e for _, e in transient if not getattr(e, "backpressure", False)), None)
        if error is not None:
            # Raises RetriesExhaustedError once deliveries have been failing for errors.retry.timeout.
            self._resend_at = time.monotonic() + self._retry.failed(_DELIVERY, error)
        elif len(self._resend) == len(transient):  # only a full client: due once the records before are done
            self._resend_at = time.monotonic()

    def _hold_unsent(self, records: list[ConnectRecord]) -> None:
        """Records the sink never sent, later than all it holds: re-sent once every generation with
        records put so far is complete (``_unsent_waits``)."""
        if self._unsent_from is None:
            self._unsent_from = len(self._resend)
        self._resend.extend(records)
        self._unsent_after = self._seq if self._put else self._seq - 1

    def _unsent_waits(self) -> bool:
        """Records never sent wait while a record put before them may still fail."""
        return self._unsent_from is not None and self._done_seq < self._unsent_after

    # -- commit points -------------------------------------------------------------------------
    def _close_generation(self) -> None:
        """Close the open generation: a checkpoint of the asynchronous sink marks its records."""
        if not self._put and not self._polled:
            return
        done = self.sink.checkpoint() if self._async else None
        offsets = {partition_key(r.source_partition): r.source_offset for r in self._polled.values()}
        stamps = {partition_key(r.source_partition): r.timestamp for r in self._polled.values() if r.timestamp}
        records = None
        if self._records is not None:
            records, self._records = self._records, []
        self._generations.append(_Generation(self._seq, done, offsets, records, self._put, stamps))
        self._seq += 1
        self._polled.clear()  # in place: _move holds it
        self._put = 0

    def _complete_generations(self) -> list[_Generation]:
        """Pop the generations whose records (and every earlier one's) all have outcomes."""
        gens = self._generations
        if self._async:
            self.sink.wait_outcomes(0)
            complete = []
            while gens and gens[0].done():
                complete.append(gens.popleft())
            return complete
        offsets: dict[str, Any] = {}
        for g in gens:
            offsets.update(g.offsets)
        offsets = {k: dict(v) for k, v in offsets.items()}
        safe = self._retry.call("sink flush", lambda: self.sink.pre_commit(offsets), self._time_left)
        if all(k in safe for k in offsets):
            complete = list(gens)
            gens.clear()
            return complete
        # A partial answer: the partitions named are done up to the offsets given.
        for key in offsets.keys() & safe.keys():
            self._ready[key] = dict(safe[key])
            for g in gens:
                g.offsets.pop(key, None)
        return []

    def _commit_point(self, committed: dict, handler: FailedRecordHandler, stats: EpochStats) -> None:
        """Close the generation, see which ones completed, sort out failed records, and move
        ``committed`` forward where allowed."""
        self._close_generation()
        stats.flushes += 1
        complete = self._complete_generations()
        # Every failure of a complete generation was reported before it completed: take them now.
        failures = self._reporter.take()
        if self._records is not None and failures:
            self._commits.failures_reported(failures)
        transient = [f for f in failures if isinstance(f[1], RetriableError)]
        if transient:  # an outcome, not an acknowledgement: they count once a re-send is delivered
            stats.acknowledged -= len(transient)
            self._uncounted -= len(transient)
            self._queue_resend(transient, stats)
        new_permanent = [f for f in failures if not isinstance(f[1], RetriableError)] + self._stage_failures
        self._stage_failures.clear()  # in place: ``_move`` holds the list while it runs
        stats.errors += len(new_permanent)
        now_ms = time.time() * 1000
        for g in complete:
            self._ready.update(g.offsets)
            self._in_flight -= g.size
            stats.acknowledged += g.size
            self._uncounted += g.size
            for key, ts in g.stamps.items():
                stats.observe_ack_latency(now_ms - ts)
                self._acked_ts[key] = ts
            self._done_seq = g.seq
            if g.records:
                self._commits.hold(g.records)
        if self._awaiting:  # a re-sent record is acknowledged once its generation is complete
            self._awaiting = {k: seq for k, seq in self._awaiting.items() if seq > self._done_seq}
        if not self._resend and not self._awaiting and self._retry.failing(_DELIVERY):
            self._retry.succeeded(_DELIVERY)
        unresolved = self._resolve_permanent(new_permanent, handler, stats)
        blocked = {partition_key(r.source_partition) for r in self._resend}
        blocked.update(self._awaiting)
        blocked.update(partition_key(r.source_partition) for r, _ in self._permanent)
        blocked.update(partition_key(r.source_partition) for r, _ in unresolved)
        ready = self._ready
        for key in [k for k in ready if k not in blocked]:
            committed[key] = dict(ready.pop(key))
        self._count_committed(blocked, stats)
        if self._commits:
            self._commits.release(blocked)
        self._listeners.commit_point()
        gc.collect(1)
        if unresolved:
            record, error = unresolved[0]
            raise TaskFailedError(
                f"{len(unresolved)} record(s) could not be written and nothing tolerated them "
                f"(no hook accepted them, no errors.deadletterqueue.topic.name, errors.tolerance=none); "
                f"first: {record.position()}: {type(error).__name__}: {error}") from error

    def _count_committed(self, blocked: set[str], stats: EpochStats) -> None:
        """Acknowledged records count as committed once no partition of the pair is held: every
        offset they advanced is then in ``committed``. While one is held nothing is counted (a
        re-sent record's generation does not say which partitions it holds), so the figure never
        runs ahead of the offsets; it catches up when the hold ends."""
        if not blocked and self._uncounted > 0:
            stats.committed += self._uncounted
            self._uncounted = 0

    def _retrying(self) -> list[dict[str, Any]]:
        """What is failing transiently right now, for the operator (status, progress, metrics)."""
        out = []
        for what, seconds, reason in self._retry.streaks():
            held = set(self._awaiting) | {partition_key(r.source_partition) for r in self._resend} \
                if what == _DELIVERY else set()
            out.append({"operation": what, "reason": reason, "for_s": round(seconds, 1), "partitions": sorted(held)})
        return out

    def _resolve_permanent(self, new: list, handler: FailedRecordHandler, stats: EpochStats) -> list:
        """Hooks -> DLQ -> tolerance for permanent failures; the DLQ being slow keeps them for later."""
        todo = self._permanent + new
        self._permanent = []
        if not todo:
            return []
        for reason, n in stats.count_reasons(new).items():
            log.warning("[%s] %d record(s) failed permanently: %s", self.name, n, reason)
        try:
            return handler.handle(todo)
        except RetriableError as exc:
            log.warning("[%s] %d failed record(s) wait for the dead-letter topic: %s", self.name, len(todo), exc)
            self._permanent = todo
            return []

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
