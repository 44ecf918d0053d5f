"""Kafka config sync (MirrorMaker 2's topic, config and ACL sync) as metadata change events between
two tansu brokers (only with CONNECT_TEST_KAFKA=tansu): ``kafka-metadata`` source (cluster A) ->
``kafka-metadata`` sink (cluster B) in
one Spark pipeline, and the source task's events read directly over the wire.

What tansu does not support, and so what these tests cannot show on it (the code is written for
real Kafka; nothing here is mocked):

- **CreatePartitions** is not in tansu's ApiVersions: partitions can be added neither to the source
  nor to the target. A source topic "grows" here by being deleted and created again with more
  partitions; the sink then asks the target to grow and tansu's refusal is reported as a permanent
  error for that event (on Kafka the target grows). With ``sync.topic.deletes=true`` the target
  follows by deletion and re-creation instead, which tansu supports, and that is shown.
- **Config sources**: tansu describes only the configs set on a topic and reports each of them as
  ``DEFAULT_CONFIG``; with MM2's default (``use.defaults.from=target``, non-default configs only)
  nothing would be copied, so the pipeline uses ``use.defaults.from=source``, which on tansu copies
  exactly the configs set. Deleting target overrides the source no longer has (decided from
  ``DYNAMIC_TOPIC_CONFIG``) cannot be shown for the same reason; see the unit tests.
- **AlterConfigs** (the deprecated one) is not supported; the sink only uses IncrementalAlterConfigs,
  which tansu supports.
- **ACLs**: tansu answers DescribeAcls (with no bindings: there is no way to create one), and its
  CreateAcls answer cannot be parsed by librdkafka 2.16 (an assertion aborts the process), so
  ACL copying is shown by the unit tests only; here the source runs with ACL sync on and emits none.

The same connector between two Apache Kafka clusters, where none of these limits hold, is
``test_kafka_metadata_apache.py``; on Apache Kafka (the default) the tansu-shaped pipeline test
is skipped, and the source's events are checked with MM2's default ``use.defaults.from=target``.
"""

from __future__ import annotations

import hashlib
import time

import orjson
import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from kafka_brokers import use_apache_kafka
from pipeline_util import make_driver, pair_pipeline

import connect.plugins
from connect.source import OffsetStorageReader, SourceTaskContext
from connectors.kafka.metadata.watcher import KafkaMetadataSourceTask

pytestmark = pytest.mark.timeout(120)

connect.plugins.register_plugin("kafka-metadata-source", "connectors.kafka.metadata:KafkaMetadataSourceConnector")
connect.plugins.register_plugin("kafka-metadata-sink", "connectors.kafka.metadata:KafkaMetadataSinkConnector")

CONFIGS = {"retention.ms": "123456789", "cleanup.policy": "compact",
           "min.insync.replicas": "1", "message.timestamp.type": "LogAppendTime"}  # the last two: MM2 never copies them
COPIED = {"retention.ms": "123456789", "cleanup.policy": "compact"}


def _prefix(unique: str) -> str:
    return "cfg" + hashlib.sha1(unique.encode()).hexdigest()[:10]


def _create(admin: AdminClient, topic: str, partitions: int, configs: dict) -> None:
    admin.create_topics([NewTopic(topic, partitions, 1, config=configs)])[topic].result(10)


def _delete(admin: AdminClient, topic: str) -> None:
    admin.delete_topics([topic])[topic].result(10)


def _partitions(admin: AdminClient, topic: str) -> int | None:
    t = admin.list_topics(timeout=10).topics.get(topic)
    return None if t is None or t.error is not None else len(t.partitions)


def _configs(admin: AdminClient, topic: str) -> dict:
    resource = ConfigResource("TOPIC", topic)
    return {k: e.value for k, e in admin.describe_configs([resource])[resource].result(10).items()}


class _Run:
    """Epochs of a driver, with what they reported per connector: the highest value of each task gauge
    (a pair that moves to another Python worker starts its counts again) and the failure reasons."""

    def __init__(self, driver):
        self.driver = driver
        self.metrics: dict[str, dict[str, float]] = {}
        self.reasons: dict[str, dict[str, int]] = {}

    def until(self, check, what: str, epochs: int = 20) -> None:
        for _ in range(epochs):
            for r in self.driver.run_epoch():
                assert r.state == "RUNNING", r.trace
                peak = self.metrics.setdefault(r.connector, {})
                for name, value in (r.metrics or {}).items():
                    peak[name] = max(value, peak.get(name, value))
                for reason, n in r.stats.get("failure_reasons", {}).items():
                    self.reasons.setdefault(r.connector, {})[reason] = self.reasons.get(r.connector, {}).get(reason, 0) + n
            if check():
                return
        raise AssertionError(f"{what}: not reached after {epochs} epochs; metrics {self.metrics}, failures {self.reasons}")


def _pipeline(name: str, a, b, regex: str, **sink):
    return pair_pipeline(
        name,
        {"connector.class": "kafka-metadata", "bootstrap.servers": a.bootstrap, "cluster.name": "A", "topics.regex": regex,
         "use.defaults.from": "source", "poll.interval.ms": "200", "snapshot.interval.ms": "3000"},
        {"connector.class": "kafka-metadata", "bootstrap.servers": b.bootstrap, "cluster.name": "B", **sink},
        **{"epoch.max.ms": "700", "errors.tolerance": "all"})


@pytest.mark.skipif(use_apache_kafka(), reason="tansu's limits shape it; test_kafka_metadata_apache covers Apache Kafka")
def test_topic_partitions_and_configs_follow_the_source(kafka_pair, spark, tmp_path, unique):
    a, b = kafka_pair
    prefix = _prefix(unique)
    grown, recreated = f"{prefix}-orders", f"{prefix}-del-orders"
    src, dst = AdminClient({"bootstrap.servers": a.bootstrap}), AdminClient({"bootstrap.servers": b.bootstrap})
    _create(src, grown, 3, CONFIGS)
    _create(src, recreated, 3, {"retention.ms": "60000"})
    _create(src, f"other-{prefix}", 2, {})  # not matched by topics.regex
    keep, follow = f"{unique}-keep", f"{unique}-follow"
    driver = make_driver(spark, tmp_path, _pipeline(keep, a, b, f"{prefix}-orders"),
                         _pipeline(follow, a, b, f"{prefix}-del-.*", **{"sync.topic.deletes": "true"}))
    run = _Run(driver)
    try:
        # 1. created in the target with the source's partitions and copyable configs, not the excluded ones
        run.until(lambda: _partitions(dst, grown) == 3 and _partitions(dst, recreated) == 3, "topics created in B")
        assert _configs(dst, grown) == COPIED
        assert _configs(dst, recreated) == {"retention.ms": "60000"}
        assert _partitions(dst, f"other-{prefix}") is None
        m = run.metrics[keep]
        assert m["metadata.source.topics"] == 1 and m["metadata.source.acls"] == 0  # ACL sync on; tansu has none
        assert m["metadata.sink.topics_created"] == 1 and m["metadata.sink.configs_set"] == len(COPIED)

        # 2. a config changed in the source follows (IncrementalAlterConfigs)
        entry = ConfigEntry("retention.ms", "86400000", incremental_operation=AlterConfigOpType.SET)
        [f.result(10) for f in src.incremental_alter_configs(
            [ConfigResource("TOPIC", grown, incremental_configs=[entry])]).values()]
        run.until(lambda: _configs(dst, grown).get("retention.ms") == "86400000", "retention.ms changed in B")
        assert _configs(dst, grown) == {**COPIED, "retention.ms": "86400000"}

        # 3. the source topic grows to 5 partitions (tansu: deleted and created again with 5)
        _delete(src, grown)
        _delete(src, recreated)
        # sync.topic.deletes: the target's copy goes too; the other pipeline never deletes (MM2's rule)
        run.until(lambda: _partitions(dst, recreated) is None, "the deletion synced to B")
        assert _partitions(dst, grown) == 3
        _create(src, grown, 5, CONFIGS)
        _create(src, recreated, 5, {"retention.ms": "60000"})
        # ... and the target follows: re-created with 5 partitions where deletes are synced
        run.until(lambda: _partitions(dst, recreated) == 5, "the re-created topic in B with 5 partitions")
        assert _configs(dst, recreated) == {"retention.ms": "60000"}
        # where they are not, the sink asks B to add 2 partitions: tansu has no CreatePartitions, the event fails
        # (reported, errors.tolerance=all skips it) and B's topic keeps its 3 partitions - it never shrinks
        run.until(lambda: any(f"grow topic {grown} from 3 to 5 partitions" in r for r in run.reasons.get(keep, {})),
                  "the grow attempted")
        assert _partitions(dst, grown) == 3
        assert "CreatePartitions" in next(r for r in run.reasons[keep] if "grow topic" in r)
        assert run.metrics[keep]["metadata.sink.failed"] >= 1
    finally:
        driver.close()


def test_source_events_over_the_wire(kafka_pair, unique):
    """The events the source task emits for a tansu cluster: a snapshot at start, nothing while
    nothing changes, the change when something does, every resource again at the next snapshot,
    and a deletion."""
    a, _ = kafka_pair
    prefix = _prefix(unique)
    topic = f"{prefix}-events"
    admin = AdminClient({"bootstrap.servers": a.bootstrap})
    _create(admin, topic, 2, {"retention.ms": "1000", "min.insync.replicas": "1"})
    defaults = "target" if use_apache_kafka() else "source"  # tansu calls every config a default
    config = {"bootstrap.servers": a.bootstrap, "cluster.name": "A", "topics": topic, "use.defaults.from": defaults,
              "poll.interval.ms": "10", "snapshot.interval.ms": "1500", "topic": "events"}
    task = KafkaMetadataSourceTask()
    task.context = SourceTaskContext("src-0", config, OffsetStorageReader())
    task.start(config, task.context)

    def poll():
        time.sleep(0.05)
        return task.poll()

    try:
        [record] = poll()
        event = orjson.loads(record.value)
        assert record.topic == "events" and record.key == f"Topics/{topic}".encode()
        assert record.source_partition == {"metadata": "A"} and record.source_offset == {"ts": event["updateTime"]}
        assert {k: v for k, v in event.items() if k != "updateTime"} == {
            "type": "Created", "resource": "Topics", "resourceName": topic, "sourceCluster": "A",
            "data": {"broker": "kafka", "partitions": 2, "configs": {"retention.ms": "1000"}}}
        assert poll() == []  # nothing changed
        _delete(admin, topic)
        deadline = time.monotonic() + 10
        while not (records := poll()) and time.monotonic() < deadline:
            pass
        assert [orjson.loads(r.value)["type"] for r in records] == ["Deleted"]
        _create(admin, topic, 2, {"retention.ms": "1000"})
        time.sleep(1.6)  # past snapshot.interval.ms: the change, and nothing else (there is nothing else)
        deadline = time.monotonic() + 10
        while not (records := poll()) and time.monotonic() < deadline:
            pass
        assert [(orjson.loads(r.value)["type"], r.key) for r in records] == [("Created", f"Topics/{topic}".encode())]
        time.sleep(1.6)
        records = poll()
        assert [(orjson.loads(r.value)["type"], r.key) for r in records] == [("Modified", f"Topics/{topic}".encode())]
        assert task.metrics()["metadata.source.snapshots"] >= 2
    finally:
        task.stop()
