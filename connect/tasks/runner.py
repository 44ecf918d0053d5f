"""TaskPairRunner: one SourceTask feeding one SinkTask, one epoch at a time.

This is what one Spark partition executes (see ``worker.partition``), and what unit tests
drive directly. Within an epoch, records stream to the sink as soon as they are polled; when
``max.in.flight.records`` are unacknowledged the runner stops polling and asks the sink to
``pre_commit`` (backpressure); at the end of the epoch it does so once more and returns the
offsets that are now safe to persist, with stats and any failure.

At-least-once: an offset is returned only when every record at or before it in its source
partition was acknowledged, or was accepted by a RIP-45 hook, the dead-letter topic or
``errors.tolerance=all``. When something fails that nothing accepts, the partitions written
since the last commit point keep their previous offsets and the epoch ends FAILED.
"""

from __future__ import annotations

import gc
import logging
import operator
import os
import time
import traceback
from typing import Any, Callable, Mapping

from connect.converters import BytesConverter, converter_for
from connect.errors import ConnectError, ConversionError, TaskFailedError
from connect.records import ConnectRecord, make_record, partition_key
from connect.sink import ErrantRecordReporter, SinkTask, SinkTaskContext
from connect.source import OffsetStorageReader, SourceTask, SourceTaskContext
from connect.tasks.failures import FailedRecordHandler
from connect.tasks.results import FAILED, RUNNING, EpochResult, EpochStats
from connect.tasks.retry import RetryPolicy

__all__ = ["TaskPairRunner"]

log = logging.getLogger(__name__)


_VALUE = operator.attrgetter("value")
_KEY = operator.attrgetter("key")


def _payload_bytes(batch) -> int:
    """Key + value bytes of a batch holding None or non-bytes payloads."""
    return sum(len(x) for r in batch for x in (r.key, r.value) if isinstance(x, (bytes, str)))


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
    """Owns a started source task and sink task; ``run_epoch`` moves records between them."""

    def __init__(self, *, connector: str, task_id: int, source: SourceTask, sink: SinkTask,
                 source_config: Mapping[str, Any], sink_config: Mapping[str, Any],
                 settings: Mapping[str, Any], offsets: Mapping[str, Mapping[str, Any]] | None = None,
                 dlq_factory: Callable[[], SinkTask] | None = None,
                 stop_requested: Callable[[], bool] = lambda: False):
        self.connector = connector
        self.task_id = task_id
        self.name = f"{connector}-{task_id}"
        self.source = source
        self.sink = sink
        self.settings = dict(settings)
        self._converters = _SideConverters(source_config, sink_config)
        self._stop_requested = stop_requested
        self._dlq_factory = dlq_factory
        self._reporter = ErrantRecordReporter()
        self._opened: dict[str, Mapping[str, Any]] = {}  # partition key -> partition
        self._opened_ids: dict[int, Mapping[str, Any]] = {}
        self._wants_commit_record = type(source).commit_record is not SourceTask.commit_record
        self._failed = False
        self._known_offsets = set(offsets or ())
        self._start_offsets_due = True
        self._returned_offsets = False
        self.source.context = SourceTaskContext(self.name, source_config, OffsetStorageReader(offsets))
        self.sink.context = SinkTaskContext(self.name, sink_config, self._reporter)
        self.source.start(source_config, self.source.context)
        try:
            self.sink.start(sink_config, self.sink.context)
        except BaseException:
            self.source.stop()
            raise

    # -- one epoch ---------------------------------------------------------------------------
    def run_epoch(self, epoch: int, *, max_ms: int | None = None, max_records: int | None = None) -> EpochResult:
        s = self.settings
        max_ms = s["epoch.max.ms"] if max_ms is None else max_ms
        max_records = s["epoch.max.records"] if max_records is None else max_records
        max_in_flight = s["max.in.flight.records"]
        stats = EpochStats()
        retry = RetryPolicy(s["errors.retry.timeout"], s["errors.retry.delay.max.ms"],
                            on_retry=lambda: setattr(stats, "retries", stats.retries + 1))
        handler = FailedRecordHandler(
            source=self.source, stats=stats, tolerance_all=s["errors.tolerance"] == "all",
            log_errors=s["errors.log.enable"], dlq_factory=self._dlq_factory, connector=self.connector,
            task=str(self.task_id), dlq_headers=s["errors.deadletterqueue.context.headers.enable"])
        started = time.time()
        deadline = time.monotonic() + max_ms / 1000
        committed: dict[str, dict[str, Any]] = {}
        pending: dict[int, ConnectRecord] = {}  # id(source_partition) -> last record put
        unacked: list[ConnectRecord] | None = [] if self._wants_commit_record else None
        conversion_failures: list[tuple[ConnectRecord, BaseException]] = []
        convert = None if self._converters.identity else self._converters.convert
        in_flight = 0
        state, trace = RUNNING, None
        # Records are acyclic and freed by reference counting; the cyclic collector would
        # re-scan every in-flight record many times per epoch. Pause it and collect the young
        # generations at each commit point instead.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            if self._failed:
                raise TaskFailedError("task failed in an earlier epoch; restart it")
            if self._start_offsets_due:
                # Persist where never-committed partitions start (latest, a timestamp, the low
                # watermark) in an epoch of its own, before any record moves: a crash or restart
                # after that resumes there instead of resolving the start position again.
                self._start_offsets_due = False
                fresh = {k: dict(v) for k, v in self.source.start_offsets().items() if k not in self._known_offsets}
                if fresh:
                    committed.update(fresh)
                    max_records = 0
            while stats.records < max_records and time.monotonic() < deadline and not self._stop_requested():
                batch = retry.call("source poll", self.source.poll)
                if not batch:
                    continue
                # Last record per source partition; offsets follow what was polled, converted or
                # not: a record that failed conversion advances its partition only once resolved.
                last = {id(r.source_partition): r for r in batch}
                pending.update(last)
                if last.keys() - self._opened_ids.keys():
                    self._open_new_partitions(last)
                if convert is not None:
                    batch = self._convert(batch, convert, conversion_failures)
                    if not batch:
                        continue
                retry.call("sink put", lambda b=batch: self.sink.put(b))
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
                in_flight += n
                if in_flight >= max_in_flight:
                    self._commit_point(pending, committed, unacked, conversion_failures, retry, handler, stats)
                    in_flight = 0
            self._commit_point(pending, committed, unacked, conversion_failures, retry, handler, stats)
            self._returned_offsets = bool(committed)
        except Exception as exc:  # noqa: BLE001 - every failure is reported with its trace
            self._failed = True
            state = FAILED
            trace = "".join(traceback.format_exception(exc))
            log.error("task %s failed in epoch %d: %s", self.name, epoch, exc)
        finally:
            handler.close()
            if gc_was_enabled:
                gc.enable()
        lag = None
        try:
            lag = self.source.lag()
        except Exception:  # noqa: BLE001 - lag is informational
            pass
        return EpochResult(self.connector, self.task_id, epoch, state, committed, stats.as_dict(), started,
                           time.time(), lag=lag, trace=trace, pid=os.getpid())

    def _convert(self, batch, convert, failures: list) -> list[ConnectRecord]:
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

    def _commit_point(self, pending: dict[int, ConnectRecord], committed: dict, unacked: list | None,
                      conversion_failures: list, retry: RetryPolicy, handler: FailedRecordHandler,
                      stats: EpochStats) -> None:
        """Flush the sink, resolve failed records, and move ``committed`` forward where allowed."""
        offsets = {partition_key(r.source_partition): dict(r.source_offset) for r in pending.values()}
        stats.flushes += 1
        safe = retry.call("sink flush", lambda: self.sink.pre_commit(offsets))
        failures = self._retry_rejected(self._reporter.take(), retry, stats)
        failures.extend(conversion_failures)
        conversion_failures.clear()
        unresolved = handler.handle(failures)
        blocked = {partition_key(r.source_partition) for r, _ in unresolved}
        committed.update({k: v for k, v in safe.items() if k not in blocked})
        pending.clear()
        gc.collect(1)
        if unacked:
            failed_ids = {id(r) for r, _ in failures}
            for r in unacked:
                if id(r) not in failed_ids:
                    self.source.commit_record(r, None)
            unacked.clear()
        if unresolved:
            record, error = unresolved[0]
            raise TaskFailedError(
                f"{len(unresolved)} record(s) could not be written and nothing tolerated them "
                f"(no hook accepted them, no errors.deadletterqueue.topic.name, errors.tolerance=none); "
                f"first: {record.position()}: {type(error).__name__}: {error}") from error

    def _retry_rejected(self, failures: list, retry: RetryPolicy, stats: EpochStats) -> list:
        """Re-send records the destination rejected until they succeed or retries run out."""
        if not failures:
            return failures
        for delay in retry.delays():
            stats.retries += len(failures)
            time.sleep(delay)
            retry.call("sink put", lambda f=failures: self.sink.put([r for r, _ in f]))
            retry.call("sink flush", lambda: self.sink.flush({}))
            failures = self._reporter.take()
            if not failures:
                break
        return failures

    # -- lifecycle -----------------------------------------------------------------------------
    def stop(self) -> None:
        errors = []
        for step in (lambda: self.sink.close(list(self._opened.values())), self.sink.stop, self.source.stop):
            try:
                step()
            except Exception as exc:  # noqa: BLE001 - stop everything, report the first failure
                errors.append(exc)
        self._opened.clear()
        if errors:
            raise ConnectError(f"task {self.name} did not stop cleanly: {errors[0]}") from errors[0]
