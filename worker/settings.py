"""FrameworkSettings: a connector's framework keys, declared and parsed once into a typed object.

Every framework key (``tasks.max``, ``epoch.max.ms``...) is a field of a settings class, declared
with its default, doc and validator (:func:`connect.settings.setting`): the pair's
:class:`~connect.tasks.policy.RunnerPolicy`, the :class:`RestartPolicy` and
:class:`FrameworkSettings` itself. :data:`FRAMEWORK_CONFIG` is generated from those fields
(``worker.pipeline.PIPELINE_CONFIG`` is it) and :meth:`FrameworkSettings.from_config` builds the
object from the values it parsed; the driver and the task-pair runner read the object from then on.
"""

from __future__ import annotations

from typing import Any, Mapping

import attrs

from connect.config import Importance, Type, in_range
from connect.settings import nested, setting, settings_def, settings_from
from connect.tasks.policy import HOUR_MS, RunnerPolicy

__all__ = ["FrameworkSettings", "RestartPolicy", "ReplicatorTags", "FRAMEWORK_CONFIG"]


@attrs.frozen
class RestartPolicy:
    """When a pair FAILED by transient trouble (retries exhausted, could not start) is restarted:
    after ``backoff_ms``, doubling per consecutive failure up to ``backoff_max_ms``; a pair that
    completes an epoch resets it. Pairs FAILED by a permanent error stay FAILED until restarted
    by hand (or by a reconfiguration), as in Kafka Connect."""

    backoff_ms: int = setting(
        "errors.restart.backoff.ms", Type.INT, 1_000,
        "First wait before a task pair FAILED by transient trouble is restarted; doubles per failed restart.",
        validator=in_range(0, HOUR_MS))
    backoff_max_ms: int = setting(
        "errors.restart.backoff.max.ms", Type.INT, 60_000, "Longest wait between restarts of a task pair.",
        validator=in_range(0, 24 * HOUR_MS))

    def delay_s(self, consecutive_failures: int) -> float:
        return min(self.backoff_ms * 2 ** max(consecutive_failures - 1, 0), self.backoff_max_ms) / 1000


@attrs.frozen
class ReplicatorTags:
    """PIP-18 onboarding marks (``worker.replication.replicators``): which replicator a connector belongs to."""

    id: str = setting("replicator.id", Type.STRING, "", "Set by replicator onboarding (PIP-18): the replicator "
                      "this connector belongs to (with replicator.namespace, .type, .region and .topic).")
    namespace: str = setting("replicator.namespace", Type.STRING, "",
                             "PIP-18: the namespace the replicator was added for.")
    type: str = setting("replicator.type", Type.STRING, "", "PIP-18: the replicator's target broker.")
    region: str = setting("replicator.region", Type.STRING, "",
                          "PIP-18: the replicator's target region (cluster) name.")
    topic: str = setting("replicator.topic", Type.STRING, "", "PIP-18: the source topic this connector replicates.")


@attrs.frozen
class FrameworkSettings:
    tasks_max: int = setting("tasks.max", Type.INT, 1, "Most task pairs to run; the source connector may use fewer.",
                             importance=Importance.HIGH, validator=in_range(1, 1024))
    runner: RunnerPolicy = nested(RunnerPolicy)
    restart: RestartPolicy = nested(RestartPolicy)
    dlq_topic: str = setting(
        "errors.deadletterqueue.topic.name", Type.STRING, "",
        "Topic that receives records the sink rejected (written with the sink's connector; dlq.* keys override).")
    # Read with sink.cluster.alias into runner.target_alias (``worker.pipeline``).
    target_cluster_alias: str = setting(
        "target.cluster.alias", Type.STRING, "", "MirrorMaker 2's name for sink.cluster.alias (either may be set).")
    replicator: ReplicatorTags = nested(ReplicatorTags)

    @classmethod
    def from_config(cls, values: Mapping[str, Any], aliases: tuple[str, str] = ("", "")) -> FrameworkSettings:
        """From the typed values of ``FRAMEWORK_CONFIG.parse`` (every key present) and the replication
        flow's (source, target) cluster aliases."""
        runner = settings_from(RunnerPolicy, values, source_alias=aliases[0], target_alias=aliases[1])
        return settings_from(cls, values, runner=runner)

    @classmethod
    def parse(cls, config: Mapping[str, Any]) -> FrameworkSettings:
        """From raw string values (tests, tools): validated by FRAMEWORK_CONFIG first."""
        return cls.from_config(FRAMEWORK_CONFIG.parse(config))


FRAMEWORK_CONFIG = settings_def(FrameworkSettings)
"""Every framework key of a connector config, generated from the settings classes above."""
