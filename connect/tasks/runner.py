"""TaskPairRunner: one SourceTask feeding one SinkTask, one epoch at a time.

This is what one Spark partition executes (see ``worker.partition``), and what unit tests drive
directly. Within an epoch, records stream to the sink as soon as they are polled; when
``max.in.flight.records`` are unacknowledged the runner stops polling and asks the sink to
``pre_commit`` (backpressure); at the end of the epoch it does so once more and returns the
offsets that are now safe to persist, with stats and any failure.

At-least-once: an offset is returned only when every record at or before it in its source
partition was acknowledged, or - for a *permanent* failure - accepted by a RIP-45 hook, the
dead-letter topic or ``errors.tolerance=all``. A *transient* failure (timeout, lost connection,
full queue) is never skipped: the record is re-sent in order, with backoff, and its partition's
offset stays where it was until the re-sent record is acknowledged. When something fails that
nothing accepts, the partitions it touched keep their previous offsets and the epoch ends FAILED.

Bounded epochs: polling stops at ``epoch_max_ms`` (or at once when the worker asks to stop);
the final flush and failure handling get ``epoch_grace_ms`` more. Every wait (poll, a full
producer queue, flush, retry backoff) is cut at that bound. What was not acknowledged by then
stays with this runner - in the sink's client, or queued for re-sending - and is accounted in
the next epoch; a runner that is not reused (the pair moved, the process died) leaves those
records to be replayed from the committed offsets.
"""

from __future__ import annotations

import gc
import logging
import operator
import os
import socket
import time
import traceback
from typing import Any, Callable, Mapping

from connect.converters import BytesConverter, converter_for
from connect.errors import ConnectError, ConversionError, RetriableError, RetriesExhaustedError, TaskFailedError
from connect.records import ConnectRecord, make_record, partition_key
from connect.sink import ErrantRecordReporter, SinkTask, SinkTaskContext
from connect.source import OffsetStorageReader, SourceTask, SourceTaskContext
from connect.tasks.failures import FailedRecordHandler
from connect.tasks.policy import RunnerPolicy
from connect.tasks.results import FAILED, RUNNING, EpochResult, EpochStats
from connect.tasks.retry import EpochOver, RetryPolicy

__all__ = ["TaskPairRunner"]

log = logging.getLogger(__name__)

_VALUE = operator.attrgetter("value")
_KEY = operator.attrgetter("key")
_HOST = socket.gethostname()
_DELIVERY = "delivery"  # retry clock of transient delivery failures


def _payload_bytes(batch) -> int:
    """Key + value bytes of a batch holding None or non-bytes payloads."""
    return sum(len(x) for r in batch for x in (r.key, r.value) if isinstance(x, (bytes, bytearray, str)))


class _SideConverters:
    """Source-side decode + sink-side encode for keys and values; None when all are bytes."""

    def __init__(self, source_cfg: Mapping[str, Any], sink_cfg: Mapping[str, Any]):
        self.src_key = converter_for(source_cfg.get("key.converter", "bytes"))
        self.src_value = converter_for(source_cfg.get("value.converter", "bytes"))
        self.sink_key = converter_for(sink_cfg.get("key.converter", "bytes"))
        self.sink_value = converter_for(sink_cfg.get("value.converter", "bytes"))

    @property
    def identity(self) -> bool:
        return all(isinstance(c, BytesConverter) for c in (self.src_key, self.src_value, self.sink_key, self.sink_value))

    def convert(self, r: ConnectRecord) -> ConnectRecord:
        try:
            key = self.sink_key.to_bytes(self.src_key.from_bytes(r.key))
        except ConversionError as exc:
            raise ConversionError(f"key of record {r.position()}: {exc}") from None
        try:
            value = self.sink_value.to_bytes(self.src_value.from_bytes(r.value))
        except ConversionError as exc:
            raise ConversionError(f"value of record {r.position()}: {exc}") from None
        return make_record(r.topic, key, value, r.headers, r.timestamp, r.source_partition, r.source_offset,
                           r.partition)


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
                 dlq_factory: Callable[[], SinkTask] | None = None,
                 stop_requested: Callable[[], bool] = lambda: False):
        self.connector = connector
        self.task_id = task_id
        self.name = f"{connector}-{task_id}"
        self.source = source
        self.sink = sink
        self.policy = policy
        self._converters = _SideConverters(source_config, sink_config)
        self._stop_requested = stop_requested
        self._dlq_factory = dlq_factory
        self._reporter = ErrantRecordReporter()
        self._retry = RetryPolicy(policy.retry_timeout_ms, policy.retry_delay_max_ms)
        self._opened: dict[str, Mapping[str, Any]] = {}  # partition key -> partition
        self._opened_ids: dict[int, Mapping[str, Any]] = {}
        self._wants_commit_record = type(source).commit_record is not SourceTask.commit_record
        self._failed = False
        self._start_offsets_due = True
        self._returned_offsets = False
        # -- carried across epochs --
        self._pending: dict[int, ConnectRecord] = {}  # id(source_partition) -> last record put, not committed
        self._unflushed = 0  # records put since the last complete flush
        self._unacked: list[ConnectRecord] | None = [] if self._wants_commit_record else None
        self._resend: list[ConnectRecord] = []  # transient failures, in order, waiting to be re-sent
        self._resend_at = 0.0
        self._awaiting: set[str] = set()  # partition keys of re-sent records not yet acknowledged
        self._permanent: list[tuple[ConnectRecord, BaseException]] = []  # not yet resolved (DLQ busy)
        self._conversion_failures: list[tuple[ConnectRecord, BaseException]] = []
        self._deadline = float("inf")
        self.source.context = SourceTaskContext(self.name, source_config,
                                                OffsetStorageReader(offsets, lookup=offset_lookup))
        self.sink.context = SinkTaskContext(self.name, sink_config, self._reporter)
        self.source.start(source_config, self.source.context)
        try:
            self.sink.start(sink_config, self.sink.context)
        except BaseException:
            self.source.stop()
            raise

    # -- time --------------------------------------------------------------------------------
    def _set_deadline(self, deadline: float) -> None:
        self._deadline = self.source.context.deadline = self.sink.context.deadline = deadline

    def _time_left(self) -> float:
        return max(self._deadline - time.monotonic(), 0.0)

    # -- one epoch ---------------------------------------------------------------------------
    def run_epoch(self, epoch: int, *, max_ms: int | None = None, max_records: int | None = None) -> EpochResult:
        p = self.policy
        max_ms = p.epoch_max_ms if max_ms is None else max_ms
        max_records = p.epoch_max_records if max_records is None else max_records
        stats = EpochStats()
        self._retry.on_retry = lambda: setattr(stats, "retries", stats.retries + 1)
        handler = FailedRecordHandler(
            source=self.source, stats=stats, tolerance_all=p.tolerance_all, log_errors=p.log_errors,
            dlq_factory=self._dlq_factory, connector=self.connector, task=str(self.task_id),
            dlq_headers=p.dlq_context_headers, deadline=lambda: self._deadline)
        started = time.time()
        end_polling = time.monotonic() + max_ms / 1000
        self._set_deadline(end_polling)
        committed: dict[str, dict[str, Any]] = {}
        state, trace, retriable = RUNNING, None, False
        # Records are acyclic and freed by reference counting; the cyclic collector would
        # re-scan every in-flight record many times per epoch. Pause it and collect the young
        # generations at each commit point instead.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            if self._failed:
                raise TaskFailedError("task failed in an earlier epoch; restart it")
            if self._start_offsets_due:
                self._start_offsets_due = False
                if self._persist_start_offsets(committed):
                    max_records = 0
            try:
                self._move(max_records, committed, handler, stats)
            except EpochOver:
                pass
            # The final flush and failure handling get the grace period, from the deadline or
            # from now if the epoch ended early (stop signal, record count).
            self._set_deadline(min(end_polling, time.monotonic()) + p.epoch_grace_ms / 1000)
            try:
                self._resend_due(stats)
                self._commit_point(committed, handler, stats)
                while self._resend:  # a transient blip: re-send within the grace period if it allows
                    self._retry.wait(max(self._resend_at - time.monotonic(), 0.0), self._time_left)
                    self._resend_due(stats)
                    self._commit_point(committed, handler, stats)
            except EpochOver:
                pass
            self._returned_offsets = bool(committed)
        except Exception as exc:  # noqa: BLE001 - every failure is reported with its trace
            self._failed = True
            state = FAILED
            retriable = isinstance(exc, (RetriesExhaustedError, RetriableError))
            trace = "".join(traceback.format_exception(exc))
            log.error("task %s failed in epoch %d: %s", self.name, epoch, exc)
        finally:
            self._set_deadline(float("inf"))
            handler.close()
            if gc_was_enabled:
                gc.enable()
        lag = None
        try:
            lag = self.source.lag()
        except Exception:  # noqa: BLE001 - lag is informational
            pass
        return EpochResult(self.connector, self.task_id, epoch, state, committed, stats.as_dict(), started,
                           time.time(), lag=lag, trace=trace, pid=os.getpid(), retriable=retriable, host=_HOST)

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
        convert = None if self._converters.identity else self._converters.convert
        conversion_failures = self._conversion_failures
        retry, time_left = self._retry, self._time_left
        pending, unacked = self._pending, self._unacked
        while stats.records < max_records:
            if self._stop_requested():
                self._set_deadline(time.monotonic())
                return
            if time.monotonic() >= self._deadline:
                return
            if self._resend:
                # Records waiting to be re-sent go out before anything new (order is kept).
                self._resend_due(stats)
                if self._resend:
                    retry.wait(max(self._resend_at - time.monotonic(), 0.0), time_left)
                    continue
            if self._unflushed + len(self._resend) >= max_in_flight:
                self._commit_point(committed, handler, stats)
                if self._unflushed + len(self._resend) >= max_in_flight:
                    # Still nothing acknowledged (an outage): wait for the next re-send, not a spin.
                    retry.wait(max(min(self._resend_at - time.monotonic(), 0.1), 0.01), time_left)
                continue
            batch = retry.call("source poll", self.source.poll, time_left)
            if not batch:
                continue
            # Last record per source partition; offsets follow what was polled, converted or
            # not: a record that failed conversion advances its partition only once resolved.
            last = {id(r.source_partition): r for r in batch}
            pending.update(last)
            if last.keys() - self._opened_ids.keys():
                self._open_new_partitions(last)
            if convert is not None:
                batch = self._convert(batch, convert, conversion_failures, stats)
                if not batch:
                    continue
            try:
                retry.call("sink put", lambda b=batch: self.sink.put(b), time_left)
            except EpochOver:
                # The sink did not take the batch in time, and its offsets are pending already:
                # it goes out first next time (a commit point must never pass records not sent).
                self._defer(batch, stats)
                raise
            try:  # payload bytes, at C speed when every key and value is bytes or None
                size = sum(map(len, filter(None, map(_VALUE, batch)))) + sum(map(len, filter(None, map(_KEY, batch))))
            except TypeError:
                size = _payload_bytes(batch)
            if unacked is not None:
                unacked.extend(batch)
            n = len(batch)
            stats.records += n
            stats.bytes += size
            last_ts = batch[-1].timestamp
            if last_ts:
                stats.observe_latency(time.time() * 1000 - last_ts)
            self._unflushed += n

    def _convert(self, batch, convert, failures: list, stats: EpochStats) -> list[ConnectRecord]:
        out = []
        for r in batch:
            try:
                out.append(convert(r))
            except ConversionError as exc:
                failures.append((r, exc))
        return out

    def _open_new_partitions(self, last: dict[int, ConnectRecord]) -> None:
        """Call ``sink.open`` once per new source partition.

        Sources normally reuse one dict per partition, so identity finds known ones cheaply;
        new identities are checked by canonical key. The identity cache keeps the dicts alive
        (so an id cannot be reused by another partition) and is reset when it grows large, for
        sources that build a new dict per record.
        """
        seen = self._opened_ids
        if len(seen) > 10_000:
            seen.clear()
        new = {}
        for ident, record in last.items():
            if ident in seen:
                continue
            partition = record.source_partition
            seen[ident] = partition
            key = partition_key(partition)
            if key not in self._opened:
                self._opened[key] = new[key] = partition
        if new:
            self.sink.open(list(new.values()))

    def offsets_persisted(self) -> None:
        """The driver persisted the offsets the last epoch returned: tell the source (``commit``)."""
        if self._returned_offsets:
            self._returned_offsets = False
            self.source.commit()

    # -- transient failures ------------------------------------------------------------------
    def _resend_due(self, stats: EpochStats) -> None:
        """Re-send the transient failures, in their order, once their backoff has passed."""
        if not self._resend or time.monotonic() < self._resend_at:
            return
        batch, self._resend = self._resend, []
        self._awaiting.update(partition_key(r.source_partition) for r in batch)
        stats.retries += len(batch)
        try:
            self.sink.put(batch)
        except RetriableError as exc:  # nothing of the batch was taken: keep it, in front
            self._resend[:0] = batch
            self._resend_at = time.monotonic() + self._retry.failed(_DELIVERY, exc)
            return
        self._unflushed += len(batch)
        if self._unacked is not None:
            self._unacked.extend(batch)

    def _defer(self, batch: list[ConnectRecord], stats: EpochStats) -> None:
        """Records polled but not taken by the sink: queued, in order, to be put before anything new."""
        if not self._resend:
            self._resend_at = time.monotonic()
        self._resend.extend(batch)
        stats.records += len(batch)

    def _queue_resend(self, transient: list, stats: EpochStats) -> None:
        stats.transient += len(transient)
        for reason, n in stats.count_reasons(transient).items():
            log.warning("[%s] %d record(s) not delivered, transient (re-sent, offsets held): %s", self.name, n, reason)
        self._resend.extend(r for r, _ in transient)
        # Raises RetriesExhaustedError once deliveries have been failing for errors.retry.timeout.
        self._resend_at = time.monotonic() + self._retry.failed(_DELIVERY, transient[0][1])

    # -- commit points -------------------------------------------------------------------------
    def _commit_point(self, committed: dict, handler: FailedRecordHandler, stats: EpochStats) -> None:
        """Flush the sink, sort out failed records, and move ``committed`` forward where allowed."""
        pending = self._pending
        ids = {ident: partition_key(r.source_partition) for ident, r in pending.items()}
        offsets = {ids[ident]: dict(r.source_offset) for ident, r in pending.items()}
        stats.flushes += 1
        safe = self._retry.call("sink flush", lambda: self.sink.pre_commit(offsets), self._time_left)
        complete = all(k in safe for k in offsets)
        failures = self._reporter.take()
        transient = [f for f in failures if isinstance(f[1], RetriableError)]
        if transient:
            self._queue_resend(transient, stats)
        new_permanent = [f for f in failures if not isinstance(f[1], RetriableError)] + self._conversion_failures
        self._conversion_failures = []
        stats.errors += len(new_permanent)
        failed_now = {partition_key(r.source_partition) for r, _ in transient}
        self._awaiting = {k for k in self._awaiting if k not in safe or k in failed_now}
        if not self._resend and not self._awaiting and self._retry.failing(_DELIVERY):
            self._retry.succeeded(_DELIVERY)
        unresolved = self._resolve_permanent(new_permanent, handler, stats)
        blocked = {partition_key(r.source_partition) for r in self._resend} | self._awaiting
        blocked.update(partition_key(r.source_partition) for r, _ in self._permanent)
        blocked.update(partition_key(r.source_partition) for r, _ in unresolved)
        released = set()
        for ident, key in ids.items():
            if key in safe and key not in blocked:
                committed[key] = safe[key]
                released.add(ident)
                del pending[ident]
        if complete:
            self._unflushed = 0
        if self._unacked:
            self._commit_records(failures, released, ids)
        gc.collect(1)
        if unresolved:
            record, error = unresolved[0]
            raise TaskFailedError(
                f"{len(unresolved)} record(s) could not be written and nothing tolerated them "
                f"(no hook accepted them, no errors.deadletterqueue.topic.name, errors.tolerance=none); "
                f"first: {record.position()}: {type(error).__name__}: {error}") from error

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

    def _commit_records(self, failures: list, released: set[int], ids: dict[int, str]) -> None:
        """``SourceTask.commit_record`` for each acknowledged record of a released partition."""
        failed_ids = {id(r) for r, _ in failures}
        released_keys = {ids[i] for i in released}
        keep = []
        for r in self._unacked:
            if id(r) in failed_ids:
                continue
            ident = id(r.source_partition)
            if ident in released or (ident not in ids and partition_key(r.source_partition) in released_keys):
                self.source.commit_record(r, None)
            else:
                keep.append(r)
        self._unacked[:] = keep

    # -- lifecycle -----------------------------------------------------------------------------
    def stop(self) -> None:
        errors = []
        self._set_deadline(time.monotonic() + 1.0)  # a stopping sink may flush a little, not wait long
        for step in (lambda: self.sink.close(list(self._opened.values())), self.sink.stop, self.source.stop):
            try:
                step()
            except Exception as exc:  # noqa: BLE001 - stop everything, report the first failure
                errors.append(exc)
        self._opened.clear()
        if errors:
            raise ConnectError(f"task {self.name} did not stop cleanly: {errors[0]}") from errors[0]
