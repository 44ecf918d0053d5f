"""A worker whose Kafka store topics another worker took over: over its REST API, with the session's
Spark application and real Apache Kafka brokers. worker/stores/kafkastore.py fences the store; this checks what the
worker then does with its connectors."""

from __future__ import annotations

import logging
import time

import pytest
from kafka_util import create_topic, produce
from service_util import Arrivals, wait_for

from connect.source.gaps import is_bookkeeping_key
from worker.stores.kafkastore import KafkaStores

pytestmark = pytest.mark.timeout(300)


def test_a_worker_whose_store_was_taken_over_stops_its_connectors_and_copies_nothing_more(
        worker_factory, kafka_pair, unique, caplog):
    """The takeover fences the worker's store: the connector's next commit fails, the worker logs
    why and stops the connector (FAILED, with the reason as its trace) instead of running epochs
    whose offsets it can no longer commit - each would copy the same records again. Its REST writes
    answer the reason too. The new owner resumes from the offsets committed before the takeover."""
    a, b = kafka_pair
    topics = {"config_topic": f"cfg-{unique}", "offset_topic": f"off-{unique}", "status_topic": f"st-{unique}"}
    store = {"store": "kafka", "store.kafka.bootstrap.servers": b.bootstrap,
             **{f"store.kafka.{role.split('_')[0]}.topic": name for role, name in topics.items()}}
    topic = f"fence-{unique}"
    create_topic(a.bootstrap, topic, 2)
    produce(a.bootstrap, topic, 1000, 2)
    arrived = Arrivals(b.bootstrap, f"copy.{topic}")
    _, c = worker_factory(**store)
    config = {"source.connector.class": "kafka", "source.bootstrap.servers": a.bootstrap, "source.topics": topic,
              "source.start.position": "earliest", "sink.connector.class": "kafka",
              "sink.bootstrap.servers": b.bootstrap, "sink.topic.template": "copy.{topic}", "epoch.max.ms": "1000"}
    assert c.post("/connectors", json={"name": topic, "config": config}).status_code == 201

    def committed(offsets) -> int:
        return sum(o["offset"]["offset"] + 1 for o in offsets)

    wait_for(lambda: arrived.count() >= 1000, 90, "1000 records")
    wait_for(lambda: committed(c.get(f"/connectors/{topic}/offsets").json()["offsets"]) == 1000, 60, "1000 committed")

    taker = KafkaStores(b.bootstrap, timeout_s=15, **topics)  # as a second worker on the same topics does
    try:
        with caplog.at_level(logging.ERROR, logger="worker.herder"):
            produce(a.bootstrap, topic, 1000, 2, start=1000)

            def failed_by_takeover() -> bool:
                status = c.get(f"/connectors/{topic}/status").json()["connector"]
                return status["state"] == "FAILED" and "another worker took over store topics" in status.get("trace", "")

            wait_for(failed_by_takeover, 60, "the connector FAILED by the takeover")
            copied = arrived.count(2)
            time.sleep(5)  # a connector still running would copy the 1000 new records again about every second
            assert arrived.count(2) == copied <= 2000
        assert any(f"connector {topic} stops: another worker took over store topics" in r.getMessage()
                   for r in caplog.records)
        r = c.put(f"/connectors/{topic}/pause")
        assert r.status_code == 500 and "another worker took over store topics" in r.json()["message"]
        stored = taker.offsets.load(topic)  # the partitions' offsets, beside the topic identity (connect.source.gaps)
        assert sum(o["offset"] + 1 for k, o in stored.items() if not is_bookkeeping_key(k)) == 1000
    finally:
        taker.close()
        arrived.close()
