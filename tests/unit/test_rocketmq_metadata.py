"""The RocketMQ metadata connectors without a broker: event shapes, system topic and group
filtering, name mapping, queue planning, and both tasks against a scripted client."""

from __future__ import annotations

import orjson
import pytest

import connectors.rocketmq.metadata as md
from connect.errors import ConfigError, ConnectError, RetriableError
from connect.records import make_record
from connect.sink import SinkTaskContext
from connect.source import OffsetStorageReader, SourceTaskContext
from connectors.replicator.metadata import MetadataChangeEvent
from connectors.rocketmq.models import BrokerData, TopicConfig

CLIENT = {"namesrv.addr": "127.0.0.1:9876"}


class FakeClient:
    """Answers as a cluster of brokers does (topic and group tables per broker) and records writes."""

    def __init__(self, brokers=("broker-a",)):
        self.info = {b: BrokerData("DefaultCluster", b, {0: f"{b}:10911"}) for b in brokers}
        self.topics = {f"{b}:10911": {} for b in brokers}
        self.groups = {f"{b}:10911": {} for b in brokers}
        self.calls: list[tuple] = []
        self.fail: Exception | None = None

    def cluster_info(self):
        return self.info

    def all_topic_configs(self, addr):
        return dict(self.topics[addr])

    def subscription_group_configs(self, addr):
        return {k: dict(v) for k, v in self.groups[addr].items()}

    def create_topic(self, addr, topic, read, write, perm, *, topic_filter_type="SINGLE_TAG", topic_sys_flag=0,
                     order=False):
        if self.fail is not None:
            raise self.fail
        self.calls.append(("create_topic", addr, topic, read, write, perm))
        self.topics[addr][topic] = TopicConfig(topic, read, write, perm, topic_filter_type, topic_sys_flag, order)

    def create_subscription_group(self, addr, config):
        self.calls.append(("create_group", addr, config["groupName"]))
        self.groups[addr][config["groupName"]] = dict(config)

    def delete_topic_in_broker(self, addr, topic):
        self.calls.append(("delete_topic", addr, topic))
        del self.topics[addr][topic]

    def delete_topic_in_namesrv(self, topic):
        self.calls.append(("delete_route", topic))

    def delete_subscription_group(self, addr, group):
        self.calls.append(("delete_group", addr, group))
        del self.groups[addr][group]


class FakePool:
    def __init__(self, client):
        self.client = client

    def acquire(self, settings):
        return self.client

    def release(self, settings):
        pass


@pytest.fixture
def fake(monkeypatch):
    client = FakeClient()
    monkeypatch.setattr(md, "CLIENTS", FakePool(client))
    return client


# -- pure pieces ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["TBW102", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "OFFSET_MOVED_EVENT", "SELF_TEST_TOPIC",
                                  "RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_TRANS_HALF_TOPIC", "rmq_sys_replicator_heartbeat",
                                  "%RETRY%g1", "%DLQ%g1", "%LMQ%x", "DefaultCluster", "broker-a",
                                  "DefaultCluster_REPLY_TOPIC"])
def test_system_topics(name):
    assert md.is_system_topic(name, {"DefaultCluster", "broker-a"})


@pytest.mark.parametrize("name", ["orders", "TBW1020", "my_REPLY_TOPIC", "sys_rmq_x", "RETRY_x"])
def test_user_topics(name):
    assert not md.is_system_topic(name, {"DefaultCluster", "broker-a"})


def test_topic_and_group_data_shapes():
    data = md.topic_data([TopicConfig("t", 6, 6, 6), TopicConfig("t", 8, 4, 4, order=True)])
    assert data == {"broker": "rocketmq", "partitions": 10, "readQueueNums": 8, "writeQueueNums": 6, "perm": 6,
                    "order": False, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0}
    one = md.topic_data([TopicConfig("t", 6, 6, 6)])
    assert one["partitions"] == one["writeQueueNums"] == 6
    assert md.group_data({"groupName": "g", "retryMaxTimes": 3, "consumeEnable": False}) == {
        "broker": "rocketmq", "retryMaxTimes": 3, "consumeEnable": False}


@pytest.mark.parametrize("name, template, expected", [
    ("orders", "{topic}", ("orders", False)),
    ("persistent://tenant/ns/orders", "{topic}", ("orders", False)),
    ("non-persistent://t/ns/x-1", "{topic}", ("x-1", False)),
    ("orders.eu.v1", "{topic}", ("orders_eu_v1", True)),
    ("orders", "backup.{topic}", ("backup_orders", True)),
    ("a b/c", "{topic}", ("a_b_c", True)),
])
def test_local_topic_names(name, template, expected):
    assert md.local_topic_name(name, template) == expected


def test_local_topic_name_refuses_what_cannot_map():
    with pytest.raises(ValueError, match="longer than"):
        md.local_topic_name("x" * 128)
    with pytest.raises(ValueError, match="no local part"):
        md.local_topic_name("persistent://t/ns/")


def test_plan_from_kafka_and_pulsar_counts_and_never_shrinks():
    plan = md.plan_topic("t", {"broker": "kafka", "partitions": 3}, {"a": None})
    assert plan == {"a": TopicConfig("t", 3, 3, 6)}
    assert md.plan_topic("t", {"broker": "kafka", "partitions": 2}, {"a": TopicConfig("t", 4, 4, 6)}) == {}
    grown = md.plan_topic("t", {"broker": "kafka", "partitions": 6}, {"a": TopicConfig("t", 4, 4, 4)})
    assert grown == {"a": TopicConfig("t", 6, 6, 4)}  # grown, perm kept
    assert md.plan_topic("t", {"broker": "pulsar", "partitions": 0}, {"a": None}) == {"a": TopicConfig("t", 1, 1, 6)}
    spread = md.plan_topic("t", {"broker": "kafka", "partitions": 5}, {"b": None, "a": None})
    assert (spread["a"].write_queue_nums, spread["b"].write_queue_nums) == (3, 2)


def test_plan_from_rocketmq_follows_the_source():
    data = {"broker": "rocketmq", "partitions": 8, "readQueueNums": 8, "writeQueueNums": 8, "perm": 4, "order": True,
            "topicFilterType": "MULTI_TAG", "topicSysFlag": 0}
    plan = md.plan_topic("t", data, {"a": TopicConfig("t", 6, 6, 6), "b": None})
    assert plan == {"a": TopicConfig("t", 8, 8, 4, "MULTI_TAG", 0, True), "b": TopicConfig("t", 8, 8, 4, "MULTI_TAG", 0, True)}
    shrink = md.plan_topic("t", {**data, "readQueueNums": 2, "writeQueueNums": 2}, {"a": TopicConfig("t", 6, 6, 6)})
    assert shrink["a"].read_queue_nums == shrink["a"].write_queue_nums == 6  # never shrinks
    assert md.plan_topic("t", {"broker": "rocketmq", "partitions": 3}, {"a": None})["a"] == TopicConfig("t", 3, 3, 6)


@pytest.mark.parametrize("data, path", [
    ({"partitions": 3}, "$.data.broker"),
    ({"broker": "kafka", "partitions": "3"}, "$.data.partitions"),
    ({"broker": "kafka", "partitions": 0}, "$.data.partitions"),
    ({"broker": "rocketmq", "partitions": 4, "perm": True}, "$.data.perm"),
    ({"broker": "rocketmq", "writeQueueNums": 0}, "$.data.writeQueueNums"),
])
def test_plan_names_the_field_at_fault(data, path):
    with pytest.raises(ValueError, match=path.replace("$", r"\$")):
        md.plan_topic("t", data, {"a": None})


def test_group_config():
    assert md.group_config("g", {"broker": "rocketmq", "retryMaxTimes": 3, "consumeBroadcastEnable": False}) == {
        **md.GROUP_DEFAULTS, "groupName": "g", "retryMaxTimes": 3, "consumeBroadcastEnable": False}
    assert md.group_config("g", {"broker": "kafka", "retryMaxTimes": 3}) == {**md.GROUP_DEFAULTS, "groupName": "g"}
    with pytest.raises(ValueError, match=r"\$.data.retryMaxTimes"):
        md.group_config("g", {"retryMaxTimes": "3"})
    with pytest.raises(ValueError, match=r"\$.data.consumeEnable"):
        md.group_config("g", {"consumeEnable": 1})


def test_configs_are_checked():
    assert md.RocketMQMetadataSourceConnector.validate({**CLIENT, "cluster.name": "A"}) == []
    issues = md.RocketMQMetadataSourceConnector.validate({**CLIENT, "topics.regex": "(", "poll.interval.ms": "1"})
    assert {i.key for i in issues} == {"cluster.name", "topics.regex", "poll.interval.ms"}
    issues = md.RocketMQMetadataSinkConnector.validate({**CLIENT, "cluster.name": "B", "topic.template": "{x}",
                                                        "access.key": "ak"})
    assert {i.key for i in issues} == {"topic.template", "secret.key"}
    assert md.SOURCE_CONFIG.parse({**CLIENT, "cluster.name": "A"})["topic"] == "rmq_sys_replicator_metadata"


# -- source task ------------------------------------------------------------------------------------
def _source(fake, **extra):
    task = md.RocketMQMetadataSourceTask()
    config = {**CLIENT, "cluster.name": "A", "poll.interval.ms": "10", **extra}
    task.context = SourceTaskContext("t0", config, OffsetStorageReader())
    task.start(config, task.context)
    return task


def _poll(task):
    task._next_scan = 0  # scan now
    return [(r.key.decode(), orjson.loads(r.value)) for r in task.poll()]


def test_source_emits_user_topics_and_groups_then_changes(fake):
    addr = "broker-a:10911"
    for name in ("orders", "TBW102", "%RETRY%g1", "rmq_sys_x", "DefaultCluster", "broker-a", "SCHEDULE_TOPIC_XXXX",
                 "DefaultCluster_REPLY_TOPIC", "skipped_by_regex"):
        fake.topics[addr][name] = TopicConfig(name, 6, 6, 6)
    for name in ("g1", "CID_RMQ_SYS_X", "TOOLS_CONSUMER", "SELF_TEST_C_GROUP"):
        fake.groups[addr][name] = {**md.GROUP_DEFAULTS, "groupName": name, "retryMaxTimes": 5}
    task = _source(fake, **{"topics.regex": "[^s].*"})
    records = task.poll()
    assert {r.key for r in records} == {b"Topics/orders", b"SubscriptionGroups/g1"}
    r = records[0]
    assert r.topic == "rmq_sys_replicator_metadata" and r.source_partition == {"metadata": "A"}
    assert set(r.source_offset) == {"ts"}
    event = MetadataChangeEvent.from_json(r.value)
    assert (event.type, event.resource, event.resource_name, event.source_cluster) == ("Created", "Topics", "orders", "A")
    assert event.data == {"broker": "rocketmq", "partitions": 6, "readQueueNums": 6, "writeQueueNums": 6, "perm": 6,
                          "order": False, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0}
    group = MetadataChangeEvent.from_json(records[1].value)
    assert group.data == {"broker": "rocketmq", **md.GROUP_DEFAULTS, "retryMaxTimes": 5}

    assert _poll(task) == []  # nothing changed
    fake.topics[addr]["orders"] = TopicConfig("orders", 8, 8, 4)
    (key, doc), = _poll(task)
    assert (key, doc["type"], doc["data"]["writeQueueNums"], doc["data"]["perm"]) == ("Topics/orders", "Modified", 8, 4)
    del fake.groups[addr]["g1"]
    (key, doc), = _poll(task)
    assert (key, doc["type"], doc["data"]) == ("SubscriptionGroups/g1", "Deleted", None)
    assert task.metrics()["metadata.topics"] == 1.0 and task.metrics()["metadata.groups"] == 0.0


def test_source_snapshot_restates_everything_with_its_stamp(fake):
    fake.topics["broker-a:10911"]["orders"] = TopicConfig("orders", 2, 2, 6)
    task = _source(fake)
    created = MetadataChangeEvent.from_json(task.poll()[0].value)
    task._next_snapshot = 0
    (_key, doc), = _poll(task)
    assert (doc["type"], doc["updateTime"], doc["sourceCluster"]) == ("Modified", created.update_time, "A")
    assert task.metrics()["metadata.snapshots"] == 1.0


def test_source_deletes_nothing_while_a_broker_has_no_master(fake):
    fake.topics["broker-a:10911"]["orders"] = TopicConfig("orders", 2, 2, 6)
    task = _source(fake)
    assert len(task.poll()) == 1
    fake.info["broker-a"] = BrokerData("DefaultCluster", "broker-a", {1: "slave:10911"})
    assert _poll(task) == []
    fake.info["broker-a"] = BrokerData("DefaultCluster", "broker-a", {0: "broker-a:10911"})
    del fake.topics["broker-a:10911"]["orders"]
    assert [(k, d["type"]) for k, d in _poll(task)] == [("Topics/orders", "Deleted")]


# -- sink task --------------------------------------------------------------------------------------
def _sink(fake, **extra):
    task = md.RocketMQMetadataSinkTask()
    config = {**CLIENT, "cluster.name": "B", **extra}
    task.context = SinkTaskContext("t0", config)
    task.start(config, task.context)
    return task


def _rec(doc, offset=0):
    value = doc if isinstance(doc, bytes) else orjson.dumps(doc)
    return make_record("events", b"k", value, None, 0, {"metadata": "A"}, {"ts": offset}, 0)


def _ev(kind, resource, name, data, cluster="A", when=1000):
    return {"type": kind, "resource": resource, "resourceName": name, "data": data, "sourceCluster": cluster,
            "updateTime": when}


def test_sink_maps_a_kafka_topic_to_queues_and_skips_its_own_and_stale_events(fake):
    task = _sink(fake)
    addr = "broker-a:10911"
    task.put([_rec(_ev("Created", "Topics", "orders.eu", {"broker": "kafka", "partitions": 3})),
              _rec(_ev("Created", "Topics", "mine", {"broker": "kafka", "partitions": 3}, cluster="B")),
              _rec(_ev("Created", "Topics", "persistent://t/ns/p", {"broker": "pulsar", "partitions": 0}))])
    assert fake.topics[addr]["orders_eu"] == TopicConfig("orders_eu", 3, 3, 6)
    assert fake.topics[addr]["p"] == TopicConfig("p", 1, 1, 6)
    assert "mine" not in fake.topics[addr]
    task.put([_rec(_ev("Modified", "Topics", "orders.eu", {"broker": "kafka", "partitions": 9}, when=999))])  # stale
    assert fake.topics[addr]["orders_eu"].write_queue_nums == 3
    task.put([_rec(_ev("Modified", "Topics", "orders.eu", {"broker": "kafka", "partitions": 3}, when=2000))])
    assert len([c for c in fake.calls if c[0] == "create_topic"]) == 2  # unchanged: nothing written
    m = task.metrics()
    assert (m["metadata.topics.created"], m["metadata.events.own"], m["metadata.events.stale"],
            m["metadata.events.unchanged"]) == (2.0, 1.0, 1.0, 1.0)
    assert not task.context.errant_record_reporter.failed


def test_sink_groups_and_deletes(fake):
    task = _sink(fake)
    addr = "broker-a:10911"
    fake.topics[addr]["t"] = TopicConfig("t", 4, 4, 6)
    data = {"broker": "rocketmq", **md.GROUP_DEFAULTS, "retryMaxTimes": 3}
    task.put([_rec(_ev("Created", "SubscriptionGroups", "g1", data)),
              _rec(_ev("Created", "SubscriptionGroups", "CID_RMQ_SYS_X", data)),
              _rec(_ev("Deleted", "Topics", "t", None)), _rec(_ev("Deleted", "SubscriptionGroups", "g1", None, when=2000)),
              _rec(_ev("Created", "Tenants", "public", {}))])
    assert fake.groups[addr]["g1"]["retryMaxTimes"] == 3 and "CID_RMQ_SYS_X" not in fake.groups[addr]
    assert "t" in fake.topics[addr] and "g1" in fake.groups[addr]  # deletes not synced by default
    assert task.metrics()["metadata.events.ignored"] == 4.0
    deleting = _sink(fake, **{"sync.topic.deletes": "true", "sync.group.deletes": "true"})
    deleting.put([_rec(_ev("Deleted", "Topics", "t", None)), _rec(_ev("Deleted", "SubscriptionGroups", "g1", None))])
    assert "t" not in fake.topics[addr] and "g1" not in fake.groups[addr]
    assert ("delete_route", "t") in fake.calls


def test_sink_reports_bad_records_with_the_json_path_and_transient_failures_in_order(fake):
    task = _sink(fake)
    task.put([_rec(b"not json"), _rec({"type": "Renamed"}),
              _rec(_ev("Created", "Topics", "t", {"broker": "kafka", "partitions": -1})),
              _rec(_ev("Created", "Topics", "x" * 200, {"broker": "kafka", "partitions": 1}))])
    failed = task.context.errant_record_reporter.take()
    assert len(failed) == 4 and all(type(e) is ConnectError for _r, e in failed)
    texts = [str(e) for _r, e in failed]
    assert "not JSON" in texts[0] and "$.type" in texts[1] and "$.data.partitions" in texts[2]
    assert "$.resourceName" in texts[3] and all("record events@{'ts': 0}" in t for t in texts)
    fake.fail = RetriableError("SYSTEM_BUSY")
    batch = [_rec(_ev("Created", "Topics", f"t{i}", {"broker": "kafka", "partitions": 1}), i) for i in range(3)]
    task.put(batch)
    failed = task.context.errant_record_reporter.take()
    assert [r for r, _e in failed] == batch and all(isinstance(e, RetriableError) for _r, e in failed)
    fake.fail = None
    task.put(batch)  # re-sent: applied
    assert {f"t{i}" for i in range(3)} <= set(fake.topics["broker-a:10911"])


def test_sink_needs_its_cluster_name():
    with pytest.raises(ConfigError, match="cluster.name"):
        md.RocketMQMetadataSinkTask().start(CLIENT, None)
