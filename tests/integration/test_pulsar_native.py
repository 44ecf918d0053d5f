"""Kafka -> Pulsar on the batch-native path (``connect.batch``; the Pulsar sink's ``put_native``
sends from the consumed Kafka messages) over Apache Kafka and pulsar-lite: the native path writes what
the record path writes, a refused message in a native batch names its own record, and messages
abandoned after the sink's send timeout are reported as their own records, in put order, and
arrive in order once re-sent."""

from __future__ import annotations

import time

import attrs
from confluent_kafka import Producer
from kafka_util import consume_all as kafka_consume_all
from kafka_util import create_topic
from pipeline_util import first_copies_out_of_order, source_offsets
from pulsar_util import consume_all, wait_serving

from connect.errors import DeliveryError, RetriableError
from connect.records import partition_key
from connect.sink import SinkTaskContext
from connect.tasks.plan import PairPlan
from connect.tasks.policy import RunnerPolicy
from connect.tasks.results import RUNNING
from connect.tasks.runner import TaskPairRunner
from connectors.kafka import KafkaSourceTask
from connectors.kafka.native import KafkaCodec
from connectors.pulsar.sink import PulsarSinkTask

ORIGIN = "ROCKETMQ_REPLICATOR_SOURCE"


def _fill(bootstrap: str, topic: str, rows: list[tuple]) -> None:
    """``rows`` of (partition, key, value, headers, timestamp), in order; every one acknowledged."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "message.max.bytes": 10_000_000})
    failed = []
    for part, key, value, headers, ts in rows:
        p.produce(topic, value, key, partition=part, headers=headers, timestamp=ts,
                  on_delivery=lambda err, _msg: err and failed.append(err))
    assert p.flush(30) == 0 and not failed, failed


def _messages(bootstrap: str, topic: str, parts: int, n: int) -> list:
    msgs = kafka_consume_all(bootstrap, topic, range(parts), n)
    assert len(msgs) == n
    return msgs


def _sink(dst, extra: dict) -> PulsarSinkTask:
    config = {"service.url": dst.service_url, **extra}
    sink = PulsarSinkTask()
    sink.context = SinkTaskContext("pnative-0", config)
    sink.start(config, sink.context)
    sink.context.deadline = time.monotonic() + 60
    return sink


def _settle(sink: PulsarSinkTask, seconds: float = 30) -> None:
    done = sink.checkpoint()
    deadline = time.monotonic() + seconds
    while not done() and time.monotonic() < deadline:
        sink.wait_outcomes(0.1)
    assert done(), "every message sent has an outcome"


def test_the_native_path_writes_what_the_record_path_writes(kafka_pair, pulsar_pair, unique):
    """Tombstones, null and non-UTF-8 keys, no / some / null-valued / non-UTF-8 headers, an ordering
    key, timestamps, two partitions, a replication flow (origin chain appended by the native stage,
    one record from the target dropped): the same Pulsar messages, in the same order."""
    src, _ = kafka_pair
    _, dst = pulsar_pair
    topic, parts, n = f"pnateq-{unique}", 2, 1200
    rows = []
    for i in range(n):
        headers = [("i", str(i).encode()), ("h", None)] if i % 3 else None
        if i % 50 == 5:
            headers = [("bin", b"\xff\xfe"), ("pulsar.ordering.key", b"ok-%d" % i)]
        key = None if i % 7 == 0 else b"\xff%d" % i if i % 13 == 0 else f"k{i}".encode()
        value = None if i % 11 == 0 else f"v{i}".encode()
        rows.append((i % parts, key, value, headers, 1_700_000_000_000 + i))
    rows[10] = (0, b"k10", b"v", [(ORIGIN, b"X,Y"), ("z", b"1")], 1_700_000_000_010)
    rows[12] = (0, b"k12", b"v", [(ORIGIN, b"X,B")], 1_700_000_000_012)  # came from the target B: dropped
    create_topic(src.bootstrap, topic, parts)
    _fill(src.bootstrap, topic, rows)
    policy = RunnerPolicy(epoch_max_ms=1500, epoch_grace_ms=3000, retry_timeout_ms=20_000, retry_delay_max_ms=200,
                          source_alias="A", target_alias="B")
    out = {}
    for native in (True, False):
        target = f"persistent://public/default/{topic}-{'native' if native else 'records'}"
        runner = TaskPairRunner(PairPlan(
            connector=f"pnateq-{native}", task_id=0, source=KafkaSourceTask(), sink=PulsarSinkTask(),
            source_config={"bootstrap.servers": src.bootstrap, "topics": topic, "refresh.topics.interval.ms": "0",
                           "task.assignment": ",".join(f"{topic}:{p}" for p in range(parts))},
            sink_config={"service.url": dst.service_url, "topic": target},
            policy=attrs.evolve(policy, native_batches=native), offsets={}))
        committed, moved = {}, 0
        try:
            assert runner.source.context.native_batches is native
            for epoch in range(20):
                result = runner.run_epoch(epoch, max_ms=1500)
                assert result.state == RUNNING, result.trace
                committed.update(result.offsets)
                moved += result.stats["records"]
                runner.offsets_persisted()
                if moved >= n - 1 and not result.stats["in_flight"]:
                    break
        finally:
            runner.stop()
        assert moved == n - 1
        assert source_offsets(committed) == {partition_key({"topic": topic, "partition": p}): {"offset": n // parts - 1}
                             for p in range(parts)}
        got = consume_all(dst, target, 0, n - 1)[-1]
        out[native] = [(m.partition_key(), m.ordering_key(), m.properties(),
                        None if m.has_null_value() else m.data(), m.event_timestamp())
                       for m in got]
        assert len(out[native]) == n - 1
    assert out[True] == out[False]
    by_value = {v[3]: v for v in out[True]}
    assert by_value[b"v5"][1] == "ok-5" and by_value[b"v5"][2]["pulsar.base64.properties"] == "bin"
    assert by_value[b"v26"][2]["pulsar.key.base64"] == "true"
    assert by_value[b"v"][2] == {"z": "1", ORIGIN: "X,Y,A"}
    assert sum(v[3] is None for v in out[True]) == len([i for i in range(n) if i % 11 == 0])


def test_a_refused_message_in_a_native_batch_names_its_own_record(kafka_pair, pulsar_pair, unique):
    """A 5.4 MB message in the middle of a native batch is over Pulsar's 5 MB limit: exactly its
    own record is reported, permanent; the messages around it arrive."""
    src, _ = kafka_pair
    _, dst = pulsar_pair
    topic, target = f"pnatbig-{unique}", f"persistent://public/default/pnatbig-{unique}-out"
    create_topic(src.bootstrap, topic, 1, {"max.message.bytes": "10000000"})  # Apache Kafka: 1 MB by default
    _fill(src.bootstrap, topic, [(0, str(i).encode(), b"x" * 5_400_000 if i == 2 else f"small-{i}".encode(),
                                  [("h", b"1")], 1_700_000_000_000 + i) for i in range(5)])
    sp = {"topic": topic, "partition": 0}
    batch = KafkaCodec({topic: {0: sp}}).batch(_messages(src.bootstrap, topic, 1, 5))
    sink = _sink(dst, {"topic": target})
    try:
        sink.put_native(batch)
        _settle(sink)
        failed = sink.context.errant_record_reporter.take()
    finally:
        sink.stop()
    assert len(failed) == 1
    record, error = failed[0]
    assert record.source_offset == {"offset": 2} and record.key == b"2" and record.source_partition is sp
    assert isinstance(error, DeliveryError) and "MessageTooBig" in str(error)
    got = consume_all(dst, target, 0, 4)[-1]
    assert [m.partition_key() for m in got] == ["0", "1", "3", "4"]


def test_a_native_put_after_the_send_timeout_abandons_the_producer_and_reports_in_put_order(
        kafka_pair, pulsar_pair, unique):
    """The sink's own send timeout on the native path (a transient failure holds its partition):
    with the target frozen, every message without an outcome is reported transient as its own
    record, in put order, a native batch put then behind them; after the thaw the re-sent records
    arrive, first copies in source order."""
    src, _ = kafka_pair
    _, dst = pulsar_pair
    topic, target, n = f"pnatabandon-{unique}", f"persistent://public/default/pnatabandon-{unique}-out", 1200
    create_topic(src.bootstrap, topic, 1)
    pad = b"-" + b"x" * 8000  # outgrows the sockets' buffers while frozen: the client holds sends
    _fill(src.bootstrap, topic, [(0, str(i).encode(), b"%d" % i + pad, None, 1_700_000_000_000 + i)
                                 for i in range(n)])
    msgs = _messages(src.bootstrap, topic, 1, n)
    codec = KafkaCodec({topic: {0: {"topic": topic, "partition": 0}}})
    sink = _sink(dst, {"topic": target, "send.timeout.ms": "1500"})
    try:
        sink.put_native(codec.batch(msgs[:100]))  # connected, producer created
        _settle(sink)
        assert sink.context.errant_record_reporter.take() == []
        dst.freeze()
        try:
            for start in range(100, 1000, 300):
                sink.put_native(codec.batch(msgs[start:start + 300]))
            time.sleep(2.0)
            sink.put_native(codec.batch(msgs[1000:n]))  # the timeout is due: abandoned first, this batch behind
            failed = sink.context.errant_record_reporter.take()
        finally:
            dst.thaw()
        wait_serving(dst)  # the re-send below has the same 1.5 s send timeout
        keys = [int(r.key) for r, _ in failed]
        assert keys and keys == list(range(keys[0], n)), "reported in put order, each as its own record"
        assert [r.source_offset["offset"] for r, _ in failed] == [m.offset() for m in msgs[keys[0]:]]
        assert all(isinstance(e, RetriableError) for _, e in failed)
        sink.context.deadline = time.monotonic() + 60
        sink.put([r for r, _ in failed])  # the runner's re-send (records), through a new producer
        _settle(sink, 60)
        assert sink.context.errant_record_reporter.take() == []
    finally:
        dst.thaw()
        sink.stop()
    got = consume_all(dst, target, 0, n, ident=lambda m: m.partition_key())[-1]
    values = [int(m.partition_key()) for m in got]
    assert set(values) == set(range(n)) and first_copies_out_of_order(values) == 0
