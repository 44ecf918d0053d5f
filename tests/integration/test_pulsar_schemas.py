"""Schema replication (PIP-87) over the wire: Pulsar -> Pulsar and Kafka -> Pulsar through the real
driver and Spark partitions.

What is real and what is played: the messages, producers and readers go to real pulsar-lite
brokers. pulsar-lite has no schema registry, so each broker sits behind a
``pulsar_wire.SchemaRegistryProxy`` that plays the registry's part of the binary protocol exactly
where a Pulsar broker would: it registers the schema a PRODUCER declares and returns its version
in PRODUCER_SUCCESS (so the stored messages carry real schema versions), answers GET_SCHEMA, and
refuses schemas the test marks incompatible. The assertions on ``producers`` and ``lookups`` are
contract checks of those exact requests.
"""

from __future__ import annotations

import pulsar
import pytest
from kafka_util import create_topic as kafka_create_topic
from kafka_util import produce as kafka_produce
from pipeline_util import make_driver, pair_pipeline, run_until
from pulsar_brokers import use_apache_pulsar
from pulsar_util import QUIET
from pulsar_wire import SchemaRegistryProxy

from connect.records import ValueSchema
from connectors.pulsar.schemas import producer_schema

# The proxy plays the registry in front of pulsar-lite; in front of Apache Pulsar the real registry
# answers too and refuses AVRO_V2 under its FULL rule. test_pulsar_schemas_apache.py makes these two
# tests' claims through the real registries.
LITE_ONLY = pytest.mark.skipif(use_apache_pulsar(), reason="test_pulsar_schemas_apache.py covers it on Apache Pulsar")

AVRO = '{"type":"record","name":"Order","fields":[{"name":"id","type":"long"}]}'
AVRO_V2 = '{"type":"record","name":"Order","fields":[{"name":"id","type":"long"},{"name":"note","type":"string"}]}'


def _write(service_url: str, topic: str, batches) -> None:
    """``batches``: [(schema or None, [payloads])], each written by its own producer, in order."""
    client = pulsar.Client(service_url, logger=QUIET, operation_timeout_seconds=10)
    try:
        for schema, payloads in batches:
            producer = client.create_producer(topic, **({"schema": producer_schema(schema)} if schema else {}))
            for p in payloads:
                producer.send(p)
            producer.close()
    finally:
        client.close()


def _read(service_url: str, topic: str, expected: int) -> list:
    client = pulsar.Client(service_url, logger=QUIET, operation_timeout_seconds=10)
    out = []
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        while True:
            try:
                m = reader.read_next(2000 if len(out) < expected else 500)
            except pulsar.Timeout:
                break
            out.append((m.data(), m._message.int_schema_version()))
    finally:
        client.close()
    return out


def _payloads(tag: str, n: int, start: int = 0) -> list[bytes]:
    return [f"{tag}-{i}".encode() for i in range(start, start + n)]


@LITE_ONLY
def test_schemas_travel_with_the_data_and_the_destination_numbers_its_own_versions(pulsar_pair, spark, tmp_path,
                                                                                   unique):
    src_broker, dst_broker = pulsar_pair
    src = SchemaRegistryProxy(src_broker.port, first_version=5)
    dst = SchemaRegistryProxy(dst_broker.port, first_version=0)
    topic = f"persistent://public/default/schemas-{unique}"
    a, b = ValueSchema("AVRO", AVRO, "Order"), ValueSchema("AVRO", AVRO_V2, "Order")
    _write(src.service_url, topic, [(a, _payloads("a", 300)), (b, _payloads("b", 200)), (None, _payloads("raw", 50))])
    driver = make_driver(spark, tmp_path, pair_pipeline(
        unique, {"connector.class": "pulsar", "service.url": src.service_url, "topics": topic},
        {"connector.class": "pulsar", "service.url": dst.service_url}))
    try:
        assert run_until(driver, 550) == 550
    finally:
        driver.close()
        src.close()
    out = _read(dst.service_url, topic, 550)
    dst.close()
    assert [p for p, _ in out] == _payloads("a", 300) + _payloads("b", 200) + _payloads("raw", 50)  # in order
    # The destination registered both schemas under its own versions (0, 1; the source had 5, 6);
    # the messages carry the destination's versions, the schema-less ones none.
    assert [v for _, v in out] == [0] * 300 + [1] * 200 + [-1] * 50
    assert [(t, ty, d) for t, ty, _, d in dst.producers] == [(topic, "AVRO", AVRO), (topic, "AVRO", AVRO_V2)]
    # pulsar-client's GetSchema gives type and definition, not the name: registered unnamed.
    assert dst.registry[topic] == [("AVRO", "", AVRO), ("AVRO", "", AVRO_V2)]
    # Each source version was asked for once (then cached), with the source's numbering.
    assert sorted(set(src.lookups)) == [(topic, 5), (topic, 6)] and len(src.lookups) <= 4


@LITE_ONLY
def test_an_incompatible_schema_stops_the_topic_without_skipping_and_resumes_once_accepted(pulsar_pair, spark,
                                                                                        tmp_path, unique):
    src_broker, dst_broker = pulsar_pair
    src = SchemaRegistryProxy(src_broker.port, first_version=3)
    refusing = SchemaRegistryProxy(dst_broker.port, incompatible={AVRO_V2})
    topic = f"persistent://public/default/incompatible-{unique}"
    a, b = ValueSchema("AVRO", AVRO, "Order"), ValueSchema("AVRO", AVRO_V2, "Order")
    _write(src.service_url, topic, [(a, _payloads("a", 100)), (b, _payloads("b", 100))])
    source = {"connector.class": "pulsar", "service.url": src.service_url, "topics": topic}
    driver = make_driver(spark, tmp_path, pair_pipeline(
        unique, source, {"connector.class": "pulsar", "service.url": refusing.service_url}))
    try:
        failure = None
        for _ in range(20):
            results = driver.run_epoch()
            if results[0].state == "FAILED":
                failure = results[0].trace
                break
        assert failure is not None and "SchemaIncompatibleError" in failure and "skips nothing" in failure, failure
        committed = dict(driver.runtimes[0].offsets)
    finally:
        driver.close()
    refusing.close()
    copied = _read(dst_broker.service_url, topic, 100)
    assert [p for p, _ in copied] == _payloads("a", 100)  # the first schema's records, none of the refused one
    # Nothing of the refused schema was committed: the position is at most the last "a" record
    # (each send of _write is an entry of its own: entries 0-99 are "a", 100-199 "b").
    assert list(committed.values())[0]["entry"] <= 99
    # The destination now accepts the new schema: a new run from the committed positions copies the rest.
    accepting = SchemaRegistryProxy(dst_broker.port)
    driver = make_driver(spark, tmp_path, pair_pipeline(
        unique, source, {"connector.class": "pulsar", "service.url": accepting.service_url}))
    try:
        run_until(driver, 100)
    finally:
        driver.close()
        src.close()
    out = [p for p, _ in _read(dst_broker.service_url, topic, 200)]
    accepting.close()
    assert sorted(set(out)) == sorted(_payloads("a", 100) + _payloads("b", 100))  # nothing skipped
    assert out[-100:] == _payloads("b", 100)


def test_a_schema_lookup_nobody_answers_holds_the_records_until_it_is_answered(pulsar_pair, spark, tmp_path, unique):
    src_broker, dst_broker = pulsar_pair
    src = SchemaRegistryProxy(src_broker.port, first_version=1)
    dst = SchemaRegistryProxy(dst_broker.port)
    topic = f"persistent://public/default/held-{unique}"
    _write(src.service_url, topic, [(None, _payloads("raw", 40)), (ValueSchema("JSON", AVRO, "Order"), _payloads("j", 60))])
    src.answer_lookups = False
    driver = make_driver(spark, tmp_path, pair_pipeline(
        unique, {"connector.class": "pulsar", "service.url": src.service_url, "topics": topic,
                 "operation.timeout.ms": 1000},
        {"connector.class": "pulsar", "service.url": dst.service_url}, **{"errors.retry.timeout": 600_000}))
    try:
        for _ in range(4):
            results = driver.run_epoch()
            assert results[0].state == "RUNNING", results[0].trace
        assert list(driver.runtimes[0].offsets.values())[0]["entry"] == 39  # the 40 schema-less records, no more
        assert src.lookups  # it asked
        src.answer_lookups = True
        run_until(driver, 100)
    finally:
        driver.close()
        src.close()
    out = _read(dst.service_url, topic, 100)
    dst.close()
    assert [p for p, _ in out] == _payloads("raw", 40) + _payloads("j", 60)
    assert [v for _, v in out] == [-1] * 40 + [0] * 60


def test_kafka_to_pulsar_publishes_with_the_declared_schema(kafka_pair, pulsar_pair, spark, tmp_path, unique):
    ksrc, _ = kafka_pair
    _, dst_broker = pulsar_pair
    dst = SchemaRegistryProxy(dst_broker.port, first_version=7)
    name = f"declared-{unique.rsplit('-', 1)[1]}"
    kafka_create_topic(ksrc.bootstrap, name, 1)
    kafka_produce(ksrc.bootstrap, name, 500, 1)
    target = f"persistent://public/default/{name}"
    driver = make_driver(spark, tmp_path, pair_pipeline(
        unique, {"connector.class": "kafka", "bootstrap.servers": ksrc.bootstrap, "topics": name},
        {"connector.class": "pulsar", "service.url": dst.service_url, "topic": target,
         "value.schema.type": "avro", "value.schema.definition": AVRO, "value.schema.name": "Order"}))
    try:
        assert run_until(driver, 500) == 500
    finally:
        driver.close()
    out = _read(dst.service_url, target, 500)
    dst.close()
    assert len(out) == 500 and {v for _, v in out} == {7}
    assert dst.producers == [(target, "AVRO", "Order", AVRO)]
