"""``exactly.once.support`` in the worker service (real REST API, the session's Spark, Apache Kafka): the
task status says the delivery mode, the metrics count transactions, and a restart of every task
through the REST API mid-stream leaves each record once, in per-key order, for read_committed readers."""

from __future__ import annotations

import pytest
from kafka_util import assert_once_in_key_order, consume_committed, create_topic, produce_keyed
from service_util import wait_for

pytestmark = pytest.mark.timeout(300)


def test_worker_service_status_metrics_and_a_restart_mid_stream(worker_factory, apache_kafka_pair, unique):
    a, b = apache_kafka_pair
    topic, n, parts = f"eos-svc-{unique}", 20_000, 2
    create_topic(a.bootstrap, topic, parts)
    produce_keyed(a.bootstrap, topic, n // 2, parts)
    _, c = worker_factory()
    name = f"eos-{unique}"
    r = c.post("/connectors", json={"name": name, "config": {
        "source.connector.class": "kafka", "source.bootstrap.servers": a.bootstrap, "source.topics": topic,
        "source.start.position": "earliest", "sink.connector.class": "kafka", "sink.bootstrap.servers": b.bootstrap,
        "sink.topic.template": "s.{topic}", "epoch.max.ms": "1000", "epoch.max.records": "2000", "tasks.max": "2",
        "exactly.once.support": "required"}})
    assert r.status_code == 201, r.text

    def tasks():
        return c.get(f"/connectors/{name}/status").json()["tasks"]

    wait_for(lambda: len(tasks()) == 2 and all(t.get("delivery") == "exactly-once" for t in tasks()), 120,
             "both tasks running exactly-once")

    def committed_txns() -> float:
        return sum(float(line.rsplit(" ", 1)[1]) for line in c.get("/metrics").text.splitlines()
                   if line.startswith(f'connect_transactions_committed_total{{connector="{name}"'))

    wait_for(lambda: committed_txns() >= 2, 60, "transactions committed")
    # every task restarted mid-stream (their open transactions are fenced by the new attempts)
    produce_keyed(a.bootstrap, topic, n // 2, parts, start=n // 2)
    r = c.post(f"/connectors/{name}/restart", params={"includeTasks": "true"})
    assert r.status_code in (200, 202, 204), r.text
    got = wait_for(lambda: (m := consume_committed(b.bootstrap, f"s.{topic}", range(parts), n, timeout=30)) and
                   len(m) >= n and m, 180, f"{n} records read_committed")
    assert_once_in_key_order(consume_committed(b.bootstrap, f"s.{topic}", range(parts), len(got)), n)
    assert all(t["state"] == "RUNNING" for t in tasks()), tasks()


def test_offsets_altered_and_reset_through_the_rest_api_reach_the_target(worker_factory, apache_kafka_pair, unique):
    """KIP-875 for an exactly-once connector: its pairs resume from the offsets in the target, so a
    PATCH or DELETE of .../offsets (connector STOPPED) is written there too (old code: only to the
    worker's store, which the pairs never read - the change did nothing). Altered to offset 599, the
    resumed connector copies 600..999 again (1,400 in the target); reset, it copies all 1,000 again."""
    a, b = apache_kafka_pair
    topic, n = f"eos-offs-{unique}", 1000
    create_topic(a.bootstrap, topic, 1)
    produce_keyed(a.bootstrap, topic, n, 1)
    _, c = worker_factory()
    name = f"eos-offs-{unique}"
    r = c.post("/connectors", json={"name": name, "config": {
        "source.connector.class": "kafka", "source.bootstrap.servers": a.bootstrap, "source.topics": topic,
        "source.start.position": "earliest", "sink.connector.class": "kafka", "sink.bootstrap.servers": b.bootstrap,
        "sink.topic.template": "s.{topic}", "epoch.max.ms": "1000", "exactly.once.support": "required"}})
    assert r.status_code == 201, r.text
    target = f"s.{topic}"

    def copied(expected: int) -> int:
        return len(consume_committed(b.bootstrap, target, [0], expected, timeout=20))

    def stop() -> None:
        assert c.put(f"/connectors/{name}/stop").status_code in (200, 202, 204)
        wait_for(lambda: c.get(f"/connectors/{name}/status").json()["connector"]["state"] == "STOPPED", 60, "STOPPED")

    def offset() -> int | None:
        got = c.get(f"/connectors/{name}/offsets").json()["offsets"]
        return got[0]["offset"]["offset"] if got else None

    wait_for(lambda: copied(n) >= n, 120, f"{n} records read_committed")
    stop()
    wait_for(lambda: offset() == n - 1, 30, "the stored offset at the last record")
    r = c.patch(f"/connectors/{name}/offsets", json={"offsets": [
        {"partition": {"topic": topic, "partition": 0}, "offset": {"offset": 599}}]})
    assert r.status_code == 200, r.text
    assert c.put(f"/connectors/{name}/resume").status_code in (200, 202, 204)
    wait_for(lambda: copied(n + 400) >= n + 400, 120, "600..999 copied again from the altered offset")
    stop()
    assert copied(n + 400) == n + 400, "nothing but 600..999 copied again"
    r = c.delete(f"/connectors/{name}/offsets")
    assert r.status_code == 200, r.text
    assert c.put(f"/connectors/{name}/resume").status_code in (200, 202, 204)
    wait_for(lambda: copied(2 * n + 400) >= 2 * n + 400, 120, "everything copied again after the reset")
