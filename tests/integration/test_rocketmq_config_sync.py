"""RocketMQ config sync (RIP-45's RocketMQConfigConnector) as metadata change events, between two
embedded RocketMQ brokers: a topic's queue numbers and perm and a subscription group follow the
source cluster through a Spark pipeline (``rocketmq-metadata`` source -> ``rocketmq-metadata``
sink), and a Kafka-sourced ``Topics`` event becomes a topic with as many queues as partitions."""

from __future__ import annotations

import hashlib
import time

import orjson
import pytest
from pipeline_util import make_driver, pair_pipeline

import connect.plugins
from connect.records import make_record
from connect.sink import SinkTaskContext
from connectors.rocketmq.metadata import RocketMQMetadataSinkTask
from connectors.rocketmq.sync_client import SyncRocketMQClient

pytestmark = pytest.mark.timeout(120)

connect.plugins.register_plugin("rocketmq-metadata-source", "connectors.rocketmq.metadata:RocketMQMetadataSourceConnector")
connect.plugins.register_plugin("rocketmq-metadata-sink", "connectors.rocketmq.metadata:RocketMQMetadataSinkConnector")


def _prefix(unique: str) -> str:
    return "Cfg" + hashlib.sha1(unique.encode()).hexdigest()[:10]


def _topic(client: SyncRocketMQClient, broker, topic: str):
    config = client.all_topic_configs(broker.broker_addr).get(topic)
    return None if config is None else (config.read_queue_nums, config.write_queue_nums, config.perm)


def _until(driver, check, what: str, epochs: int = 15):
    for _ in range(epochs):
        results = driver.run_epoch()
        failed = [r.trace for r in results if r.state != "RUNNING"]
        assert not failed, failed[0]
        if check():
            return results
    raise AssertionError(f"{what}: not reached after {epochs} epochs; {[r.metrics for r in results]}")


def test_topic_queues_perm_and_group_follow_the_source(rocketmq_pair, spark, tmp_path, unique):
    src, dst = rocketmq_pair
    prefix = _prefix(unique)
    topic, group = f"{prefix}_orders", f"{prefix}_readers"
    group_fields = {"consumeEnable": True, "consumeFromMinEnable": False, "consumeBroadcastEnable": False,
                    "retryQueueNums": 2, "retryMaxTimes": 5, "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1,
                    "notifyConsumerIdsChangedEnable": False}
    with SyncRocketMQClient(src.namesrv) as s, SyncRocketMQClient(dst.namesrv) as d:
        s.create_topic(src.broker_addr, topic, 6, 6, 6)
        s.create_subscription_group(src.broker_addr, {"groupName": group, **group_fields})
        s.create_topic(src.broker_addr, f"Other{prefix}", 2, 2)  # not matched by topics.regex: stays out of the target
        driver = make_driver(spark, tmp_path, pair_pipeline(
            unique,
            {"connector.class": "rocketmq-metadata", "namesrv.addr": src.namesrv, "cluster.name": "A",
             "topics.regex": f"{prefix}_.*", "groups.regex": f"{prefix}_.*", "poll.interval.ms": "200"},
            {"connector.class": "rocketmq-metadata", "namesrv.addr": dst.namesrv, "cluster.name": "B"},
            **{"epoch.max.ms": "1000"}))
        try:
            started = time.monotonic()

            def group_synced() -> bool:
                config = d.subscription_group_configs(dst.broker_addr).get(group)
                return config is not None and all(config.get(k) == v for k, v in group_fields.items())

            results = _until(driver, lambda: _topic(d, dst, topic) == (6, 6, 6) and group_synced(), "topic and group")
            assert _topic(d, dst, f"Other{prefix}") is None
            metrics = results[0].metrics
            assert metrics["metadata.topics.created"] >= 1 and metrics["metadata.groups.created"] >= 1
            assert metrics["metadata.events.bad"] == metrics["metadata.events.refused"] == 0

            s.create_topic(src.broker_addr, topic, 8, 8, 4)  # more queues, read-only
            _until(driver, lambda: _topic(d, dst, topic) == (8, 8, 4), "queues raised to 8, perm 4")
            route = d.topic_route(topic)
            assert len(route.read_queues()) == 8 and route.write_queues() == []  # read-only: nothing to write to
            print(f"config sync: created and followed in {time.monotonic() - started:.1f}s")
        finally:
            driver.close()


def test_a_kafka_topics_event_creates_as_many_queues(rocketmq_pair, unique):
    dst = rocketmq_pair[1]
    name = f"{_prefix(unique)}.kafka.orders"  # dots: refused by RocketMQ, mapped to '_'
    task = RocketMQMetadataSinkTask()
    config = {"namesrv.addr": dst.namesrv, "cluster.name": "B"}
    task.context = SinkTaskContext("t0", config)
    task.start(config, task.context)
    try:
        event = {"type": "Created", "resource": "Topics", "resourceName": name, "data": {"broker": "kafka", "partitions": 3},
                 "sourceCluster": "K", "updateTime": int(time.time() * 1000)}
        task.put([make_record("events", b"k", orjson.dumps(event), None, 0, {"metadata": "K"}, {"ts": 0}, 0)])
        assert task.context.errant_record_reporter.failed == []
        assert task.metrics()["metadata.topics.created"] == 1.0
    finally:
        task.stop()
    with SyncRocketMQClient(dst.namesrv) as d:
        assert _topic(d, dst, name.replace(".", "_")) == (3, 3, 6)
        assert len(d.topic_route(name.replace(".", "_")).write_queues()) == 3
