"""The RocketMQ sink's and side writer's shared target (connectors.rocketmq.sinkconfig.Target):
which queue a key goes to, and the one-queue route through TBW102 a topic takes until its first
send creates it."""

from __future__ import annotations

import zlib

import pytest

from connect.errors import RetriableError
from connectors.rocketmq.models import PERM_READ, PERM_WRITE, BrokerData, QueueData, TopicRouteData
from connectors.rocketmq.sinkconfig import Target


def _route(topic: str, queues: dict[str, int], perm: int = PERM_READ | PERM_WRITE) -> TopicRouteData:
    return TopicRouteData(topic, [QueueData(name, n, n, perm) for name, n in queues.items()],
                          [BrokerData("c", name, {0: f"10.0.0.{i}:10911"}) for i, name in enumerate(queues, 1)])


def test_key_index_is_the_keys_crc32_and_round_robin_without_a_key():
    target = Target("T", _route("T", {"broker-a": 4, "broker-b": 4}))
    assert [q.broker_name for q in target.queues] == ["broker-a"] * 4 + ["broker-b"] * 4
    assert target.key_index(b"order-17") == zlib.crc32(b"order-17") % 8
    assert target.key_index("order-17") == target.key_index(b"order-17")  # str keys as UTF-8
    assert target.key_index(42) == zlib.crc32(b"42") % 8
    assert [target.key_index(None) for _ in range(10)] == [0, 1, 2, 3, 4, 5, 6, 7, 0, 1]


def test_through_default_topic_keeps_the_first_writable_queue_under_the_new_name():
    target = Target.through_default_topic("rmq_sys_new", _route("TBW102", {"broker-b": 8, "broker-a": 8}))
    assert target.topic == "rmq_sys_new"
    assert [(q.topic, q.broker_name, q.queue_id) for q in target.queues] == [("TBW102", "broker-a", 0)]
    assert target.addrs == ["10.0.0.2:10911"] and target.names == ["broker-a"]
    assert target.key_index(b"any") == 0 and target.key_index(None) == 0


def test_a_route_without_writable_queues_is_retriable():
    with pytest.raises(RetriableError, match="no writable queue"):
        Target("T", _route("T", {"broker-a": 4}, perm=PERM_READ))
