"""Lag from Apache Kafka's real high watermarks is exact: a worker (real uvicorn, the session's
Spark) mirrors Kafka to Kafka; once paused, what arrives meanwhile is its lag, to the record, in
the status and in /metrics, and resuming brings it back to 0. (On tansu the high watermark is the
last batch's base offset + 1, so the same count would only be a lower bound.)"""

from __future__ import annotations

import re

import pytest
from kafka_util import create_topic, produce
from service_util import wait_for

pytestmark = pytest.mark.timeout(300)


def _metric(text: str, name: str, connector: str) -> float | None:
    match = re.search(rf'^{name}{{connector="{re.escape(connector)}",task="0"}} ([0-9.e+]+)$', text, re.MULTILINE)
    return float(match.group(1)) if match else None


def test_a_paused_connector_shows_exactly_the_records_waiting_as_lag(worker_factory, apache_kafka_pair, unique):
    a, b = apache_kafka_pair
    topic = f"lag-{unique}"
    create_topic(a.bootstrap, topic, 2)
    produce(a.bootstrap, topic, 500, 2)
    _, c = worker_factory()
    name = f"{unique}-p"
    config = {"source.connector.class": "kafka", "source.bootstrap.servers": a.bootstrap, "source.topics": topic,
              "sink.connector.class": "kafka", "sink.bootstrap.servers": b.bootstrap, "sink.topic.template": "{topic}-copy",
              "epoch.max.ms": "1000", "tasks.max": "1"}
    assert c.post("/connectors", json={"name": name, "config": config}).status_code == 201

    def status() -> dict:
        return c.get(f"/connectors/{name}/status").json()

    wait_for(lambda: (s := status())["connector"].get("lag", {}).get("records") == 0 and s["tasks"]
             and s["tasks"][0]["records"]["committed"] >= 500, 120, "the first 500 committed")
    assert c.put(f"/connectors/{name}/pause").status_code == 202
    wait_for(lambda: status()["connector"]["state"] == "PAUSED", 30, "PAUSED")
    produce(a.bootstrap, topic, 3000, 2, start=500)

    def lag() -> dict:
        return status()["tasks"][0].get("lag", {})

    wait_for(lambda: lag().get("records") == 3000, 30, "lag 3,000 while paused")
    assert _metric(c.get("/metrics").text, "connect_source_lag_records", name) == 3000
    assert status()["connector"]["lag"]["records"] == 3000
    assert c.put(f"/connectors/{name}/resume").status_code == 202
    wait_for(lambda: status()["connector"].get("lag", {}).get("records") == 0, 120, "lag back to 0 after resuming")
