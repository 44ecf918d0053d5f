"""Kafka -> Kafka on the batch-native path (``connect.batch``, ``connectors.kafka.native``) over two
Apache Kafka brokers: a failed delivery names its own record, one bad record goes alone to the dead-letter
topic with exact offsets, the native path writes what the record path writes, and both wait for
room in a full producer queue until the deadline, then report what is left transient."""

from __future__ import annotations

import time

import attrs
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka_brokers import kafka_broker
from kafka_util import consume_all, create_topic
from pipeline_util import first_copies_out_of_order, source_offsets

from connect.errors import DeliveryError, RetriableError
from connect.records import partition_key
from connect.sink import SinkTaskContext
from connect.tasks.plan import PairPlan
from connect.tasks.policy import RunnerPolicy
from connect.tasks.results import RUNNING
from connect.tasks.runner import TaskPairRunner
from connectors.kafka import KafkaSinkConnector, KafkaSinkTask, KafkaSourceTask
from connectors.kafka.native import KafkaCodec

BIG = ("pad", b"p" * 3000)  # over the sink's message.max.bytes (2000) below, not over the DLQ's


def _fill(bootstrap: str, topic: str, rows: list[tuple]) -> None:
    """``rows`` of (partition, key, value, headers, timestamp), in order."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for part, key, value, headers, ts in rows:
        p.produce(topic, value, key, partition=part, headers=headers, timestamp=ts)
    assert p.flush(30) == 0


def _rows(n: int, parts: int, big: set[int] = frozenset()) -> list[tuple]:
    rows = []
    for i in range(n):
        headers = [("i", str(i).encode()), ("h", None)] if i % 3 else None
        if i in big:
            headers = [("i", str(i).encode()), BIG]
        key = None if i % 7 == 0 else f"k{i}".encode()
        value = None if i % 11 == 0 else b"same"  # tombstones; identical values otherwise
        rows.append((i % parts, key, value, headers, 1_700_000_000_000 + i))
    return rows


def _pair(src: str, dst: str, topic: str | list[str], parts: int, policy: RunnerPolicy, sink_extra: dict,
          dlq: str | None = None):
    topics = [topic] if isinstance(topic, str) else topic
    source_config = {"bootstrap.servers": src, "topics": ",".join(topics), "refresh.topics.interval.ms": "0",
                     "task.assignment": ",".join(f"{t}:{p}" for t in topics for p in range(parts))}
    sink_config = {"bootstrap.servers": dst, **sink_extra}
    factory = (lambda: KafkaSinkConnector.side_writer({"bootstrap.servers": dst}, dlq)) if dlq else None
    return TaskPairRunner(PairPlan(connector=f"native-{topics[0]}", task_id=0, source=KafkaSourceTask(), sink=KafkaSinkTask(),
                                   source_config=source_config, sink_config=sink_config, policy=policy, offsets={},
                                   dlq_factory=factory))


def _run(runner: TaskPairRunner, until: int, epochs: int = 20) -> tuple[dict, int]:
    committed, moved = {}, 0
    for epoch in range(epochs):
        result = runner.run_epoch(epoch, max_ms=1500)
        assert result.state == RUNNING, result.trace
        committed.update(result.offsets)
        moved += result.stats["records"]
        runner.offsets_persisted()
        if moved >= until and not result.stats["in_flight"]:
            break
    return committed, moved


def _consume(bootstrap: str, topic: str, parts: int, n: int) -> list:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "native", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(parts)])
    msgs: list = []
    deadline = time.monotonic() + 30
    while len(msgs) < n and time.monotonic() < deadline:
        msgs.extend(m for m in c.consume(1000, 0.5) if m.error() is None)
    c.close()
    assert len(msgs) == n
    return msgs


def _policy(**kw) -> RunnerPolicy:
    return RunnerPolicy(epoch_max_ms=1500, epoch_grace_ms=3000, retry_timeout_ms=20_000, retry_delay_max_ms=200, **kw)


def test_a_failed_delivery_in_a_native_batch_names_its_own_record(kafka_pair, unique):
    src, dst = kafka_pair
    topic, target = f"nat-{unique}", f"nat-{unique}-out"
    create_topic(src.bootstrap, topic, 1)
    create_topic(dst.bootstrap, target, 1)
    rows = [(0, b"k", b"same", [("h", b"1")], 1_700_000_000_000)] * 3
    rows[1] = (0, b"k", b"same", [("h", b"1"), BIG], 1_700_000_000_000)  # identical but for a header
    _fill(src.bootstrap, topic, rows)
    c = Consumer({"bootstrap.servers": src.bootstrap, "group.id": "native", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    msgs: list = []
    deadline = time.monotonic() + 30
    while len(msgs) < 3 and time.monotonic() < deadline:
        msgs.extend(c.consume(10, 0.5))
    c.close()
    sp = {"topic": topic, "partition": 0}
    batch = KafkaCodec({topic: {0: sp}}).batch(msgs)
    assert batch is not None and batch.last[id(sp)].source_offset == {"offset": 2}
    config = {"bootstrap.servers": dst.bootstrap, "topic": target, "producer.override.message.max.bytes": "2000"}
    sink = KafkaSinkTask()
    sink.context = SinkTaskContext("native-0", config)
    sink.start(config, sink.context)
    sink.context.deadline = time.monotonic() + 30
    try:
        sink.put_native(batch)
        assert sink.flush({}) is True
        failed = sink.context.errant_record_reporter.take()
    finally:
        sink.stop()
    assert len(failed) == 1
    record, error = failed[0]
    assert record.source_offset == {"offset": 1} and record.headers == [("h", b"1"), BIG]
    assert isinstance(error, DeliveryError) and "MSG_SIZE_TOO_LARGE" in str(error)
    got = consume_all(dst.bootstrap, target, [0], 2)
    assert [(m.key(), m.value(), m.headers()) for m in got] == [(b"k", b"same", [("h", b"1")])] * 2


def test_a_native_pair_sends_one_bad_record_alone_to_the_dead_letter_topic_with_exact_offsets(kafka_pair, unique):
    src, dst = kafka_pair
    topic, dlq, parts, n = f"natdlq-{unique}", f"natdlq-{unique}-dlq", 2, 3000
    create_topic(src.bootstrap, topic, parts)
    _fill(src.bootstrap, topic, _rows(n, parts, big={1501}))
    runner = _pair(src.bootstrap, dst.bootstrap, topic, parts, _policy(),
                   {"topic": f"{topic}-out", "producer.override.message.max.bytes": "2000"}, dlq)
    try:
        assert runner.source.context.native_batches is True
        committed, moved = _run(runner, n)
    finally:
        runner.stop()
    assert moved == n
    assert source_offsets(committed) == {partition_key({"topic": topic, "partition": p}): {"offset": n // parts - 1}
                         for p in range(parts)}
    dead = consume_all(dst.bootstrap, dlq, [0], 1)
    assert [(m.key(), m.headers()[:2]) for m in dead] == [(b"k1501", [("i", b"1501"), BIG])]
    delivered = consume_all(dst.bootstrap, f"{topic}-out", range(parts), n - 1)
    assert len(delivered) == n - 1 and b"k1501" not in {m.key() for m in delivered}


@pytest.mark.parametrize("topics", [1, 2])
def test_the_native_path_writes_what_the_record_path_writes(kafka_pair, unique, topics):
    """Same input (tombstones, null keys, no/some/null-valued headers, timestamps, two partitions;
    one source topic, or two read by one task), a replication flow (origin chain, prefix naming):
    the same target records, in the same order."""
    src, dst = kafka_pair
    names, parts, n = [f"nateq{t}-{unique}" for t in range(topics)], 2, 2000
    rows = _rows(n, parts)
    rows[10] = (0, b"k10", b"v", [("ROCKETMQ_REPLICATOR_SOURCE", b"X,Y"), ("z", b"1")], 1_700_000_000_010)
    rows[12] = (0, b"k12", b"v", [("ROCKETMQ_REPLICATOR_SOURCE", b"X,B")], 1_700_000_000_012)  # came from B: dropped
    for name in names:
        create_topic(src.bootstrap, name, parts)
        _fill(src.bootstrap, name, rows)
    policy = attrs.evolve(_policy(topic_policy="prefix"), source_alias="A", target_alias="B")
    out = {}
    for native in (True, False):
        suffix = "native" if native else "records"
        for name in names:
            create_topic(dst.bootstrap, f"A.{name}-{suffix}", parts)
        runner = _pair(src.bootstrap, dst.bootstrap, names, parts, attrs.evolve(policy, native_batches=native),
                       {"topic.template": "{topic}-" + suffix})
        try:
            assert runner.source.context.native_batches is native
            _, moved = _run(runner, (n - 1) * topics)
        finally:
            runner.stop()
        assert moved == (n - 1) * topics  # one of each topic came from the target
        out[native] = {}
        for name in names:
            got = consume_all(dst.bootstrap, f"A.{name}-{suffix}", range(parts), n - 1)
            out[native][name] = sorted(((m.partition(), m.offset()), (m.key(), m.value(), m.headers(), m.timestamp()))
                                       for m in got)
            assert len(out[native][name]) == n - 1
    assert out[True] == out[False]
    by_key = {v[0]: v for _, v in out[True][names[0]]}
    assert by_key[b"k10"][2] == [("z", b"1"), ("ROCKETMQ_REPLICATOR_SOURCE", b"X,Y,A")]
    assert b"k12" not in by_key


def test_a_native_put_after_the_delivery_timeout_abandons_the_producer_and_reports_in_put_order(
        kafka_pair, proxied_target, unique):
    """The sink's own delivery timeout (part of the rule that a transient failure holds its
    partition) on the native path: every message without an outcome is reported transient, as its
    own record, in put order across partitions, a native batch put at that moment after them; a
    fresh producer then delivers the re-sent records, in order."""
    src, _ = kafka_pair
    broker, proxy = proxied_target
    topic, target = f"natabandon-{unique}", f"natabandon-{unique}-out"
    create_topic(src.bootstrap, topic, 2)
    create_topic(broker.bootstrap, target, 2)
    _fill(src.bootstrap, topic, [(i % 2, str(i).encode(), f"v-{i}".encode(), None, 1_700_000_000_000 + i)
                                 for i in range(1200)])
    msgs = sorted(_consume(src.bootstrap, topic, 2, 1200), key=lambda m: int(m.key()))
    codec = KafkaCodec({topic: {p: {"topic": topic, "partition": p} for p in (0, 1)}})
    config = {"bootstrap.servers": broker.bootstrap, "topic": target, "producer.override.message.timeout.ms": "2000"}
    sink = KafkaSinkTask()
    sink.context = SinkTaskContext("natabandon-0", config)
    sink.start(config, sink.context)
    sink.context.deadline = time.monotonic() + 60
    try:
        sink.put_native(codec.batch(msgs[:100]))  # connected, with metadata
        first = sink.checkpoint()
        while not first():
            sink.wait_outcomes(0.1)
        assert sink.context.errant_record_reporter.take() == []
        proxy.blackhole()
        for start in range(100, 1000, 300):
            sink.put_native(codec.batch(msgs[start:start + 300]))
        sink.wait_outcomes(1.0)
        assert sink.context.errant_record_reporter.take() == []  # not yet timed out
        time.sleep(1.2)
        sink.put_native(codec.batch(msgs[1000:1200]))  # the timeout is due: abandoned first, this batch behind
        second = sink.checkpoint()
        assert second(), "every record has an outcome: the abandoned ones are reported"
        failed = sink.context.errant_record_reporter.take()
        assert [r.key for r, _ in failed] == [str(i).encode() for i in range(100, 1200)], "reported in put order"
        assert [r.source_offset["offset"] for r, _ in failed] == [m.offset() for m in msgs[100:1200]]
        assert all(isinstance(e, RetriableError) for _, e in failed)
        proxy.restore()
        sink.put([r for r, _ in failed])  # the runner's re-send (records), to the fresh producer
        third = sink.checkpoint()
        deadline = time.monotonic() + 30
        while not third() and time.monotonic() < deadline:
            sink.wait_outcomes(0.1)
        assert third() and sink.context.errant_record_reporter.take() == []
    finally:
        proxy.restore()
        sink.stop()
    got = consume_all(broker.bootstrap, target, [0, 1], 1200)
    for p in (0, 1):
        values = [int(m.value().decode().split("-")[1]) for m in got if m.partition() == p]
        assert first_copies_out_of_order(values) == 0 and set(values) == set(range(p, 1200, 2))


@pytest.mark.parametrize("native", [True, False])
def test_a_full_producer_queue_is_waited_for_and_what_does_not_fit_by_the_deadline_is_transient(kafka_pair, unique,
                                                                                                 native):
    """queue.buffering.max.messages=5, on the native path and the record path alike: a put of 300
    waits for room again and again and delivers them all, in order; with the target frozen, what
    does not fit by the deadline is reported transient, each saying how many were not sent."""
    src, _ = kafka_pair
    topic, target, n, late = f"full-{unique}", f"full-{unique}-out", 300, 20
    create_topic(src.bootstrap, topic, 1)
    _fill(src.bootstrap, topic, [(0, f"k{i}".encode(), f"v{i}".encode(), None, 1_700_000_000_000 + i)
                                 for i in range(n + late)])
    msgs = _consume(src.bootstrap, topic, 1, n + late)
    codec = KafkaCodec({topic: {0: {"topic": topic, "partition": 0}}})
    first, then = codec.batch(msgs[:n]), codec.batch(msgs[n:])
    with kafka_broker() as dst:
        create_topic(dst.bootstrap, target, 1)
        config = {"bootstrap.servers": dst.bootstrap, "topic": target,
                  "producer.override.queue.buffering.max.messages": "5"}
        sink = KafkaSinkTask()
        sink.context = SinkTaskContext("full-0", config)
        sink.start(config, sink.context)
        reporter = sink.context.errant_record_reporter
        try:
            sink.context.deadline = time.monotonic() + 30
            sink.put_native(first) if native else sink.put(first.records())
            assert sink.flush({}) is True
            assert reporter.take() == []
            dst.freeze()
            try:
                sink.context.deadline = time.monotonic() + 1
                sink.put_native(then) if native else sink.put(then.records())
                failed = reporter.take()
            finally:
                dst.thaw()
            sink.context.deadline = time.monotonic() + 30
            assert sink.flush({}) is True
            assert reporter.take() == []
        finally:
            sink.stop()
        assert [r.source_offset["offset"] for r, _ in failed] == list(range(n + 5, n + late))  # 5 fit in the queue
        assert {str(e) for _, e in failed} == {f"producer queue full (queue.buffering.max.messages) until the epoch "
                                               f"deadline; {late - 5} record(s) not sent yet"}
        assert all(isinstance(e, RetriableError) for _, e in failed)
        got = consume_all(dst.bootstrap, target, [0], n + 5)
        assert [m.value() for m in got] == [f"v{i}".encode() for i in range(n + 5)]
