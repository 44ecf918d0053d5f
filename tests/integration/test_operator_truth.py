"""Issue 22 over the wire: what the operator reads is true.

A worker (real uvicorn, the session's Spark) mirrors RocketMQ to RocketMQ (the embedded broker
reports exact queue offsets, so lag is exact): while the sink cannot deliver, nothing is called
committed, lag grows and the retry reason is shown; once the cause is fixed, committed catches up
and lag returns to 0. A paused connector's lag counts what arrives meanwhile, with a growing age."""

from __future__ import annotations

import re
import time

import pytest
from rocketmq_util import produce
from service_util import wait_for

from connectors.rocketmq.sync_client import SyncRocketMQClient
from worker.telemetry.lag import REFRESH_S
from worker.telemetry.progress import format_result

pytestmark = pytest.mark.timeout(300)


def _config(a, b, topic: str, **extra) -> dict[str, str]:
    return {"source.connector.class": "rocketmq", "source.namesrv.addr": a.namesrv, "source.topics": topic,
            "sink.connector.class": "rocketmq", "sink.namesrv.addr": b.namesrv, "sink.topic": f"{topic}-copy",
            "epoch.max.ms": "1000", "errors.retry.timeout": "-1", "tasks.max": "1", **extra}


def _metric(text: str, name: str, connector: str) -> float | None:
    match = re.search(rf'^{name}{{connector="{re.escape(connector)}",task="0"}} ([0-9.e+]+)$', text, re.MULTILINE)
    return float(match.group(1)) if match else None


def test_an_undeliverable_sink_shows_nothing_committed_growing_lag_and_the_reason_then_catches_up(
        worker_factory, rocketmq_pair, unique):
    a, b = rocketmq_pair
    topic = unique.replace("-", "_")[-60:]
    produce(a, topic, 2000, 2)
    w, c = worker_factory()
    name = f"{unique}-k"
    # the target topic does not exist and the sink may not create it: every send is refused, retried
    assert c.post("/connectors", json={"name": name, "config": _config(a, b, topic)}).status_code == 201

    def task() -> dict:
        tasks = c.get(f"/connectors/{name}/status").json()["tasks"]
        return tasks[0] if tasks else {}

    first = wait_for(lambda: (t := task()).get("retrying") and t.get("lag") and t, 60, "a retrying task with its lag")
    assert first["records"]["committed"] == 0 and first["records"]["moved"] > 0
    assert first["lag"]["records"] == 2000
    [retry] = first["retrying"]
    assert retry["operation"] == "delivery" and "TOPIC_NOT_EXIST" in retry["reason"].upper().replace(" ", "_")
    assert retry["partitions"]  # the held source queues are named
    time.sleep(4)
    later = task()
    assert later["records"]["committed"] == 0 and later["lag"]["records"] == 2000
    assert later["lag"]["seconds"] > first["lag"]["seconds"] and later["retrying"][0]["for_s"] > retry["for_s"]
    metrics = c.get("/metrics").text
    assert _metric(metrics, "connect_records_committed_total", name) in (None, 0.0)
    assert _metric(metrics, "connect_source_lag_records", name) == 2000
    runtime = w.herder.registry.connectors[name].runtime
    line = format_result(runtime.tasks[0].last)  # the line `connect run` prints for this epoch
    assert "committed 0 " in line and "lag 2,000" in line and "retrying delivery" in line, line
    assert runtime.committed_total == 0

    with SyncRocketMQClient(b.namesrv) as client:  # the cause is fixed: the target topic now exists
        client.create_topic(b.broker_addr, f"{topic}-copy", 2, 2)
    done = wait_for(lambda: (t := task()).get("lag", {}).get("records") == 0 and t["records"]["committed"] >= 2000
                    and not t.get("retrying") and t, 90, "committed to catch up and lag to return to 0")
    assert done["lag"]["seconds"] == 0
    metrics = c.get("/metrics").text
    assert _metric(metrics, "connect_records_committed_total", name) >= 2000
    assert _metric(metrics, "connect_source_lag_records", name) == 0
    assert c.get(f"/connectors/{name}/status").json()["connector"]["lag"]["records"] == 0


def test_a_paused_connector_counts_what_arrives_as_lag_with_a_growing_age(worker_factory, rocketmq_pair, unique):
    a, b = rocketmq_pair
    topic = unique.replace("-", "_")[-60:]
    produce(a, topic, 500, 2)
    _, c = worker_factory()
    name = f"{unique}-p"
    config = _config(a, b, topic, **{"sink.auto.create.topics": "true"})
    assert c.post("/connectors", json={"name": name, "config": config}).status_code == 201
    wait_for(lambda: c.get(f"/connectors/{name}/status").json()["connector"].get("lag", {}).get("records") == 0
             and c.get(f"/connectors/{name}/status").json()["tasks"][0]["records"]["committed"] >= 500, 90,
             "the first 500 committed")
    assert c.put(f"/connectors/{name}/pause").status_code == 202
    wait_for(lambda: c.get(f"/connectors/{name}/status").json()["connector"]["state"] == "PAUSED", 30, "PAUSED")
    produce(a, topic, 3000, 2, start=500)

    def lag() -> dict:
        return c.get(f"/connectors/{name}/status").json()["tasks"][0].get("lag", {})

    first = wait_for(lambda: (x := lag()).get("records") == 3000 and x, 30, "lag 3,000 while paused")
    time.sleep(REFRESH_S + 1)
    later = lag()
    assert later["records"] == 3000 and later["seconds"] > first["seconds"]
    metrics = c.get("/metrics").text
    assert _metric(metrics, "connect_source_lag_records", name) == 3000
    # stopped too: the connector has no task pairs, its lag is still measured
    assert c.put(f"/connectors/{name}/stop").status_code == 204
    stopped = wait_for(lambda: (s := c.get(f"/connectors/{name}/status").json()["connector"])["state"] == "STOPPED"
                       and s.get("lag") and s, 30, "the lag of a STOPPED connector")
    assert stopped["lag"]["records"] == 3000
    assert c.put(f"/connectors/{name}/resume").status_code == 202
    wait_for(lambda: c.get(f"/connectors/{name}/status").json()["connector"].get("lag", {}).get("records") == 0, 90,
             "lag back to 0 after resuming")



