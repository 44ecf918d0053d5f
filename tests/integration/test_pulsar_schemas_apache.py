"""Schema replication (PIP-87) through Apache Pulsar's real schema registries: two standalone
clusters (``apache_pulsar_pair``), each with its own registry, and the real driver on Spark.

Shown: an Avro schema evolved on a (v1, then v2 with a new optional field) reaches b's registry as
b's own versions (b, which had v2 already, numbers v1 after it), and a reader on b decodes every
message with b's registry (v1 messages through v2's reader schema); a schema b's compatibility rule
refuses stops the topic without skipping anything, and once b accepts it the rest follows.
"""

from __future__ import annotations

import json
import time

import pulsar
import pytest
from pipeline_util import make_driver, pair_pipeline, run_until
from pulsar.schema import AvroSchema
from pulsar_util import QUIET

from worker.brokers.pulsar import admin_request

pytestmark = pytest.mark.timeout(900)


ORDER = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}
# v1 plus an optional field with a default: FULL-compatible (Pulsar's default rule)
ORDER_V2 = {"type": "record", "name": "Order",
            "fields": [{"name": "id", "type": "long"}, {"name": "note", "type": ["null", "string"], "default": None}]}
# id changed from long to string: incompatible with v1 under FULL
ORDER_TEXT = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]}


def avro(definition: dict) -> AvroSchema:
    return AvroSchema(None, schema_definition=definition)


def _client(broker) -> pulsar.Client:
    return pulsar.Client(broker.service_url, logger=QUIET, operation_timeout_seconds=60)


def _write(broker, topic: str, batches) -> None:
    """``batches``: [(Avro schema definition, [records])], each written by its own producer, in order."""
    client = _client(broker)
    try:
        for definition, records in batches:
            producer = client.create_producer(topic, schema=avro(definition), batching_enabled=False)
            for r in records:
                producer.send(r)
            producer.close()
    finally:
        client.close()


def _read(broker, topic: str, reader: dict | None, expected: int) -> list:
    """(decoded record, schema version) of every message, read with ``reader`` as the Avro
    reader schema (the client fetches each message's writer schema from this cluster's registry);
    with ``reader`` None, (payload bytes, schema version)."""
    client = _client(broker)
    out = []
    try:
        consumer = client.subscribe(topic, f"check-{time.monotonic_ns()}",
                                    initial_position=pulsar.InitialPosition.Earliest,
                                    **({"schema": avro(reader)} if reader else {}))
        while True:
            try:
                m = consumer.receive(5000 if len(out) < expected else 1000)
            except pulsar.Timeout:
                break
            out.append((m.value() if reader else m.data(), m._message.int_schema_version()))
            consumer.acknowledge(m)
        consumer.unsubscribe()
    finally:
        client.close()
    return out


def _versions(broker, topic: str) -> list[dict]:
    """The Avro definitions (parsed) the broker's registry holds for ``topic``, by version."""
    path = topic.replace("persistent://", "")
    answer = admin_request(broker.admin_url, "GET", f"/admin/v2/schemas/{path}/schemas")
    return [json.loads(s["data"]) for s in answer["getSchemaResponses"]]


def _namespace(broker, name: str, strategy: str) -> None:
    admin_request(broker.admin_url, "PUT", f"/admin/v2/namespaces/{name}", {})
    admin_request(broker.admin_url, "PUT", f"/admin/v2/namespaces/{name}/schemaCompatibilityStrategy", strategy)


def test_an_avro_schema_evolved_on_a_is_decoded_by_readers_on_b(apache_pulsar_pair, spark, tmp_path, unique):
    a, b = apache_pulsar_pair
    topic = f"persistent://public/default/evolved-{unique}"
    _write(a, topic, [(ORDER, [{"id": i} for i in range(300)]),
                      (ORDER_V2, [{"id": i, "note": f"n{i}"} for i in range(300, 500)])])
    # b's registry already knows v2 (an operator uploaded it): there v2 is version 0, not 1 as on a
    admin_request(b.admin_url, "POST", f"/admin/v2/schemas/{topic.replace('persistent://', '')}/schema",
                  {"type": "AVRO", "schema": json.dumps(ORDER_V2), "properties": {}})
    driver = make_driver(spark, tmp_path, pair_pipeline(
        unique, {"connector.class": "pulsar", "service.url": a.service_url, "topics": topic},
        {"connector.class": "pulsar", "service.url": b.service_url}))
    try:
        assert run_until(driver, 500) == 500
    finally:
        driver.close()
    on_a, on_b = _versions(a, topic), _versions(b, topic)
    assert on_a == [ORDER, ORDER_V2] and on_b == [ORDER_V2, ORDER]  # b registered v1 after the v2 it had
    out = _read(b, topic, ORDER_V2, 500)
    assert [r["id"] for r, _ in out] == list(range(500))  # in order, each once
    assert [r["note"] for r, _ in out] == [None] * 300 + [f"n{i}" for i in range(300, 500)]
    assert [v for _, v in out] == [1] * 300 + [0] * 200  # b's own versions, not a's (0 and 1)


def test_a_schema_b_refuses_stops_the_topic_without_skipping_and_resumes_once_accepted(apache_pulsar_pair, spark,
                                                                                      tmp_path, unique):
    a, b = apache_pulsar_pair
    namespace = f"public/schemas-{unique.rsplit('-', 1)[1]}"
    _namespace(a, namespace, "ALWAYS_COMPATIBLE")  # a takes any change
    _namespace(b, namespace, "FULL")  # b refuses a changed field type
    topic = f"persistent://{namespace}/incompatible"
    _write(a, topic, [(ORDER, [{"id": i} for i in range(100)]), (ORDER_TEXT, [{"id": str(i)} for i in range(100)])])
    pipeline = pair_pipeline(unique, {"connector.class": "pulsar", "service.url": a.service_url, "topics": topic},
                             {"connector.class": "pulsar", "service.url": b.service_url})
    driver = make_driver(spark, tmp_path, pipeline)
    try:
        failure = None
        for _ in range(30):
            results = driver.run_epoch()
            if results[0].state == "FAILED":
                failure = results[0].trace
                break
        assert failure is not None and "SchemaIncompatibleError" in failure and "skips nothing" in failure, failure
        committed = dict(driver.runtimes[0].offsets)
    finally:
        driver.close()
    copied = _read(b, topic, ORDER, 100)
    assert [r["id"] for r, _ in copied] == list(range(100))  # the first schema's records, none of the refused one
    assert list(committed.values())[0]["entry"] <= 99  # nothing of the refused schema committed
    admin_request(b.admin_url, "PUT", f"/admin/v2/namespaces/{namespace}/schemaCompatibilityStrategy",
                  "ALWAYS_COMPATIBLE")  # b now takes it: a new run from the committed positions copies the rest
    driver = make_driver(spark, tmp_path, pipeline)
    try:
        run_until(driver, 100)
    finally:
        driver.close()
    assert len(_versions(b, topic)) == 2
    # As bytes: no reader schema decodes both long and string ids. At least once: the restart may
    # copy again what the failed run sent but had not committed (with b's version 0).
    out = _read(b, topic, None, 200)
    versions = [v for _, v in out]
    assert versions[-100:] == [1] * 100 and set(versions[:-100]) == {0}  # the refused schema is b's version 1 now
    first, text = avro(ORDER), avro(ORDER_TEXT)
    assert sorted({first.decode(data)["id"] for data, _ in out[:-100]}) == list(range(100))
    assert [text.decode(data)["id"] for data, _ in out[-100:]] == [str(i) for i in range(100)]
