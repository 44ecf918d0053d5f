"""Heartbeats over a real replication link, through the worker service: emitted into the source
cluster, carried by the mirror, measured by the monitor in the target; pausing the link makes its
age grow and its status unhealthy, resuming heals it. An active-active Kafka pair (heartbeats both
ways, and the round trip of the link), and RocketMQ -> Kafka."""

from __future__ import annotations

import pytest
from kafka_util import create_topic
from service_util import wait_for

from connectors.rocketmq.sync_client import SyncRocketMQClient

pytestmark = pytest.mark.timeout(300)


def task_metrics(c, name: str) -> dict:
    tasks = c.get(f"/connectors/{name}/status").json()["tasks"]
    return tasks[0].get("metrics", {}) if tasks else {}


def _check_link(c, origin: str, mirror: str, monitor: str) -> None:
    key = f"heartbeat.{origin}"
    alive = wait_for(lambda: (m := task_metrics(c, monitor)).get(f"{key}.healthy") == 1.0 and m, 90, "a healthy link")
    assert alive[f"{key}.hops"] == 1.0  # copied once: by the mirror
    assert 0 <= alive[f"{key}.latency_ms"] < 10_000
    assert f'connect_task_metric{{connector="{monitor}",name="{key}.latency_ms",task="0"}}' in c.get("/metrics").text
    count = alive[f"{key}.count"]
    wait_for(lambda: task_metrics(c, monitor).get(f"{key}.count", 0) > count, 30, "more heartbeats")
    # the link paused: no more heartbeats arrive, the age grows past the timeout, unhealthy
    assert c.put(f"/connectors/{mirror}/pause").status_code == 202
    stale = wait_for(lambda: (m := task_metrics(c, monitor)).get(f"{key}.healthy") == 0.0 and m, 60, "an unhealthy link")
    assert stale[f"{key}.age_ms"] >= 2000
    assert c.put(f"/connectors/{mirror}/resume").status_code == 202
    wait_for(lambda: task_metrics(c, monitor).get(f"{key}.healthy") == 1.0, 90, "the link healthy again")


def _start_link(c, topic: str, origin: str, origin_side: dict, target: str, target_side: dict, *,
                both_ways: bool = False) -> None:
    """Heartbeats emitted into the origin cluster, its mirror to the target, the monitor in the target
    (and, ``both_ways``, the same from the target back to the origin, emitters reading their inbound
    heartbeats for round trips). ``*_side``: connector keys of that cluster's connector (without the
    source./sink. prefix)."""
    fast = {"epoch.max.ms": "500"}

    def side(prefix: str, keys: dict) -> dict:
        return {f"{prefix}.{k}": v for k, v in keys.items()}

    def inbound(keys: dict) -> dict:
        return {"source.inbound.type": keys["connector.class"],
                **{f"source.inbound.{k}": v for k, v in keys.items() if k != "connector.class"}} if both_ways else {}

    connectors = {}
    for (a, a_side), (b, b_side) in [((origin, origin_side), (target, target_side))] + (
            [((target, target_side), (origin, origin_side))] if both_ways else []):
        suffix = f"-{a}{b}" if both_ways else ""
        connectors.update({
            f"{topic}-emit{suffix}": {"source.connector.class": "heartbeat", "source.alias": a, "source.topic": topic,
                                      "source.interval.ms": "200", **inbound(a_side), **side("sink", a_side), **fast},
            f"{topic}-mirror{suffix}": {**side("source", {**a_side, "topics": topic, "cluster.alias": a}),
                                        **side("sink", {**b_side, "cluster.alias": b}), **fast},
            f"{topic}-monitor{suffix}": {**side("source", {**b_side, "topics": topic}), "sink.connector.class": "heartbeat",
                                         "sink.timeout.ms": "2000", "sink.alias": b, **fast},
        })
    for name, config in connectors.items():
        r = c.post("/connectors", json={"name": name, "config": config})
        assert r.status_code == 201, r.text


def test_heartbeats_kafka_active_active_round_trip_and_a_pause_shows_it_unhealthy(worker_factory, kafka_pair, unique):
    a, b = kafka_pair
    topic = f"hb-{unique.rsplit('-', 1)[1]}"
    create_topic(a.bootstrap, topic, 1)
    create_topic(b.bootstrap, topic, 1)
    _, c = worker_factory()
    _start_link(c, topic, "A", {"connector.class": "kafka", "bootstrap.servers": a.bootstrap},
                "B", {"connector.class": "kafka", "bootstrap.servers": b.bootstrap}, both_ways=True)
    for here, there in (("A", "B"), ("B", "A")):  # each monitor: the other side's beats, and the round trip
        monitor = f"{topic}-monitor-{there}{here}"
        m = wait_for(lambda mon=monitor, t=there: (m := task_metrics(c, mon)).get(f"heartbeat.{t}.round_trip_ms") and m,
                     60, f"a round trip measured in {here}")
        assert m[f"heartbeat.{there}.hops"] == 1.0  # the other side's beats, copied once (no loop back)
        assert m[f"heartbeat.{there}.latency_ms"] <= m[f"heartbeat.{there}.round_trip_ms"] < 20_000
        assert m[f"heartbeat.{here}.hops"] == 0.0 and f"heartbeat.{here}.round_trip_ms" not in m  # its own, local
    _check_link(c, "A", f"{topic}-mirror-AB", f"{topic}-monitor-AB")


def test_heartbeats_rocketmq_to_kafka(worker_factory, kafka_pair, rocketmq_pair, unique):
    rocketmq, kafka = rocketmq_pair[0], kafka_pair[1]
    topic = f"hbr-{unique.rsplit('-', 1)[1]}"
    create_topic(kafka.bootstrap, topic, 1)
    with SyncRocketMQClient(rocketmq.namesrv) as client:
        client.create_topic(rocketmq.broker_addr, topic, 1, 1)
    _, c = worker_factory()
    _start_link(c, topic, "R", {"connector.class": "rocketmq", "namesrv.addr": rocketmq.namesrv},
                "K", {"connector.class": "kafka", "bootstrap.servers": kafka.bootstrap})
    _check_link(c, "R", f"{topic}-mirror", f"{topic}-monitor")
