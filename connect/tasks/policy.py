"""RunnerPolicy: the typed limits and error rules one task pair obeys.

Each field that a connector config sets is declared here once, with its key, default, doc and
validator (:func:`connect.settings.setting`); the worker generates its key definitions
(``worker.pipeline.PIPELINE_CONFIG``) from these fields and builds the policy from the parsed
values, so no default is written twice.
"""

from __future__ import annotations

import attrs

from connect.config import Type, at_least, in_range, non_empty, one_of
from connect.settings import setting
from connect.tasks.topology import Topology

__all__ = ["RunnerPolicy", "HOUR_MS"]

HOUR_MS = 3_600_000


@attrs.frozen
class RunnerPolicy:
    """What :class:`~connect.tasks.runner.TaskPairRunner` obeys; the worker builds it from the
    framework keys of a connector (``epoch.max.ms`` -> ``epoch_max_ms``...), tests build it directly.

    Time bounds: polling stops at ``epoch_max_ms``; the final flush of the epoch and the handling
    of failed records may take ``epoch_grace_ms`` more. Every wait inside the pair (poll, a full
    producer queue, flush, retry backoff) is cut at that bound or at the stop signal, whichever
    comes first, so an epoch never lasts longer than ``epoch_max_ms + epoch_grace_ms`` (plus one
    ``poll.timeout.ms`` of the source, which is expected to be short).
    """

    epoch_max_ms: int = setting(
        "epoch.max.ms", Type.INT, 10_000, "Longest epoch: offsets are committed at least this often.",
        validator=in_range(10, HOUR_MS))
    epoch_max_records: int = setting(
        "epoch.max.records", Type.INT, 1_000_000, "The epoch ends once a task pair moved this many records "
        "(the last poll's batch is always completed).", validator=in_range(1, 1_000_000_000))
    epoch_grace_ms: int = setting(
        "epoch.grace.ms", Type.INT, 2_000,
        "Time after epoch.max.ms (or after a stop request) for the final flush and failed-record handling; "
        "what is not acknowledged by then is committed in a later epoch.", validator=in_range(0, HOUR_MS))
    epoch_bridge_ms: int = setting(
        "epoch.bridge.ms", Type.INT, 500,
        "Between two epochs (while the result goes to the driver and the next one is scheduled) the pair "
        "keeps moving records for at most this long, as part of the next epoch; 0 pauses it instead.",
        validator=in_range(0, HOUR_MS))
    max_in_flight_records: int = setting(
        "max.in.flight.records", Type.INT, 100_000,
        "Records put to the sink but not yet acknowledged before polling pauses for a flush.",
        validator=in_range(1, 10_000_000))
    retry_timeout_ms: int = setting(  # -1: retry transient failures forever; 0: fail at the first
        "errors.retry.timeout", Type.INT, 30_000,
        "Milliseconds a transient failure (poll, put, undelivered records) may last before the task pair is "
        "FAILED and restarted with backoff; -1 = retry forever, 0 = fail at once. Nothing is ever skipped.",
        validator=in_range(-1, 7 * 24 * HOUR_MS))
    retry_delay_max_ms: int = setting(
        "errors.retry.delay.max.ms", Type.INT, 5_000, "Longest wait between retries (backoff doubles from 100 ms).",
        validator=in_range(1, HOUR_MS))
    native_batches: bool = setting(
        "native.batches", Type.BOOLEAN, True,
        "Move the source client's own messages to the sink without building a record per message where the "
        "path allows it (a sink of the source's kind; no transform, no non-identity converter, no offset syncs; "
        "replication stages are applied to headers). false: always build records.")
    tolerance_all: bool = setting(
        "errors.tolerance", Type.STRING, "none",
        "none: a record that fails after retries, hooks and DLQ fails the task; all: skip and count it.",
        validator=one_of("none", "all"), convert=lambda value: value == "all")
    log_errors: bool = setting(
        "errors.log.enable", Type.BOOLEAN, False, "Log every failed record with its position and error.")
    dlq_context_headers: bool = setting(
        "errors.deadletterqueue.context.headers.enable", Type.BOOLEAN, True,
        "Add __connect.errors.* headers (origin position, exception) to dead-lettered records.")
    exactly_once: str = setting(
        "exactly.once.support", Type.STRING, "disabled",
        "required: each epoch of a task pair is one transaction on the target (records and source offsets "
        "committed together; Kafka sinks only), or the connector fails naming why; requested: the same where "
        "the sink and target can, at-least-once (and said so in the status) where not; disabled: at-least-once.",
        validator=one_of("required", "requested", "disabled"))
    # Replication (``connect.tasks.replication``): both aliases set (from the sides' cluster.alias)
    # turn the replication stages on.
    source_alias: str = ""
    target_alias: str = ""
    origin_property: str = setting(
        "replication.origin.property", Type.STRING, "ROCKETMQ_REPLICATOR_SOURCE",
        "Header / Pulsar property / RocketMQ user property holding the origin chain (RIP-45's name).",
        validator=non_empty)
    max_hops: int = setting(  # 0: no limit (the chain alone stops loops)
        "replication.max.hops", Type.INT, 0, "Most copies a record may have been through already to be copied "
        "again; 1 = only records born in the source cluster (a full mesh); 0 = no limit (a ring).",
        validator=in_range(0, 64))
    topic_policy: str = setting(
        "replication.policy", Type.STRING, "identity",
        "Target topic names: identity (same name) or prefix ({source alias}{separator}{topic}, MM2's default).",
        validator=one_of("identity", "prefix"))
    policy_separator: str = setting(
        "replication.policy.separator", Type.STRING, ".", "Separator of the prefix policy.", validator=non_empty)
    # Offset syncs (``connect.tasks.offsetsync``): where acknowledged records landed, for checkpoints.
    offset_syncs_topic: str = setting(  # empty: none written
        "offset.syncs.topic", Type.STRING, "",
        "Topic in the target cluster that receives offset syncs (where replicated records landed, for the "
        "checkpoint connector's offset translation); written with the sink's connector. Empty: none.")
    offset_syncs_interval_ms: int = setting(
        "offset.syncs.interval.ms", Type.INT, 1_000,
        "Most often an offset sync is written per source partition and target partition.", validator=at_least(10))
    offset_syncs_max_lag: int = setting(
        "offset.syncs.max.lag", Type.INT, 100,
        "An offset sync is also written whenever a source partition moved more than this many records (into "
        "one target partition) since its last one, whatever the interval: a consumer group is translated with "
        "at most this many records read again (MirrorMaker 2's offset.lag.max).", validator=at_least(1))
    # The flows of this flow's replication group the worker knows (set by the worker, no key):
    # a record takes one path through them (``connect.tasks.topology``). None: unknown.
    topology: Topology | None = None

    @property
    def retries_forever(self) -> bool:
        return self.retry_timeout_ms < 0
