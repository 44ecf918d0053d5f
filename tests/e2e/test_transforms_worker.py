"""Transforms through the real worker: a connector created over REST with transforms runs its pairs
as Spark partitions (the parsed transforms travel in the task-pair spec to the Python workers, which
build their own instances), and the worker lists and validates transforms as Kafka Connect does."""

from __future__ import annotations

from confluent_kafka import Consumer, TopicPartition
from kafka_util import consume_all, create_topic, produce
from service_util import wait_for

TRANSFORMS = {
    "transforms": "route,tag,dropOdd",
    "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
    "transforms.route.regex": r"orders\.(.*)", "transforms.route.replacement": "dc1_orders_$1",
    "transforms.tag.type": "InsertHeader", "transforms.tag.header": "via", "transforms.tag.value.literal": "spark",
    "transforms.dropOdd.type": "Filter", "transforms.dropOdd.predicate": "odd",
    "predicates": "odd", "predicates.odd.type": "TopicNameMatches", "predicates.odd.pattern": ".*-odd",
}


def _read(bootstrap: str, topic: str, expected: int) -> list:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "e2e", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
    out: list = []
    try:
        wait_for(lambda: out.extend(m for m in c.consume(1000, 0.2) if m.error() is None) or len(out) >= expected,
                 timeout=90, what=f"{expected} records in {topic}")
    finally:
        c.close()
    return out


def test_a_connector_with_transforms_runs_through_the_worker_and_spark(worker_factory, kafka_pair, unique):
    src, dst = kafka_pair
    _, c = worker_factory()
    kept, odd = f"orders.eu-{unique}", f"orders.x-{unique}-odd"
    for topic in (kept, odd):
        create_topic(src.bootstrap, topic, 2)
        produce(src.bootstrap, topic, 300, 2)
    config = {"source.connector.class": "kafka", "source.bootstrap.servers": src.bootstrap,
              "source.topics": f"{kept},{odd}", "sink.connector.class": "kafka",
              "sink.bootstrap.servers": dst.bootstrap, "epoch.max.ms": "1500", **TRANSFORMS}
    r = c.post("/connectors", json={"name": f"xf-{unique}", "config": config})
    assert r.status_code == 201, r.text
    got = _read(dst.bootstrap, f"dc1_orders_eu-{unique}", 300)
    assert sorted(m.value() for m in got) == sorted(f"value-{i}".encode() for i in range(300))
    assert all(dict(m.headers())["via"] == b"spark" for m in got)
    assert consume_all(dst.bootstrap, f"dc1_orders_x-{unique}-odd", [0, 1], 0, timeout=2) == []  # filtered
    status = c.get(f"/connectors/xf-{unique}/status").json()
    assert status["connector"]["state"] == "RUNNING" and status["tasks"][0]["state"] == "RUNNING"
    assert c.delete(f"/connectors/xf-{unique}").status_code == 204


def test_the_worker_lists_and_validates_transforms(worker_factory, kafka_pair):
    src, dst = kafka_pair
    _, c = worker_factory()
    only = c.get("/connector-plugins").json()
    assert {p["type"] for p in only} == {"source", "sink"}
    everything = c.get("/connector-plugins?connectorsOnly=false").json()
    kinds = {p["alias"]: p for p in everything}
    assert kinds["RegexRouter"]["type"] == "transformation" and kinds["RegexRouter"]["version"]
    assert kinds["RecordIsTombstone"]["type"] == "predicate"
    assert kinds["RegexRouter"]["class"] == "connect.transforms.routing.RegexRouter"
    assert c.get("/connector-plugins?connectorsOnly=maybe").status_code == 400
    bad = {"source.connector.class": "kafka", "source.bootstrap.servers": src.bootstrap, "source.topics": "t",
           "sink.connector.class": "kafka", "sink.bootstrap.servers": dst.bootstrap, **TRANSFORMS,
           "transforms.route.regex": "orders(", "transforms.tag.value.literl": "x",
           "transforms.tag.sasl.password": "s3cret-value", "transforms.route.type": "evil.module:Thing"}
    r = c.post("/connectors", json={"name": "bad-xf", "config": bad})
    assert r.status_code == 400
    message = r.json()["message"]
    assert "transforms.route.type" in message and "no module is imported from a config" in message
    assert "transforms.tag.value.literl" in message and "did you mean transforms.tag.value.literal" in message
    assert "s3cret-value" not in message
