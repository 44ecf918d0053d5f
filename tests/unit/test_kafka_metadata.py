"""The Kafka metadata connectors without a broker: MM2's config filter and ACL rules, the config
changes the sink computes, event shapes, and the sink's handling of records it must not apply
(bad events, its own cluster's, stale ones, resources Kafka has no counterpart for) - decided
before any admin request. One test points the sink at a closed port (a real client, no broker) to
show a transient failure keeps the order of the events after it."""

from __future__ import annotations

import orjson
import pytest
from confluent_kafka.admin import AclBinding, ConfigEntry, ConfigSource

from connect.errors import ConfigError, ConnectError, RetriableError
from connect.records import make_record
from connect.sink import SinkTaskContext
from connectors.kafka import metadata as km
from connectors.kafka.metadata import acls as kacls
from connectors.kafka.metadata import applier as kapplier
from connectors.kafka.metadata import config as kcfg
from connectors.kafka.metadata import topics as ktopics
from connectors.replicator.metadata import MetadataChangeEvent
from worker.embedded import free_port


def entry(name, value, source=ConfigSource.DYNAMIC_TOPIC_CONFIG, **flags):
    return ConfigEntry(name, value, source=source, is_default=source == ConfigSource.DEFAULT_CONFIG, **flags)


# -- configs -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["follower.replication.throttled.replicas", "leader.replication.throttled.replicas",
                                  "message.timestamp.difference.max.ms", "message.timestamp.type",
                                  "unclean.leader.election.enable", "min.insync.replicas"])
def test_default_exclude_is_mm2s_list(name):
    entries = [entry(name, "1"), entry("retention.ms", "1000")]
    assert ktopics.topic_configs(entries, kcfg.DEFAULT_CONFIGS_EXCLUDE) == {"retention.ms": "1000"}


def test_only_non_default_writable_topic_configs_are_copied():
    entries = {e.name: e for e in [
        entry("retention.ms", "1000"),
        entry("cleanup.policy", "compact", ConfigSource.DYNAMIC_BROKER_CONFIG),  # not a default: MM2 copies it
        entry("segment.bytes", "1073741824", ConfigSource.DEFAULT_CONFIG),
        entry("max.message.bytes", "1000012", ConfigSource.STATIC_BROKER_CONFIG),
        entry("some.read.only", "x", is_read_only=True),
        entry("some.secret", "s3cr3t", is_sensitive=True),
        entry("min.insync.replicas", "2"),
    ]}
    assert ktopics.topic_configs(entries, kcfg.DEFAULT_CONFIGS_EXCLUDE) == {"cleanup.policy": "compact", "retention.ms": "1000"}
    # use.defaults.from=source: defaults too; still never static, read-only, sensitive or excluded ones
    assert ktopics.topic_configs(entries, kcfg.DEFAULT_CONFIGS_EXCLUDE, source_defaults=True) == {
        "cleanup.policy": "compact", "retention.ms": "1000", "segment.bytes": "1073741824"}
    assert ktopics.topic_configs(entries, "") == {"cleanup.policy": "compact", "min.insync.replicas": "2", "retention.ms": "1000"}


def test_config_ops_set_what_differs_and_delete_overrides_the_source_no_longer_has():
    current = {e.name: e for e in [
        entry("retention.ms", "5"),  # differs: set
        entry("cleanup.policy", "compact"),  # equal: nothing
        entry("segment.ms", "100"),  # an override the source does not have: deleted
        entry("segment.bytes", "1073741824", ConfigSource.DEFAULT_CONFIG),  # a default: left alone
        entry("min.insync.replicas", "2"),  # excluded: never deleted
    ]}
    wanted = {"retention.ms": "1000", "cleanup.policy": "compact", "max.message.bytes": "2000",
              "message.timestamp.type": "LogAppendTime"}  # excluded: never set
    assert ktopics.config_ops(wanted, current, kcfg.DEFAULT_CONFIGS_EXCLUDE) == {
        "max.message.bytes": "2000", "retention.ms": "1000", "segment.ms": None}
    assert ktopics.config_ops({"retention.ms": "5"}, {"retention.ms": entry("retention.ms", "5")}, "") == {}


def test_described_entries_hold_the_config_source_as_an_int():
    """confluent-kafka's describe_configs results hold ``source`` as the wire's int, not the enum."""
    held = {"retention.ms": ConfigEntry("retention.ms", "5", source=ConfigSource.DYNAMIC_TOPIC_CONFIG.value)}
    assert ktopics.config_ops({}, held, "") == {"retention.ms": None}  # an override the source no longer has
    static = [ConfigEntry("retention.ms", "-1", source=ConfigSource.STATIC_BROKER_CONFIG.value),
              ConfigEntry("segment.ms", "9", source=ConfigSource.DEFAULT_CONFIG.value)]
    assert ktopics.topic_configs(static, "", source_defaults=True) == {"segment.ms": "9"}  # a broker's setting is not copied


# -- ACLs ----------------------------------------------------------------------------------------------------------


def acl(operation="READ", permission="ALLOW", **extra):
    return {"broker": "kafka", "topic": "orders", "principal": "User:alice", "host": "*", "operation": operation,
            "permission": permission, "patternType": "LITERAL", **extra}


@pytest.mark.parametrize("operation, expected", [
    ("READ", "READ"), ("ALL", "READ"), ("DESCRIBE", "DESCRIBE"), ("DESCRIBE_CONFIGS", "DESCRIBE_CONFIGS"),
    ("ALTER_CONFIGS", "ALTER_CONFIGS"), ("WRITE", None), ("read", "READ"),
])
def test_allow_acls_mm2_rules(operation, expected):
    assert kacls.target_acl(acl(operation)).operation == expected


def test_deny_acls_are_copied_as_they_are():  # MM2: a denial is never dropped (access would widen)
    from confluent_kafka.admin import AclOperation, AclPermissionType

    for operation in ("READ", "ALL", "WRITE"):
        data = acl(operation, "DENY")
        decision = kacls.target_acl(data)
        assert decision.operation == operation
        binding = kacls.acl_binding(data, decision.operation, "orders-copy")
        assert binding.permission_type == AclPermissionType.DENY and binding.operation == AclOperation[operation]
        assert binding.name == "orders-copy"
    binding = kacls.acl_binding(acl("ALL"), kacls.target_acl(acl("ALL")).operation, "t")
    assert binding.permission_type == AclPermissionType.ALLOW and binding.operation == AclOperation.READ


def test_prefixed_acls_are_copied_as_prefixed():
    from confluent_kafka.admin import ResourcePatternType

    for data, operation in ((acl("READ", patternType="PREFIXED"), "READ"),
                            (acl("WRITE", "DENY", patternType="PREFIXED"), "WRITE")):
        decision = kacls.target_acl(data)
        assert decision.operation == operation
        binding = kacls.acl_binding(data, decision.operation, "ord")
        assert binding.resource_pattern_type == ResourcePatternType.PREFIXED and binding.name == "ord"
    assert kacls.target_acl(acl("WRITE", patternType="PREFIXED")).operation is None  # ALLOW WRITE: the same rule
    literal = acl()
    assert kacls.acl_id(literal) != kacls.acl_id({**literal, "patternType": "PREFIXED"})  # two bindings, two resources


@pytest.mark.parametrize("data, reason", [(acl(patternType="MATCH"), "MATCH"), (acl("WRITE"), "WRITE")])
def test_acls_not_copied_say_why(data, reason):
    decision = kacls.target_acl(data)
    assert decision.operation is None and reason in decision.reason


@pytest.mark.parametrize("data, path", [
    (acl("ANY"), "$.data.operation"), (acl("FLY"), "$.data.operation"), (acl(permission="MAYBE"), "$.data.permission"),
    ({**acl(), "principal": ""}, "$.data.principal"), ({**acl(), "topic": None}, "$.data.topic"),
])
def test_bad_acl_data_names_the_path(data, path):
    with pytest.raises(ValueError, match=path.replace("$", r"\$")):
        kacls.target_acl(data)


def test_acl_event_data_and_stable_id():
    binding = AclBinding("TOPIC", "orders", "LITERAL", "User:alice", "*", "READ", "ALLOW")
    data = kacls.acl_data(binding)
    assert data == acl()
    assert kacls.acl_id(data) == kacls.acl_id(dict(data)) and kacls.acl_id(data).startswith("orders/")
    others = {kacls.acl_id({**data, field: value}) for field, value in
              [("principal", "User:bob"), ("host", "10.0.0.1"), ("operation", "DESCRIBE"), ("permission", "DENY")]}
    assert len(others) == 4 and kacls.acl_id(data) not in others


def test_topic_names_from_other_brokers():
    assert ktopics.local_topic_name("persistent://tenant/ns/orders") == "orders"
    assert ktopics.local_topic_name("tenant/ns/orders") == "orders"
    assert ktopics.local_topic_name("orders.v1") == "orders.v1"


# -- config validation ---------------------------------------------------------------------------------------------


def test_source_needs_a_topic_selection_and_a_cluster_name():
    issues = km.KafkaMetadataSourceConnector.validate({"bootstrap.servers": "x:1"})
    assert {i.key for i in issues} == {"cluster.name", "topics"}
    assert not km.KafkaMetadataSourceConnector.validate({"bootstrap.servers": "x:1", "cluster.name": "A",
                                                         "topics.regex": "orders.*"})
    cfg = kcfg.SOURCE_CONFIG.parse({"bootstrap.servers": "x:1", "cluster.name": "A", "topics": "a,b"})
    assert (cfg["topic"], cfg["poll.interval.ms"], cfg["snapshot.interval.ms"], cfg["sync.acls.enabled"],
            cfg["use.defaults.from"], cfg["topics.exclude"]) == ("metadata-events", 5000, 60000, True, "target",
                                                                  r"__.*|.*\.internal")


def test_sink_config_and_pipeline_keys():
    from worker.pipeline import parse_pipeline

    assert kcfg.SINK_CONFIG.validate({"bootstrap.servers": "x:1", "cluster.name": "B", "topic.template": "{name}"})[0].key \
        == "topic.template"
    cfg = kcfg.SINK_CONFIG.parse({"bootstrap.servers": "x:1", "cluster.name": "B"})
    assert (cfg["topic.template"], cfg["replication.factor"], cfg["sync.topic.deletes"]) == ("{topic}", -1, False)
    doc = {"name": "meta", "config": {
        "source.connector.class": "connectors.kafka.metadata:KafkaMetadataSourceConnector",
        "source.bootstrap.servers": "a:1", "source.cluster.name": "A", "source.topics": "t",
        "source.admin.override.client.id": "x",
        "sink.connector.class": "connectors.kafka.metadata:KafkaMetadataSinkConnector",
        "sink.bootstrap.servers": "b:1", "sink.cluster.name": "B", "sink.client.override.socket.timeout.ms": "5000"}}
    assert parse_pipeline(doc).sink_class is km.KafkaMetadataSinkConnector
    with pytest.raises(ConfigError, match="sink.topic.templat"):
        parse_pipeline({**doc, "config": {**doc["config"], "sink.topic.templat": "x"}})


def test_source_announces_its_event_topic():
    connector = km.KafkaMetadataSourceConnector()
    connector.start({"bootstrap.servers": "x:1", "cluster.name": "A", "topics": "t", "topic": "meta"})
    assert connector.source_topics() == {"meta": 1}
    assert len(connector.task_configs(4)) == 1


# -- the sink's decisions before any admin request -------------------------------------------------------------------


def event_record(event, offset=0):
    value = event.to_json() if isinstance(event, MetadataChangeEvent) else event
    return make_record("metadata-events", b"k", value, None, 0, {"metadata": "A"}, {"ts": offset})


def sink(**extra):
    task = kapplier.KafkaMetadataSinkTask()
    config = {"bootstrap.servers": f"127.0.0.1:{free_port()}", "cluster.name": "B", "request.timeout.ms": "300", **extra}
    task.context = SinkTaskContext("meta-0", config)
    task.start(config, task.context)
    return task


def topic_event(name="orders", data=None, kind="Created", cluster="A", when=1000):
    data = {"broker": "kafka", "partitions": 3, "configs": {}} if data is None and kind != "Deleted" else data
    return MetadataChangeEvent(kind, "Topics", name, data, cluster, when)


@pytest.mark.parametrize("value, where", [
    (b"not json", "not JSON"),
    (b"[]", "$: a JSON object"),
    (orjson.dumps({"type": "Created", "resource": "Topics", "resourceName": "t", "data": {}, "sourceCluster": "A"}),
     "$.updateTime"),
    (topic_event(data={"broker": "mq", "partitions": 3}).to_json(), "$.data.broker"),
    (topic_event(data={"broker": "kafka", "partitions": -1}).to_json(), "$.data.partitions"),
    (topic_event(data={"broker": "kafka", "partitions": True}).to_json(), "$.data.partitions"),
    (topic_event(data={"broker": "kafka", "partitions": 1, "configs": []}).to_json(), "$.data.configs"),
    (topic_event(data={"broker": "kafka", "partitions": 1, "configs": {"retention.ms": 5}}).to_json(),
     "$.data.configs.retention.ms"),
    (topic_event(name="%RETRY%group").to_json(), "$.resourceName"),
    (MetadataChangeEvent("Created", "Acls", "orders/x", acl("FLY"), "A", 1).to_json(), "$.data.operation"),
    (None, "no value"),
])
def test_bad_events_are_reported_with_position_and_path(value, where):
    task = sink()
    try:
        record = event_record(value, offset=7)
        task.put([record])
        [(reported, error)] = task.context.errant_record_reporter.take()
        assert reported is record
        assert type(error) is ConnectError
        assert where in str(error) and "metadata-events@{'ts': 7}" in str(error)
        assert task.metrics()["metadata.sink.failed"] == 1
    finally:
        task.stop()


def test_events_the_sink_does_not_apply_are_counted_not_reported():
    task = sink()
    try:
        task._stamps["Topics/seen"] = (5000, "A")
        task.put([event_record(e) for e in [
            topic_event(cluster="B"),  # its own cluster's change coming back
            topic_event(name="seen", when=4000),  # older than what was applied
            topic_event(kind="Deleted"),  # MM2 never deletes
            MetadataChangeEvent("Created", "Tenants", "t", {"allowedClusters": []}, "A", 1),
            MetadataChangeEvent("Created", "Acls", "orders/1", acl("WRITE"), "A", 1),
            MetadataChangeEvent("Created", "Acls", "orders/2", acl("READ", patternType="MATCH"), "A", 1),
            MetadataChangeEvent("Deleted", "Acls", "orders/3", None, "A", 1),
        ]])
        assert task.context.errant_record_reporter.take() == []
        m = task.metrics()
        assert (m["metadata.sink.skipped_own_cluster"], m["metadata.sink.skipped_stale"], m["metadata.sink.ignored"],
                m["metadata.sink.acls_skipped"], m["metadata.sink.events"]) == (1, 1, 3, 2, 7)
    finally:
        task.stop()


def test_a_transient_failure_reports_it_and_every_later_event_as_transient():
    task = sink()  # bootstrap.servers: a closed port, so listing the target's topics cannot succeed
    try:
        records = [event_record(topic_event(name=f"t{i}"), offset=i) for i in range(3)]
        task.put(records)
        failed = task.context.errant_record_reporter.take()
        assert [r for r, _ in failed] == records
        assert all(type(e) is RetriableError for _, e in failed)
        assert "cannot list topics" in str(failed[0][1]) and "waits for an earlier one" in str(failed[2][1])
        assert task.metrics()["metadata.sink.retried"] == 3
    finally:
        task.stop()


def test_the_sink_refuses_to_be_a_dead_letter_writer():
    task = kapplier.KafkaMetadataSinkTask()
    with pytest.raises(ConfigError, match="writes no records"):
        task.start({"bootstrap.servers": "x:1", "cluster.name": "B", "topic": "dlq"}, SinkTaskContext("t", {}))
