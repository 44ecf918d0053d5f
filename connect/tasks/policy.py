"""RunnerPolicy: the typed limits and error rules one task pair obeys (parsed once by the worker)."""

from __future__ import annotations

import attrs

__all__ = ["RunnerPolicy"]


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

    epoch_max_ms: int = 10_000
    epoch_max_records: int = 1_000_000
    epoch_grace_ms: int = 2_000
    epoch_bridge_ms: int = 500  # between epochs the pair keeps moving records this long at most (0: it pauses)
    max_in_flight_records: int = 100_000
    retry_timeout_ms: int = 30_000  # -1: retry transient failures forever; 0: fail at the first
    retry_delay_max_ms: int = 5_000
    tolerance_all: bool = False
    log_errors: bool = False
    dlq_context_headers: bool = True
    # Replication (``connect.tasks.origin``): both aliases set turn the origin chain on.
    source_alias: str = ""
    target_alias: str = ""
    origin_property: str = "ROCKETMQ_REPLICATOR_SOURCE"
    max_hops: int = 0  # 0: no limit (the chain alone stops loops)
    topic_policy: str = "identity"  # or "prefix"
    policy_separator: str = "."
    # Offset syncs (``connect.tasks.offsetsync``): where acknowledged records landed, for checkpoints.
    offset_syncs_topic: str = ""  # empty: none written
    offset_syncs_interval_ms: int = 1_000
    offset_syncs_max_lag: int = 100  # a sync at least every this many records per (source, target) partition

    @property
    def retries_forever(self) -> bool:
        return self.retry_timeout_ms < 0
