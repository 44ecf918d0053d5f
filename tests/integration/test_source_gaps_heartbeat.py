"""A heartbeat monitor reports a link whose flow has an open source gap as unhealthy (issue 40), on
Apache Kafka (real DeleteRecords): heartbeats emitted into A go through the mirror A -> B that also
copies a data topic; the mirror (``source.gap.policy=report``) is stopped, records of the data topic
it had not copied are deleted, and resumed: it goes on, but while the gap is open every heartbeat it
carries says so and the monitor in B reports the link unhealthy; acknowledged, healthy again.
"""

from __future__ import annotations

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from kafka_util import create_topic, produce
from service_util import wait_for

pytestmark = pytest.mark.timeout(400)


def _monitor(c, name: str) -> dict:
    tasks = c.get(f"/connectors/{name}/status").json()["tasks"]
    return tasks[0].get("metrics", {}) if tasks else {}


def _data_offset(c, name: str, topic: str) -> int | None:
    for entry in c.get(f"/connectors/{name}/offsets").json()["offsets"]:
        if entry["partition"].get("topic") == topic:
            return entry["offset"]["offset"]
    return None


def test_an_open_gap_makes_the_link_unhealthy_until_acknowledged(worker_factory, apache_kafka_pair, unique):
    a, b = apache_kafka_pair
    short = unique.rsplit("-", 1)[1]
    hb, data = f"hbg-{short}", f"gapd-{short}"
    for cluster in (a, b):
        create_topic(cluster.bootstrap, hb, 1)
        create_topic(cluster.bootstrap, data, 1)
    produce(a.bootstrap, data, 100, 1)
    _, c = worker_factory()
    fast = {"epoch.max.ms": "500"}
    emit, mirror, monitor = f"{hb}-emit", f"{hb}-mirror", f"{hb}-monitor"
    connectors = {
        emit: {"source.connector.class": "heartbeat", "source.alias": "A", "source.topic": hb,
               "source.interval.ms": "200", "sink.connector.class": "kafka", "sink.bootstrap.servers": a.bootstrap,
               **fast},
        mirror: {"source.connector.class": "kafka", "source.bootstrap.servers": a.bootstrap,
                 "source.topics": f"{hb},{data}", "source.cluster.alias": "A", "source.source.gap.policy": "report",
                 "sink.connector.class": "kafka", "sink.bootstrap.servers": b.bootstrap, "sink.cluster.alias": "B",
                 **fast},
        monitor: {"source.connector.class": "kafka", "source.bootstrap.servers": b.bootstrap, "source.topics": hb,
                  "sink.connector.class": "heartbeat", "sink.timeout.ms": "5000", **fast},
    }
    for name, config in connectors.items():
        r = c.post("/connectors", json={"name": name, "config": config})
        assert r.status_code == 201, r.text
    key = "heartbeat.A"
    healthy = wait_for(lambda: (m := _monitor(c, monitor)).get(f"{key}.healthy") == 1.0 and m, 120, "a healthy link")
    assert healthy.get(f"{key}.open_gaps", 0.0) == 0.0
    wait_for(lambda: _data_offset(c, mirror, data) == 99, 120, "the first 100 data records committed")

    assert c.put(f"/connectors/{mirror}/stop").status_code == 204
    wait_for(lambda: c.get(f"/connectors/{mirror}/status").json()["connector"]["state"] == "STOPPED", 60, "STOPPED")
    produce(a.bootstrap, data, 100, 1, start=100)  # offsets 100..199
    admin = AdminClient({"bootstrap.servers": a.bootstrap})
    for future in admin.delete_records([TopicPartition(data, 0, 150)], request_timeout=30).values():
        assert future.result().low_watermark == 150  # 100..149 gone, never copied
    assert c.put(f"/connectors/{mirror}/resume").status_code == 202

    # report: the mirror goes on (its heartbeats keep arriving), but the link is unhealthy while the gap is open
    gapped = wait_for(lambda: (m := _monitor(c, monitor)).get(f"{key}.healthy") == 0.0 and m, 90,
                      "the monitor to report the link unhealthy")
    assert gapped[f"{key}.open_gaps"] == 1.0
    assert gapped[f"{key}.age_ms"] < 5000  # fresh heartbeats: unhealthy because of the gap, not a stale link
    assert c.get(f"/connectors/{mirror}/status").json()["tasks"][0]["state"] == "RUNNING"
    count = gapped[f"{key}.count"]
    still = wait_for(lambda: (m := _monitor(c, monitor)).get(f"{key}.count", 0) > count + 5 and m, 60,
                     "more heartbeats")
    assert still[f"{key}.healthy"] == 0.0 and still[f"{key}.open_gaps"] == 1.0  # every heartbeat says so

    r = c.post(f"/connectors/{mirror}/gaps/acknowledge", json={"by": "alice"})
    assert r.status_code == 200 and r.json()["acknowledged"] == 1
    healed = wait_for(lambda: (m := _monitor(c, monitor)).get(f"{key}.healthy") == 1.0 and m, 120,
                      "the link healthy after the acknowledgement")
    assert healed[f"{key}.open_gaps"] == 0.0
