"""Every built-in sink writes tombstones (value None) and records without key over the wire, and
every broker's side writer keeps dead letters at least once (issue 25). Task pairs run here
without Spark (the runner alone), against Apache Kafka, pulsar-lite and Apache RocketMQ."""

from __future__ import annotations

import time

import pulsar_util
import pytest
import rocketmq_util
from kafka_util import consume_all, create_topic
from netproxy import TcpProxy

from connect.errors import RetriableError
from connect.records import ConnectRecord
from connect.tasks.plan import PairPlan
from connect.tasks.policy import RunnerPolicy
from connect.tasks.runner import TaskPairRunner
from connect.testing import MemorySinkTask, MemorySourceTask
from connectors.kafka import KafkaSinkConnector, KafkaSinkTask
from connectors.pulsar.sink import PulsarSinkConnector, PulsarSinkTask
from connectors.rocketmq.mapping import PLACEHOLDER, record_fields
from connectors.rocketmq.sink import RocketMQSinkConnector, RocketMQSinkTask
from connectors.rocketmq.sync_client import SyncRocketMQClient

RECORDS = [(b"k0", b"v0"), (b"k1", None), (None, b"v2"), (None, None), (b"k4", b"v4")]  # (key, value)


class _Given(MemorySourceTask):
    """The records of ``RECORDS`` (a class attribute may replace them), once, in one partition."""

    given = RECORDS

    def poll(self):
        if self.next[0] >= len(self.given):
            return []
        self.next[0] = len(self.given)
        sp = self.partitions[0]
        return [ConnectRecord(self.topic, k, v, [("i", str(i).encode())], 1_700_000_000_000 + i, sp, {"offset": i}, 0)
                for i, (k, v) in enumerate(self.given)]


def _run(sink, sink_config: dict, *, dlq=None, epochs: int = 6, until=None, retry_timeout_ms: int = 60_000):
    """Epochs of one pair until its partition committed every record (or ``until`` says so);
    (committed offsets, results). Never FAILED."""
    runner = TaskPairRunner(PairPlan(connector="tomb", task_id=0, source=_Given(), sink=sink,
                                     source_config={"records": str(len(_Given.given))}, sink_config=sink_config,
                                     policy=RunnerPolicy(epoch_max_ms=1500, epoch_max_records=100,
                                                retry_timeout_ms=retry_timeout_ms),
                                     dlq_factory=dlq))
    committed, results = {}, []
    try:
        for epoch in range(epochs):
            results.append(runner.run_epoch(epoch))
            assert results[-1].state == "RUNNING", results[-1].trace
            committed.update(results[-1].offsets)
            if (until or (lambda c: list(c.values()) == [{"offset": len(_Given.given) - 1}]))(committed):
                break
    finally:
        runner.stop()
    return committed, results


def test_kafka_sink_writes_tombstones_and_records_without_key(kafka_pair, unique):
    _, dst = kafka_pair
    topic = f"tomb-{unique}"
    create_topic(dst.bootstrap, topic, 1)
    _run(KafkaSinkTask(), {"bootstrap.servers": dst.bootstrap, "topic": topic})
    got = consume_all(dst.bootstrap, topic, [0], len(RECORDS))
    assert [(m.key(), m.value()) for m in got] == RECORDS  # a None value is a real tombstone


def test_pulsar_sink_writes_null_values_and_messages_without_key(pulsar_pair, unique):
    _, dst = pulsar_pair
    topic = f"persistent://public/default/tomb-{unique}"
    _run(PulsarSinkTask(), {"service.url": dst.service_url, "topic": topic})
    msgs = pulsar_util.consume_all(dst, topic, 0, len(RECORDS))[-1]
    assert [(m.partition_key() or None, m.data() or None, m.has_null_value()) for m in msgs] == [
        (k and k.decode(), v, v is None) for k, v in RECORDS]


def test_pulsar_sink_sends_an_empty_key_as_no_key(pulsar_pair, unique):
    """As the README says: pulsar-client sets only a non-empty partition key, so a record with an
    empty key becomes a message without key (read back as a record without key)."""
    _, dst = pulsar_pair
    topic = f"persistent://public/default/empty-key-{unique}"
    _Given.given = [(b"", b"v0"), (b"k1", b"v1")]
    try:
        _run(PulsarSinkTask(), {"service.url": dst.service_url, "topic": topic})
    finally:
        _Given.given = RECORDS
    msgs = pulsar_util.consume_all(dst, topic, 0, 2)[-1]
    assert [(m.partition_key(), m.data()) for m in msgs] == [("", b"v0"), ("k1", b"v1")]


def test_rocketmq_sink_marks_tombstones_so_the_source_restores_them(rocketmq_pair, unique):
    """RocketMQ has no null or empty body (Apache's broker fails on an empty one): a tombstone is a
    one-byte body with CONNECT_NULL_VALUE=true, an empty value the same body with
    CONNECT_EMPTY_VALUE=true, and the RocketMQ source's mapping reads them back as a record without
    value (RocketMQ -> Kafka keeps the tombstone) and as an empty value."""
    _, dst = rocketmq_pair
    topic = f"tomb-{unique}"[:60].replace(".", "-")
    with SyncRocketMQClient(dst.namesrv) as c:
        c.create_topic(dst.broker_addr, topic, 1, 1)
    given = [*RECORDS, (b"k5", b"")]
    _Given.given = given
    try:
        _run(RocketMQSinkTask(), {"namesrv.addr": dst.namesrv, "topic": topic})
    finally:
        _Given.given = RECORDS
    msgs = rocketmq_util.consume_all(dst, topic)[0]
    assert [m.body for m in msgs] == [v or PLACEHOLDER for _, v in given]
    assert [m.properties.get("CONNECT_NULL_VALUE") for m in msgs] == [None, "true", None, "true", None, None]
    assert [m.properties.get("CONNECT_EMPTY_VALUE") for m in msgs] == [None] * 5 + ["true"]
    assert ["KEYS" in m.properties for m in msgs] == [k is not None for k, _ in given]
    assert [record_fields(m)[:2] for m in msgs] == given


def _read_kafka(broker, topic):
    return [(m.key(), m.value(), dict(m.headers())) for m in consume_all(broker.bootstrap, topic, [0], 1)]


def _read_pulsar(broker, topic):
    msgs = pulsar_util.consume_all(broker, f"persistent://public/default/{topic}", 0, 1)[-1]
    return [(m.partition_key().encode(), m.data(), {k: v.encode() for k, v in m.properties().items()}) for m in msgs]


def _read_rocketmq(broker, topic):
    msgs = [m for q in rocketmq_util.consume_all(broker, topic).values() for m in q]
    return [(k, v, dict(h)) for k, v, h, _ in map(record_fields, msgs)]


SIDE = {
    "kafka": (KafkaSinkConnector, "kafka_pair", lambda b: {"bootstrap.servers": b.bootstrap}, _read_kafka),
    "pulsar": (PulsarSinkConnector, "pulsar_pair", lambda b: {"service.url": b.service_url}, _read_pulsar),
    "rocketmq": (RocketMQSinkConnector, "rocketmq_pair", lambda b: {"namesrv.addr": b.namesrv}, _read_rocketmq),
}


@pytest.mark.parametrize("broker", list(SIDE))
def test_side_writer_keeps_dead_letters_in_its_cluster(broker, request, unique):
    """A record the (memory) sink refuses for good goes to a dead-letter topic written by the broker
    sink's side writer (a topic that does not exist yet): acknowledged before the offset moves."""
    connector, fixture, keys, read = SIDE[broker]
    _, dst = request.getfixturevalue(fixture)
    dlq_topic = f"dlq-{unique}"[:60].replace(".", "-").replace("[", "-").replace("]", "")
    sink_name = f"side-{unique}"
    committed, results = _run(MemorySinkTask(), {"name": sink_name, "reject.values": "^v2$"},
                              dlq=lambda: connector.side_writer(keys(dst), dlq_topic))
    assert committed == {next(iter(committed)): {"offset": len(RECORDS) - 1}}
    assert sum(r.stats["dead_lettered"] for r in results) == 1
    [(key, value, headers)] = read(dst, dlq_topic)
    assert (key, value) == (b"" if broker == "pulsar" else None, b"v2")  # a Pulsar key is a string
    assert headers["__connect.errors.offset"] == b"2" and headers["i"] == b"2"
    assert headers["__connect.errors.exception.message"] == b"memory sink rejected b'v2'"
    MemorySinkTask.written.pop(sink_name, None)


def test_a_dead_letter_topic_out_of_reach_holds_the_record_and_its_offset(unique):
    """Transient trouble writing a dead letter is never a resolution: the failed record stays
    unresolved, its partition's offset stays before it, and the pair is not FAILED."""
    sink_name = f"held-{unique}"
    t0 = time.monotonic()
    committed, results = _run(MemorySinkTask(), {"name": sink_name, "reject.values": "^v2$"},
                              dlq=lambda: KafkaSinkConnector.side_writer({"bootstrap.servers": "127.0.0.1:1"}, "dlq"),
                              epochs=2, until=lambda c: False)
    assert time.monotonic() - t0 < 30
    assert list(committed.values()) in ([], [{"offset": 1}])  # never past the refused record at offset 2
    assert sum(r.stats["dead_lettered"] for r in results) == 0
    MemorySinkTask.written.pop(sink_name, None)


UNREACHABLE = {
    "kafka": (KafkaSinkConnector, {"bootstrap.servers": "127.0.0.1:1"}),
}


@pytest.mark.parametrize("broker", list(UNREACHABLE))
def test_a_side_writer_out_of_reach_fails_each_record_as_transient_by_its_deadline(broker):
    """A side writer that cannot reach its cluster (here: nothing listens) never raises from
    ``send``: every record gets a transient failure of its own, and ``write`` returns by its
    deadline, every time."""
    connector, keys = UNREACHABLE[broker]
    writer = connector.side_writer(keys, f"unreachable-{broker}")
    records = [ConnectRecord("t", b"k", b"v%d" % i, None, 0, {"partition": 0}, {"offset": i}, 0) for i in range(3)]
    try:
        for _ in range(3):
            t0 = time.monotonic()
            failed, complete = writer.write(records, t0 + 1.0)
            assert time.monotonic() - t0 < 1.5
            assert [r for r, _ in failed] == records
            assert all(isinstance(e, RetriableError) for _, e in failed), failed
    finally:
        writer.close()


@pytest.mark.parametrize("broker", list(SIDE))
def test_a_side_writer_cut_off_from_its_cluster_waits_no_longer_than_its_deadline(broker, request, unique):
    """Its cluster behind a blackholed proxy (a partition: connections hang, nothing answers), a
    side writer gives each record a transient failure by the deadline of every write (opening a
    producer or looking a route up never waits longer), and writes once the network heals."""
    connector, fixture, keys, read = SIDE[broker]
    _, dst = request.getfixturevalue(fixture)
    [(key, address)] = keys(dst).items()
    port = int(address.rsplit(":", 1)[1])
    proxy = TcpProxy(port)
    proxy.blackhole()
    topic = f"cut-{unique}"[:60].replace(".", "-").replace("[", "-").replace("]", "")
    writer = connector.side_writer({key: address.replace(f":{port}", f":{proxy.port}")}, topic)
    record = ConnectRecord("t", b"k", b"v", [("h", b"1")], 0, {"partition": 0}, {"offset": 0}, 0)
    try:
        for _ in range(3):
            t0 = time.monotonic()
            failed, _complete = writer.write([record], t0 + 1.0)
            assert time.monotonic() - t0 < 1.6
            assert [r for r, _ in failed] == [record]
            assert isinstance(failed[0][1], RetriableError), failed
        proxy.restore()
        todo, complete, until = [record], False, time.monotonic() + 60
        while (todo or not complete) and time.monotonic() < until:
            failed, complete = writer.write(todo, time.monotonic() + 2)
            assert all(isinstance(e, RetriableError) for _, e in failed), failed
            todo = [r for r, _ in failed]
            if todo:
                time.sleep(0.2)
        assert not todo and complete
    finally:
        writer.close()
        proxy.close()
    [(k, v, headers)] = read(dst, topic)
    assert (k, v, headers["h"]) == (b"k", b"v", b"1")


class _SilentProducer:
    """A producer that takes records and never reports on them, even once purged (its reports
    lost); every wait lasts its whole timeout."""

    def produce(self, *args, **kwargs):
        pass

    def poll(self, timeout=0):
        time.sleep(timeout)
        return 0

    def flush(self, timeout=0):
        time.sleep(timeout)
        return 1

    def purge(self, *args, **kwargs):
        pass


def test_kafka_side_writer_fails_records_whose_reports_are_lost_and_waits_no_longer_than_asked():
    """A producer dropped (fatal error) with reports that never come: its records get transient
    failures then and there, so a flush is complete at once instead of spinning to its deadline
    with records that can never settle; close() does not wait either."""
    writer = KafkaSinkConnector.side_writer({"bootstrap.servers": "127.0.0.1:1"}, "lost")
    writer._opened, writer._producer = True, _SilentProducer()
    records = [ConnectRecord("t", None, b"v%d" % i, None, 0, {"partition": 0}, {"offset": i}, 0) for i in range(3)]
    writer.send(records, time.monotonic() + 1)
    writer._broken = True  # as a fatal delivery report or poll error marks it
    t0 = time.monotonic()
    assert writer.flush(t0 + 3) is True
    assert time.monotonic() - t0 < 1
    failed = writer.take_failures()
    assert [r for r, _ in failed] == records and all(isinstance(e, RetriableError) for _, e in failed)
    writer._producer = _SilentProducer()
    writer.send(records, time.monotonic() + 1)
    t0 = time.monotonic()
    writer.close()
    assert time.monotonic() - t0 < 0.5


def test_kafka_side_writer_holds_as_many_records_without_outcome_as_its_producer_queue():
    """The Kafka writer's bound on records without an outcome is its producer's queue
    (queue.buffering.max.messages, as the sink's), as the Pulsar and RocketMQ writers take their
    sink's max.pending.messages: beyond it, a record waits for room until the deadline, then fails
    as transient."""
    writer = KafkaSinkConnector.side_writer({"bootstrap.servers": "127.0.0.1:1",
                                             "producer.override.queue.buffering.max.messages": "2"}, "bounded")
    writer._opened, writer._producer = True, _SilentProducer()
    records = [ConnectRecord("t", None, b"v%d" % i, None, 0, {"partition": 0}, {"offset": i}, 0) for i in range(3)]
    writer.send(records, time.monotonic() + 0.3)
    [(record, error)] = writer.take_failures()
    assert record is records[2] and isinstance(error, RetriableError)
    writer._producer = None  # nothing to drop: the silent producer was never the pool's
