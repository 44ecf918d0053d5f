"""Transforms and predicates over the wire: real Apache Kafka, pulsar-lite and Apache RocketMQ brokers,
real source and sink connectors, run by the authors' test kit (``connect.testing.run_pair``: the
real TaskPairRunner in this process, no Spark), then read back by plain consumers.
"""

from __future__ import annotations

import io
import textwrap

import fastavro
import orjson
import pulsar
import pytest
from confluent_kafka import Producer
from dist_util import forget, install_distribution
from kafka_util import consume_all, create_topic
from pipeline_util import make_driver, pair_pipeline, partition_offsets, run_until
from pulsar_util import QUIET
from pulsar_wire import SchemaRegistryProxy
from rocketmq_util import consume_all as rocketmq_consume_all
from rocketmq_util import produce as rocketmq_produce

from connect.records import ValueSchema
from connect.testing import run_pair
from connect.transforms import TRANSFORM_GROUP
from connectors.pulsar.schemas import producer_schema
from connectors.rocketmq.remoting import TopicNotFoundError
from connectors.rocketmq.sync_client import SyncRocketMQClient


def produce(bootstrap: str, topic: str, messages: list[tuple[bytes | None, bytes | None]], partitions: int = 1) -> None:
    """(key, value) messages, round robin over the partitions; every delivery checked."""
    errors = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, (key, value) in enumerate(messages):
        while True:
            try:
                p.produce(topic, value=value, key=key, partition=i % partitions,
                          on_delivery=lambda err, _m: errors.append(err) if err else None)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(30) == 0 and not errors, errors[:3]


def kafka_config(source: str, target: str, topics: str, **extra) -> dict:
    return {"source.connector.class": "kafka", "source.bootstrap.servers": source, "source.topics": topics,
            "sink.connector.class": "kafka", "sink.bootstrap.servers": target, "epoch.max.ms": "1500", **extra}


def delivered_all(n: int, positions: int = 1):
    """``until`` for run_pair: the committed Kafka offsets cover ``n`` records."""
    return lambda run: sum(o["offset"] + 1 for o in partition_offsets(run.committed)) >= n


def test_regex_router_renames_into_a_prefixed_topic(kafka_pair, unique):
    src, dst = kafka_pair
    topic = f"orders.eu-{unique}"
    create_topic(src.bootstrap, topic, 2)
    produce(src.bootstrap, topic, [(f"k{i}".encode(), f"v{i}".encode()) for i in range(200)], partitions=2)
    run = run_pair(kafka_config(src.bootstrap, dst.bootstrap, topic, **{
        "transforms": "route", "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
        "transforms.route.regex": r"orders\.(.*)", "transforms.route.replacement": "dc1_orders_$1"}),
        epochs=20, until=delivered_all(200))
    assert run.state == "RUNNING", run.trace
    got = consume_all(dst.bootstrap, f"dc1_orders_eu-{unique}", [0, 1], 200)
    assert sorted(m.value() for m in got) == sorted(f"v{i}".encode() for i in range(200))
    assert {m.partition() for m in got} == {0, 1}  # partitions kept under the new name


def test_filter_with_record_is_tombstone_drops_tombstones_and_commits_their_offsets(kafka_pair, unique):
    src, dst = kafka_pair
    topic = f"tomb-{unique}"
    create_topic(src.bootstrap, topic, 1)
    messages = [(f"k{i}".encode(), None if i % 3 == 2 else f"v{i}".encode()) for i in range(30)]  # last one: a tombstone
    produce(src.bootstrap, topic, messages)
    run = run_pair(kafka_config(src.bootstrap, dst.bootstrap, topic, **{
        "transforms": "skipTombstones", "transforms.skipTombstones.type": "Filter",
        "transforms.skipTombstones.predicate": "isTombstone",
        "predicates": "isTombstone", "predicates.isTombstone.type": "RecordIsTombstone"}),
        epochs=20, until=delivered_all(30))
    assert run.state == "RUNNING", run.trace
    assert partition_offsets(run.committed) == [{"offset": 29}]  # the tombstone at offset 29 committed too
    assert run.stats["filtered"] == 10
    got = consume_all(dst.bootstrap, topic, [0], 20)
    assert [m.key() for m in got] == [k for k, v in messages if v is not None]
    assert all(m.value() is not None for m in got)


def test_mask_field_on_json_bytes_without_changing_converters(kafka_pair, unique):
    src, dst = kafka_pair
    topic = f"cards-{unique}"
    create_topic(src.bootstrap, topic, 1)
    produce(src.bootstrap, topic, [(b"k", orjson.dumps({"id": i, "card": "4111-1111", "pin": 1234})) for i in range(50)])
    run = run_pair(kafka_config(src.bootstrap, dst.bootstrap, topic, **{
        "transforms": "mask", "transforms.mask.type": "MaskField$Value", "transforms.mask.fields": "card,pin"}),
        epochs=20, until=delivered_all(50))
    assert run.state == "RUNNING", run.trace
    got = consume_all(dst.bootstrap, topic, [0], 50)
    assert [orjson.loads(m.value()) for m in got] == [{"id": i, "card": "", "pin": 0} for i in range(50)]


ORDER = {"type": "record", "name": "Order", "namespace": "shop",
         "fields": [{"name": "id", "type": "long"}, {"name": "card", "type": "string"}]}


def test_mask_field_on_an_avro_schema_pulsar_topic(pulsar_pair, unique):
    src_broker, dst_broker = pulsar_pair
    src, dst = SchemaRegistryProxy(src_broker.port), SchemaRegistryProxy(dst_broker.port)
    topic = f"persistent://public/default/avro-{unique}"
    parsed = fastavro.parse_schema(ORDER)
    schema = ValueSchema("AVRO", orjson.dumps(ORDER).decode(), "shop.Order")
    client = pulsar.Client(src.service_url, logger=QUIET, operation_timeout_seconds=10)
    producer = client.create_producer(topic, schema=producer_schema(schema))
    for i in range(40):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, {"id": i, "card": f"4111-{i}"})
        producer.send(buf.getvalue())
    client.close()
    try:
        run = run_pair({"source.connector.class": "pulsar", "source.service.url": src.service_url,
                        "source.topics": topic, "sink.connector.class": "pulsar", "sink.service.url": dst.service_url,
                        "epoch.max.ms": "1500", "transforms": "mask", "transforms.mask.type": "MaskField$Value",
                        "transforms.mask.fields": "card"},
                       epochs=20, until=lambda r: r.stats.get("acknowledged", 0) >= 40)
        assert run.state == "RUNNING", run.trace
        reader_client = pulsar.Client(dst.service_url, logger=QUIET, operation_timeout_seconds=10)
        reader = reader_client.create_reader(topic, pulsar.MessageId.earliest)
        values = []
        while len(values) < 40:
            m = reader.read_next(5000)
            values.append(fastavro.schemaless_reader(io.BytesIO(m.data()), parsed, None))
        reader_client.close()
    finally:
        src.close()
        dst.close()
    assert values == [{"id": i, "card": ""} for i in range(40)]
    # published with the record's Avro schema (registered at the destination), not as raw bytes
    assert [(t, orjson.loads(d)) for _, t, _, d in dst.producers] == [("AVRO", ORDER)]


def test_insert_header_is_seen_by_a_rocketmq_consumer(rocketmq_pair, unique):
    src, dst = rocketmq_pair
    topic = f"hdr-{unique}"
    rocketmq_produce(src, topic, 40, 2)
    with SyncRocketMQClient(dst.namesrv) as c:  # the worker's driver prepares targets; the test kit does not
        c.create_topic(dst.broker_addr, f"{topic}-copy", 2, 2)
    run = run_pair({"source.connector.class": "rocketmq", "source.namesrv.addr": src.namesrv, "source.topics": topic,
                    "sink.connector.class": "rocketmq", "sink.namesrv.addr": dst.namesrv,
                    "sink.topic.template": "{topic}-copy", "epoch.max.ms": "1500",
                    "transforms": "tag", "transforms.tag.type": "InsertHeader",
                    "transforms.tag.header": "replicated-by", "transforms.tag.value.literal": "dc1"},
                   epochs=20, until=lambda r: r.stats.get("acknowledged", 0) >= 40)
    assert run.state == "RUNNING", run.trace
    got = [m for msgs in rocketmq_consume_all(dst, f"{topic}-copy").values() for m in msgs]
    assert len(got) == 40
    assert all(m.properties.get("replicated-by") == "dc1" and m.properties["src"] == "test" for m in got)


def test_a_predicate_with_negate_over_kafka(kafka_pair, unique):
    src, dst = kafka_pair
    keep, other = f"keep-{unique}", f"other-{unique}"
    for t in (keep, other):
        create_topic(src.bootstrap, t, 1)
        produce(src.bootstrap, t, [(b"k", f"{t}-{i}".encode()) for i in range(20)])
    # Filter applies where the topic does NOT match keep-.*: only keep-... reaches the target.
    run = run_pair(kafka_config(src.bootstrap, dst.bootstrap, f"{keep},{other}", **{
        "transforms": "onlyKeep", "transforms.onlyKeep.type": "Filter", "transforms.onlyKeep.predicate": "isKeep",
        "transforms.onlyKeep.negate": "true", "predicates": "isKeep", "predicates.isKeep.type": "TopicNameMatches",
        "predicates.isKeep.pattern": "keep-.*"}), epochs=20, until=delivered_all(40))
    assert run.state == "RUNNING", run.trace
    assert len(consume_all(dst.bootstrap, keep, [0], 20)) == 20
    assert run.stats["filtered"] == 20
    assert consume_all(dst.bootstrap, other, [0], 0, timeout=3) == []


PLUGIN = textwrap.dedent("""
    from connect.records import make_record
    from connect.transforms import Transformation, TransformError


    class Stamp(Transformation):
        '''Adds a header; refuses values holding "poison".'''

        def apply(self, r):
            if r.value is not None and b"poison" in r.value:
                raise TransformError("poisoned value")
            return make_record(r.topic, r.key, r.value, [*(r.headers or ()), ("stamped", b"yes")], r.timestamp,
                               r.source_partition, r.source_offset, r.partition, r.value_schema)
""")


@pytest.fixture
def stamp_plugin(tmp_path, monkeypatch):
    """A transform installed as a plugin: a distribution on sys.path declaring an entry point."""
    install_distribution(tmp_path, monkeypatch, "stamp-xf", {"stamp_xf": PLUGIN},
                         f"[{TRANSFORM_GROUP}]\nstamp = stamp_xf:Stamp\n")
    yield
    forget("stamp_xf")


def test_a_custom_transform_installed_as_a_plugin(kafka_pair, unique, stamp_plugin):
    src, dst = kafka_pair
    topic = f"plugin-{unique}"
    create_topic(src.bootstrap, topic, 1)
    produce(src.bootstrap, topic, [(b"k", f"v{i}".encode()) for i in range(25)])
    run = run_pair(kafka_config(src.bootstrap, dst.bootstrap, topic, **{
        "transforms": "s", "transforms.s.type": "stamp"}), epochs=20, until=delivered_all(25))
    assert run.state == "RUNNING", run.trace
    got = consume_all(dst.bootstrap, topic, [0], 25)
    assert len(got) == 25 and all(dict(m.headers())["stamped"] == b"yes" for m in got)


def test_a_transform_raising_on_one_record_of_10000(kafka_pair, unique, stamp_plugin):
    src, dst = kafka_pair
    topic, dlq = f"big-{unique}", f"big-dlq-{unique}"
    create_topic(src.bootstrap, topic, 2)
    messages = [(f"k{i}".encode(), b"poison" if i == 4321 else f"v{i}".encode()) for i in range(10_000)]
    produce(src.bootstrap, topic, messages, partitions=2)
    run = run_pair(kafka_config(src.bootstrap, dst.bootstrap, topic, **{
        "transforms": "s", "transforms.s.type": "stamp", "errors.deadletterqueue.topic.name": dlq}),
        dead_letters="sink", epochs=30, until=delivered_all(10_000))
    assert run.state == "RUNNING", run.trace
    assert run.stats["dead_lettered"] == 1
    dead = consume_all(dst.bootstrap, dlq, [0], 1)
    assert [m.key() for m in dead] == [b"k4321"]
    headers = dict(dead[0].headers())
    assert headers["__connect.errors.exception.message"].startswith(b"transforms.s (stamp) failed on record")
    assert b"poisoned value" in headers["__connect.errors.exception.message"]
    got = consume_all(dst.bootstrap, topic, [0, 1], 9_999)
    assert sorted(m.key() for m in got) == sorted(k for k, _ in messages if k != b"k4321")


def test_a_renamed_rocketmq_target_is_created_by_preparation_and_receives_every_record(
        kafka_pair, rocketmq_pair, spark, tmp_path, unique):
    """Kafka -> RocketMQ with auto.create.topics and a RegexRouter: the driver prepares the topic the
    records are renamed to (with the source's partition count), not the source's own name; nothing
    else creates it (the embedded broker does not create topics on send)."""
    src, _ = kafka_pair
    _, dst = rocketmq_pair
    topic = f"orders_{unique}"
    create_topic(src.bootstrap, topic, 3)
    produce(src.bootstrap, topic, [(f"k{i}".encode(), f"v{i}".encode()) for i in range(300)], partitions=3)
    driver = make_driver(spark, tmp_path, pair_pipeline(
        f"route-{unique}", {"connector.class": "kafka", "bootstrap.servers": src.bootstrap, "topics": topic,
                            "start.position": "earliest"},
        {"connector.class": "rocketmq", "namesrv.addr": dst.namesrv, "auto.create.topics": "true"},
        **{"transforms": "route", "transforms.route.type": "RegexRouter", "transforms.route.regex": "orders_(.*)",
           "transforms.route.replacement": "dc1_orders_$1"}))
    try:
        assert run_until(driver, 300) >= 300
    finally:
        driver.close()
    arrived = rocketmq_consume_all(dst, f"dc1_orders_{unique}")
    assert sorted(arrived) == [0, 1, 2]  # created with the source's partition count
    assert sorted(m.body for msgs in arrived.values() for m in msgs) == sorted(f"v{i}".encode() for i in range(300))
    with SyncRocketMQClient(dst.namesrv) as c, pytest.raises(TopicNotFoundError):
        c.topic_route(topic)  # the source's own name was not prepared
