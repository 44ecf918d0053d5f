"""The Kafka metadata connector between two Apache Kafka 4.x clusters, through the real admin API:
topic configs (``retention.ms``, ``cleanup.policy``; MM2's excluded ones stay behind), their
changes and removals, partition growth (CreatePartitions), and ACLs - LITERAL and PREFIXED, ALLOW
and DENY - enforced by KRaft's StandardAuthorizer. MM2's defaults apply: ``use.defaults.from=target``
(only the source's non-default configs are copied)."""

from __future__ import annotations

import hashlib

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from pipeline_util import make_driver, pair_pipeline

import connect.plugins

pytestmark = pytest.mark.timeout(300)

connect.plugins.register_plugin("kafka-metadata-source", "connectors.kafka.metadata:KafkaMetadataSourceConnector")
connect.plugins.register_plugin("kafka-metadata-sink", "connectors.kafka.metadata:KafkaMetadataSinkConnector")

LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


def _set_configs(admin: AdminClient, topic: str, **ops) -> None:
    """``name=value`` sets, ``name=None`` deletes the topic's override."""
    entries = [ConfigEntry(name.replace("_", "."), value or "",
                           incremental_operation=AlterConfigOpType.DELETE if value is None else AlterConfigOpType.SET)
               for name, value in ops.items()]
    for f in admin.incremental_alter_configs([ConfigResource("TOPIC", topic, incremental_configs=entries)]).values():
        f.result(10)


def _overrides(admin: AdminClient, topic: str) -> dict[str, str]:
    """The topic's own configs (what Apache Kafka reports as DYNAMIC_TOPIC_CONFIG), defaults left out."""
    resource = ConfigResource("TOPIC", topic)
    entries = admin.describe_configs([resource])[resource].result(10)
    return {k: e.value for k, e in entries.items() if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}  # an int


def _partitions(admin: AdminClient, topic: str) -> int | None:
    t = admin.list_topics(timeout=10).topics.get(topic)
    return None if t is None or t.error is not None else len(t.partitions)


def _acls(admin: AdminClient, prefix: str) -> set[tuple]:
    everything = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    return {(b.name, b.resource_pattern_type, b.principal, b.operation, b.permission_type)
            for b in admin.describe_acls(everything).result(10) if b.name.startswith(prefix)}


def _until(driver, check, what: str, epochs: int = 40) -> None:
    for _ in range(epochs):
        for r in driver.run_epoch():
            assert r.state == "RUNNING", r.trace
        if check():
            return
    raise AssertionError(f"{what}: not reached after {epochs} epochs")


def test_topic_configs_partitions_and_acls_follow_the_source(apache_kafka_pair, spark, tmp_path, unique):
    a, b = apache_kafka_pair
    prefix = "md" + hashlib.sha1(unique.encode()).hexdigest()[:10]
    topic = f"{prefix}-orders"
    src, dst = AdminClient({"bootstrap.servers": a.bootstrap}), AdminClient({"bootstrap.servers": b.bootstrap})
    src.create_topics([NewTopic(topic, 3, 1, config={  # MM2 never copies the last two
        "retention.ms": "123456789", "cleanup.policy": "compact",
        "min.insync.replicas": "1", "message.timestamp.type": "LogAppendTime"})])[topic].result(10)
    src.create_topics([NewTopic(f"other-{prefix}", 1, 1)])[f"other-{prefix}"].result(10)  # not watched
    plain = f"{prefix}-plain"  # no configs of its own: the broker's log.retention.ms=-1 is not copied as one
    src.create_topics([NewTopic(plain, 1, 1)])[plain].result(10)

    def binding(name, pattern, principal, operation, permission):
        return AclBinding(ResourceType.TOPIC, name, pattern, principal, "*", operation, permission)

    source_acls = [
        binding(topic, LITERAL, "User:alice", AclOperation.READ, ALLOW),
        binding(topic, LITERAL, "User:mallory", AclOperation.READ, DENY),
        binding(topic, LITERAL, "User:carol", AclOperation.ALL, ALLOW),  # copied as READ (MM2)
        binding(topic, LITERAL, "User:writer", AclOperation.WRITE, ALLOW),  # not copied: only the replicator writes
        binding(f"{prefix}-", PREFIXED, "User:bob", AclOperation.DESCRIBE, ALLOW),  # the prefix is a watched name
        binding(f"{prefix}-or", PREFIXED, "User:eve", AclOperation.WRITE, DENY),  # the prefix starts a watched topic
        binding(f"other-{prefix}", PREFIXED, "User:bob", AclOperation.READ, ALLOW),  # covers no watched topic
        binding(f"other-{prefix}", LITERAL, "User:bob", AclOperation.READ, DENY),  # not a watched topic
    ]
    for f in src.create_acls(source_acls).values():
        f.result(10)
    expected_acls = {
        (topic, LITERAL, "User:alice", AclOperation.READ, ALLOW),
        (topic, LITERAL, "User:mallory", AclOperation.READ, DENY),
        (topic, LITERAL, "User:carol", AclOperation.READ, ALLOW),
        (f"{prefix}-", PREFIXED, "User:bob", AclOperation.DESCRIBE, ALLOW),
        (f"{prefix}-or", PREFIXED, "User:eve", AclOperation.WRITE, DENY),
    }
    pipeline = pair_pipeline(
        unique,
        {"connector.class": "kafka-metadata", "bootstrap.servers": a.bootstrap, "cluster.name": "A",
         "topics.regex": f"{prefix}-.*", "poll.interval.ms": "200", "snapshot.interval.ms": "3000"},
        {"connector.class": "kafka-metadata", "bootstrap.servers": b.bootstrap, "cluster.name": "B"},
        **{"epoch.max.ms": "700"})
    driver = make_driver(spark, tmp_path, pipeline)
    try:
        # 1. created with the source's partitions and copyable configs; the ACLs MM2's rules keep
        _until(driver, lambda: _partitions(dst, topic) == 3 and _acls(dst, prefix) | _acls(dst, f"other-{prefix}")
               == expected_acls, "the topic and its ACLs in B")
        assert _overrides(dst, topic) == {"retention.ms": "123456789", "cleanup.policy": "compact"}
        assert _partitions(dst, f"other-{prefix}") is None
        _until(driver, lambda: _partitions(dst, plain) == 1, "the topic without configs in B")
        assert _overrides(dst, plain) == {}

        # 2. a changed config follows; a removed override is removed (MM2's incremental mode)
        _set_configs(src, topic, retention_ms="86400000", cleanup_policy=None)
        _until(driver, lambda: _overrides(dst, topic) == {"retention.ms": "86400000"}, "retention.ms changed in B")

        # 3. the source grows to 5 partitions (CreatePartitions); the target follows
        src.create_partitions([NewPartitions(topic, 5)])[topic].result(10)
        _until(driver, lambda: _partitions(dst, topic) == 5, "B grown to 5 partitions")
        assert _acls(dst, prefix) == expected_acls  # nothing else came along
    finally:
        driver.close()
