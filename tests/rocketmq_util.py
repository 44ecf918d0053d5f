"""Producing to and reading from a RocketMQ broker (embedded or Apache) in tests, with the project's client."""

from __future__ import annotations

import time

from connectors.rocketmq.remoting import RetriableBrokerError
from connectors.rocketmq.sync_client import SyncRocketMQClient


def produce(broker, topic: str, count: int, queues: int, *, start: int = 0, tags=("TagA", "TagB")) -> None:
    """``count`` messages round robin over the queues (the topic is created with ``queues``);
    body ``value-i``, keys ``key-i``, tag alternating over ``tags``, properties ``idx``/``src``,
    born timestamp 1.7e12 + i; every send result checked. A send the broker's flow control refuses
    (SYSTEM_BUSY, on a loaded machine) is sent again, after the rest of its window: per-queue order
    is then not the index order."""
    with SyncRocketMQClient(broker.namesrv, timeout=30) as c:
        if start == 0:
            c.create_topic(broker.broker_addr, topic, queues, queues)

        def send(i: int):
            return c.send(broker.broker_addr, topic, i % queues, f"value-{i}".encode(),
                          {"KEYS": f"key-{i}", "TAGS": tags[i % len(tags)], "idx": str(i), "src": "test",
                           "UNIQ_KEY": f"{i:032X}"}, born_timestamp=1_700_000_000_000 + i)

        def settle(window: dict) -> None:
            for i, f in window.items():
                try:
                    assert f.result(30).ok
                except RetriableBrokerError:  # SYSTEM_BUSY: Apache RocketMQ's flow control; producers send again
                    time.sleep(1.0)
                    assert send(i).result(30).ok

        window = {}
        for i in range(start, start + count):
            window[i] = send(i)
            if len(window) >= 256:  # a window a JVM broker on a loaded machine serves within its flow control
                settle(window)
                window = {}
        settle(window)


def consume_all(broker, topic: str) -> dict[int, list]:
    """Every message of every queue of ``topic``, by queue id, in queue order."""
    out: dict[int, list] = {}
    with SyncRocketMQClient(broker.namesrv, timeout=30) as c:
        route = c.topic_route(topic)
        for mq in route.read_queues():
            addr = route.master_addr(mq.broker_name)
            offset, msgs = 0, []
            while True:
                r = c.pull(addr, "verify", topic, mq.queue_id, offset, 1000)
                if r.status != "FOUND":
                    break
                msgs += r.messages
                offset = r.next_begin_offset
            out[mq.queue_id] = msgs
    return out
