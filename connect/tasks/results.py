"""What one epoch of one task pair returns to the driver (small and picklable)."""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["EpochStats", "EpochResult", "RUNNING", "FAILED", "REASON_KEPT", "REASON_SHOWN"]

REASON_KEPT = 4000  # characters of an error kept in stats
REASONS_KEPT = 32  # distinct failure reasons an epoch keeps; the rest are counted under OTHER_REASONS
OTHER_REASONS = "(other reasons: see the task's log and the dead-letter headers)"
REASON_SHOWN = 1000  # characters shown, after masking (32 kept per connector: bounded)

RUNNING = "RUNNING"
FAILED = "FAILED"


@attrs.define(slots=True)
class EpochStats:
    records: int = 0  # records put to the sink
    bytes: int = 0  # key + value bytes put to the sink
    errors: int = 0  # records that failed permanently (conversion, refused by the destination)
    transient: int = 0  # transient delivery failures (timeouts, full queue...): re-sent, never skipped
    retries: int = 0  # retried calls (poll, put, flush) and re-sent records
    dismissed: int = 0  # failed records the source task dismissed (dismiss_failed_msgs)
    customer_handled: int = 0  # failed records the source task handled (customer_failed_msgs)
    dead_lettered: int = 0  # failed records written to the dead-letter topic
    skipped: int = 0  # failed records skipped by errors.tolerance=all
    filtered: int = 0  # records not written by replication rules (origin chain, max hops, cycle by name)
    flushes: int = 0  # commit points
    in_flight: int = 0  # records put (or waiting to be re-sent) not yet acknowledged when the epoch ended
    latency_ms_max: float = 0.0  # record age (now - record timestamp) when put, worst seen
    latency_ms_sum: float = 0.0
    latency_samples: int = 0
    acknowledged: int = 0  # records whose generation completed (delivered, or resolved by hooks/DLQ/tolerance)
    # Acknowledged records whose offsets are in this epoch's committed offsets (persisted by the
    # driver with the result): what the operator may call committed. Less than ``acknowledged``
    # while a partition is held by a failure.
    committed: int = 0
    # Operations failing transiently at the epoch's end, retried: [{"operation", "reason",
    # "for_s", "partitions"}] ("partitions": the source partitions held; empty: the whole pair).
    retrying: list = attrs.field(factory=list)
    # Acknowledgement latency: when a generation is seen complete (at a commit point) minus the
    # timestamp of each partition's last record in it; detection waits for the next commit point.
    ack_latency_ms_max: float = 0.0
    ack_latency_ms_sum: float = 0.0
    ack_latency_samples: int = 0
    failure_reasons: dict[str, int] = attrs.field(factory=dict)  # "ErrorClass: message" -> records
    delivery: str = ""  # exactly-once or at-least-once (and why), see connect.tasks.exactlyonce
    transactions: int = 0  # exactly-once: transactions committed
    aborted: int = 0  # exactly-once: transactions aborted
    fenced: int = 0  # exactly-once: 1 when a newer attempt of the pair fenced this one
    commit_s: float = 0.0  # exactly-once: time spent committing transactions

    def count_reasons(self, failures) -> dict[str, int]:
        """Group ``(record, error)`` pairs by reason; add them to ``failure_reasons``; return this batch's."""
        batch: dict[str, int] = {}
        kept = self.failure_reasons
        for _, error in failures:
            # Cut long, not short: whoever shows it masks secrets first and cuts after (a secret cut
            # in half would no longer be recognised).
            reason = f"{type(error).__name__}: {error}"[:REASON_KEPT]
            if reason not in batch and reason not in kept and len(batch.keys() | kept.keys()) >= REASONS_KEPT:
                reason = OTHER_REASONS  # reasons naming each record's position must not grow without bound
            batch[reason] = batch.get(reason, 0) + 1
        for reason, n in batch.items():
            self.failure_reasons[reason] = self.failure_reasons.get(reason, 0) + n
        return batch

    def observe_latency(self, age_ms: float) -> None:
        if age_ms > self.latency_ms_max:
            self.latency_ms_max = age_ms
        self.latency_ms_sum += age_ms
        self.latency_samples += 1

    def observe_batch_latency(self, oldest_ms: float, newest_ms: float, records: int) -> None:
        """A batch's record ages, per record without a clock read per record: the oldest record's
        age is the batch's worst, and each record counts at the mean of the oldest and newest age
        (records of a batch are polled in order, so their ages lie between the two)."""
        if oldest_ms > self.latency_ms_max:
            self.latency_ms_max = oldest_ms
        self.latency_ms_sum += (oldest_ms + newest_ms) / 2 * records
        self.latency_samples += records

    def observe_ack_latency(self, age_ms: float) -> None:
        if age_ms > self.ack_latency_ms_max:
            self.ack_latency_ms_max = age_ms
        self.ack_latency_ms_sum += age_ms
        self.ack_latency_samples += 1

    @property
    def latency_ms_avg(self) -> float:
        return self.latency_ms_sum / self.latency_samples if self.latency_samples else 0.0

    def as_dict(self) -> dict[str, Any]:
        out = attrs.asdict(self)
        out["latency_ms_avg"] = self.latency_ms_avg
        return out


@attrs.define(slots=True)
class EpochResult:
    connector: str
    task: int
    epoch: int
    state: str
    offsets: dict[str, dict[str, Any]]  # partition key -> last committed source offset
    stats: dict[str, Any]
    started_at: float
    ended_at: float
    lag: int | None = None
    trace: str | None = None
    pid: int = 0
    restarted: bool = False  # the worker process had to (re)start this pair's tasks
    retriable: bool = False  # FAILED by transient trouble (retries exhausted, cannot start): restart with backoff
    token: str = ""  # the driver's fencing token of the attempt that produced this result
    host: str = ""  # where it ran (hostname), with ``pid``
    # Set by the driver: seconds from the end of this pair's previous epoch to the start of this
    # one (results returned, offsets persisted, next job scheduled, runner reached). Wall clocks
    # of the executors' hosts; None for a pair's first epoch.
    gap_s: float | None = None
    metrics: dict[str, float] | None = None  # the tasks' own gauges (SourceTask/SinkTask.metrics) at epoch end
    partition_lag: dict[str, list[float]] | None = None  # partition key -> [records, seconds] behind the source
    gaps: list[dict[str, Any]] | None = None  # records the source dropped before they were copied (SourceGap.as_dict)

    @property
    def duration(self) -> float:
        return max(self.ended_at - self.started_at, 1e-9)
