"""FrameworkSettings: a connector's framework keys, parsed once into a typed object.

``worker.pipeline.PIPELINE_CONFIG`` declares and validates the keys (``tasks.max``,
``epoch.max.ms``...); :meth:`FrameworkSettings.from_config` turns the validated values into this
object, which the driver and the task-pair runner read from then on: ``settings.runner`` is the
:class:`~connect.tasks.policy.RunnerPolicy` each pair obeys, the rest is the worker's own.
"""

from __future__ import annotations

from typing import Any, Mapping

import attrs

from connect.tasks.policy import RunnerPolicy

__all__ = ["FrameworkSettings", "RestartPolicy"]


@attrs.frozen
class RestartPolicy:
    """When a pair FAILED by transient trouble (retries exhausted, could not start) is restarted:
    after ``backoff_ms``, doubling per consecutive failure up to ``backoff_max_ms``; a pair that
    completes an epoch resets it. Pairs FAILED by a permanent error stay FAILED until restarted
    by hand (or by a reconfiguration), as in Kafka Connect."""

    backoff_ms: int = 1_000
    backoff_max_ms: int = 60_000

    def delay_s(self, consecutive_failures: int) -> float:
        return min(self.backoff_ms * 2 ** max(consecutive_failures - 1, 0), self.backoff_max_ms) / 1000


@attrs.frozen
class FrameworkSettings:
    tasks_max: int = 1
    runner: RunnerPolicy = RunnerPolicy()
    restart: RestartPolicy = RestartPolicy()
    dlq_topic: str = ""

    @classmethod
    def from_config(cls, values: Mapping[str, Any], aliases: tuple[str, str] = ("", "")) -> FrameworkSettings:
        """From the typed values of ``PIPELINE_CONFIG.parse`` (every key present) and the replication
        flow's (source, target) cluster aliases."""
        return cls(
            tasks_max=values["tasks.max"],
            runner=RunnerPolicy(
                epoch_max_ms=values["epoch.max.ms"],
                epoch_max_records=values["epoch.max.records"],
                epoch_grace_ms=values["epoch.grace.ms"],
                epoch_bridge_ms=values["epoch.bridge.ms"],
                max_in_flight_records=values["max.in.flight.records"],
                retry_timeout_ms=values["errors.retry.timeout"],
                retry_delay_max_ms=values["errors.retry.delay.max.ms"],
                tolerance_all=values["errors.tolerance"] == "all",
                log_errors=values["errors.log.enable"],
                dlq_context_headers=values["errors.deadletterqueue.context.headers.enable"],
                source_alias=aliases[0],
                target_alias=aliases[1],
                origin_property=values["replication.origin.property"],
                max_hops=values["replication.max.hops"],
                topic_policy=values["replication.policy"],
                policy_separator=values["replication.policy.separator"],
                offset_syncs_topic=values["offset.syncs.topic"],
                offset_syncs_interval_ms=values["offset.syncs.interval.ms"],
                offset_syncs_max_lag=values["offset.syncs.max.lag"],
            ),
            restart=RestartPolicy(values["errors.restart.backoff.ms"], values["errors.restart.backoff.max.ms"]),
            dlq_topic=values["errors.deadletterqueue.topic.name"],
        )

    @classmethod
    def parse(cls, config: Mapping[str, Any]) -> FrameworkSettings:
        """From raw string values (tests, tools): validated by PIPELINE_CONFIG first."""
        from worker.pipeline import PIPELINE_CONFIG

        return cls.from_config(PIPELINE_CONFIG.parse(config))
