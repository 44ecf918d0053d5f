"""Kafka config connector: MirrorMaker 2's topic, config and ACL sync as metadata change events.

``kafka-metadata`` *source* (:class:`KafkaMetadataSourceConnector`): every ``poll.interval.ms`` one
task describes the cluster - topics named in ``topics``, or matched by ``topics.regex`` less
``topics.exclude``, their partition counts and configs, and (``sync.acls.enabled``) the literal
and prefixed TOPIC ACLs of those topics - and emits a :class:`~connectors.replicator.metadata.MetadataChangeEvent`
per change (``diff_events``); every ``snapshot.interval.ms``, and at start, it emits every resource
(PIP-136's snapshot sync). Events are records of the topic ``topic`` (key ``<resource>/<name>``,
value the event JSON), source partition ``{"metadata": <cluster.name>}``, offset ``{"ts": <ms>}``;
a restart begins with a snapshot, so nothing is replayed from offsets.

- ``Topics/<topic>``: ``{"broker": "kafka", "partitions": N, "configs": {name: value}}``. Configs are
  MM2's ``targetConfig`` selection: not read-only, not sensitive, not static broker configs, not
  matched by ``configs.exclude`` (MM2's DefaultConfigPropertyFilter list by default), and not
  defaults (``use.defaults.from=target``, MM2's default; ``source`` copies the source's defaults too).
- ``Acls/<topic>/<digest>``: ``{"broker": "kafka", "topic", "principal", "host", "operation",
  "permission", "patternType"}`` - every literal TOPIC binding of a watched topic and every prefixed
  one whose prefix is watched or starts a watched topic, DENY included; which of them a cluster
  takes is the sink's decision.

``kafka-metadata`` *sink* (:class:`KafkaMetadataSinkConnector`, synchronous) applies events to its
cluster; events of its own ``cluster.name`` are skipped (the echo of its own changes), and an event
older than the last one applied for the same resource changes nothing (PIP-136's last writer wins;
stamps are held in memory, Kafka topics cannot store them).

- Topics Created/Modified: the topic (named by ``topic.template`` from the source name; a Pulsar name
  ``persistent://t/ns/x`` gives ``x``) is created with the mapped partition count
  (``connectors.replicator.mapping.target_units``) or grown to it, never shrunk. Configs are copied
  only from Kafka sources (created with the topic, then kept equal with IncrementalAlterConfigs:
  values set, target overrides the source no longer has deleted - MM2's incremental mode);
  ``configs.exclude`` names are never set nor deleted. Other brokers' configs do not map (logged once).
- Topics Deleted: ignored, as MM2 never deletes; ``sync.topic.deletes=true`` deletes the target.
- Acls (MM2's rules, prefixed bindings too): literal and prefixed TOPIC bindings (a prefix is named
  by ``topic.template`` as a topic is, so only a template ending in ``{topic}`` can name one; else
  the binding is skipped); ALLOW WRITE is not copied (only the replicator
  writes to replicated topics), ALLOW ALL becomes READ, everything else - DENY bindings included -
  is copied as it is. ACLs are never deleted (MM2 neither).
- Tenants, Namespaces and SubscriptionGroups have no Kafka counterpart here (groups are the
  checkpoint connector's): counted as ignored.

A record that is not a valid event, or that the cluster refuses, is reported with a
:class:`~connect.errors.ConnectError` naming its position and JSON path; an unreachable or busy
cluster with a :class:`~connect.errors.RetriableError` (the event, and those after it, are re-sent
in order). ``metrics()`` counts both sides' work (``metadata.source.*``, ``metadata.sink.*``).
"""

from __future__ import annotations

from typing import Any, Mapping

from connect.config import ConfigDef
from connect.connector import SinkConnector, SourceConnector
from connect.errors import ConfigIssue
from connect.source.partitioned import topic_selection_issues
from connectors.kafka.metadata.applier import KafkaMetadataSinkTask
from connectors.kafka.metadata.config import SINK_CONFIG, SOURCE_CONFIG
from connectors.kafka.metadata.watcher import KafkaMetadataSourceTask

__all__ = ["KafkaMetadataSourceConnector", "KafkaMetadataSinkConnector"]


class KafkaMetadataSourceConnector(SourceConnector):
    @classmethod
    def config_def(cls) -> ConfigDef:
        return SOURCE_CONFIG

    @classmethod
    def validate(cls, config: Mapping[str, Any]) -> list[ConfigIssue]:
        return super().validate(config) + topic_selection_issues(config)

    @classmethod
    def task_class(cls) -> type:
        return KafkaMetadataSourceTask

    def task_configs(self, max_tasks: int) -> list[dict[str, Any]]:
        return [dict(self.config)]  # one watcher per cluster

    def source_topics(self) -> Mapping[str, int]:
        return {SOURCE_CONFIG.parse(self.config)["topic"]: 1}


class KafkaMetadataSinkConnector(SinkConnector):
    @classmethod
    def config_def(cls) -> ConfigDef:
        return SINK_CONFIG

    @classmethod
    def task_class(cls) -> type:
        return KafkaMetadataSinkTask

    def task_configs(self, max_tasks: int) -> list[dict[str, Any]]:
        return [dict(self.config)]  # events apply in order: one task
