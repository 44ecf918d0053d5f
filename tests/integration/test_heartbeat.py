"""Heartbeats over a real replication link, through the worker service: emitted into the source
cluster, carried by the mirror, measured by the monitor in the target; pausing the link makes its
age grow and its status unhealthy, resuming heals it. Kafka -> Kafka, and RocketMQ -> Kafka."""

from __future__ import annotations

import pytest
from kafka_util import create_topic
from service_util import wait_for

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


def test_heartbeats_kafka_to_kafka_measure_the_link_and_a_pause_shows_it_unhealthy(worker_factory, kafka_pair, unique):
    a, b = kafka_pair
    topic = f"hb-{unique.rsplit('-', 1)[1]}"
    create_topic(a.bootstrap, topic, 1)
    create_topic(b.bootstrap, topic, 1)
    _, c = worker_factory()
    fast = {"epoch.max.ms": "500"}
    connectors = {
        f"{topic}-emit": {"source.connector.class": "heartbeat", "source.alias": "A", "source.topic": topic,
                          "source.interval.ms": "200", "sink.connector.class": "kafka",
                          "sink.bootstrap.servers": a.bootstrap, **fast},
        f"{topic}-mirror": {"source.connector.class": "kafka", "source.bootstrap.servers": a.bootstrap,
                            "source.topics": topic, "source.cluster.alias": "A", "sink.connector.class": "kafka",
                            "sink.bootstrap.servers": b.bootstrap, "sink.cluster.alias": "B", **fast},
        f"{topic}-monitor": {"source.connector.class": "kafka", "source.bootstrap.servers": b.bootstrap,
                             "source.topics": topic, "sink.connector.class": "heartbeat", "sink.timeout.ms": "2000",
                             **fast},
    }
    for name, config in connectors.items():
        r = c.post("/connectors", json={"name": name, "config": config})
        assert r.status_code == 201, r.text
    _check_link(c, "A", f"{topic}-mirror", f"{topic}-monitor")


def test_heartbeats_rocketmq_to_kafka(worker_factory, kafka_pair, rocketmq_pair, unique):
    rocketmq, kafka = rocketmq_pair[0], kafka_pair[1]
    topic = f"hbr-{unique.rsplit('-', 1)[1]}"
    create_topic(kafka.bootstrap, topic, 1)
    _, c = worker_factory()
    fast = {"epoch.max.ms": "500"}
    connectors = {
        f"{topic}-emit": {"source.connector.class": "heartbeat", "source.alias": "R", "source.topic": topic,
                          "source.interval.ms": "200", "sink.connector.class": "rocketmq",
                          "sink.namesrv.addr": rocketmq.namesrv, "sink.auto.create.topics": "true", **fast},
        f"{topic}-mirror": {"source.connector.class": "rocketmq", "source.namesrv.addr": rocketmq.namesrv,
                            "source.topics": topic, "source.cluster.alias": "R", "sink.connector.class": "kafka",
                            "sink.bootstrap.servers": kafka.bootstrap, "sink.cluster.alias": "K", **fast},
        f"{topic}-monitor": {"source.connector.class": "kafka", "source.bootstrap.servers": kafka.bootstrap,
                             "source.topics": topic, "sink.connector.class": "heartbeat", "sink.timeout.ms": "2000",
                             **fast},
    }
    for name, config in connectors.items():
        r = c.post("/connectors", json={"name": name, "config": config})
        assert r.status_code == 201, r.text
    _check_link(c, "R", f"{topic}-mirror", f"{topic}-monitor")
