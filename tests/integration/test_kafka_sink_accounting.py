"""Kafka sink against a real broker: every outcome is tied to its own record, never found by content."""

from __future__ import annotations

import time

import pytest
from kafka_util import consume_all, create_topic

from connect.errors import DeliveryError, RetriableError
from connect.records import ConnectRecord
from connect.sink import SinkTaskContext
from connect.tasks.plan import PairPlan
from connect.tasks.policy import RunnerPolicy
from connect.tasks.runner import TaskPairRunner
from connect.testing import MemorySourceTask
from connectors.kafka import KafkaSinkConnector, KafkaSinkTask

SP = {"topic": "src", "partition": 0}


def _record(offset: int, value=b"same", key=b"k", headers=(("h", b"1"),), ts=1_700_000_000_000):
    return ConnectRecord("src", key, value, list(headers), ts, SP, {"offset": offset}, 0)


def _sink(bootstrap: str, topic: str, **extra) -> KafkaSinkTask:
    config = {"bootstrap.servers": bootstrap, "topic": topic, "producer.override.message.max.bytes": "2000", **extra}
    sink = KafkaSinkTask()
    sink.context = SinkTaskContext("accounting-0", config)
    sink.start(config, sink.context)
    sink.context.deadline = time.monotonic() + 30
    return sink


def test_records_identical_but_for_a_header_or_timestamp_are_told_apart(kafka_pair, unique):
    _, dst = kafka_pair
    topic = f"acct-{unique}"
    create_topic(dst.bootstrap, topic, 1)
    sink = _sink(dst.bootstrap, topic)
    same = _record(0)
    big_header = _record(1, headers=(("h", b"1"), ("pad", b"p" * 3000)))  # over message.max.bytes
    other_ts = _record(2, ts=1_700_000_000_999)
    try:
        sink.put([same, big_header, other_ts])
        assert sink.flush({}) is True
        failed = sink.context.errant_record_reporter.take()
    finally:
        sink.stop()
    assert len(failed) == 1
    record, error = failed[0]
    assert record is big_header  # the very record, not one that looks like it
    assert isinstance(error, DeliveryError) and "MSG_SIZE_TOO_LARGE" in str(error)
    got = consume_all(dst.bootstrap, topic, [0], 2)
    assert [(m.value(), m.timestamp()[1]) for m in got] == [(b"same", 1_700_000_000_000), (b"same", 1_700_000_000_999)]


def test_bytearray_and_memoryview_payloads_are_delivered(kafka_pair, unique):
    _, dst = kafka_pair
    topic = f"bytearray-{unique}"
    create_topic(dst.bootstrap, topic, 1)
    sink = _sink(dst.bootstrap, topic)
    try:
        sink.put([_record(0, value=bytearray(b"ba-value"), key=bytearray(b"ba-key")),
                  _record(1, value=memoryview(b"mv-value"), key=None)])
        assert sink.flush({}) is True
        assert sink.context.errant_record_reporter.take() == []
    finally:
        sink.stop()
    got = consume_all(dst.bootstrap, topic, [0], 2)
    assert [(m.key(), m.value()) for m in got] == [(b"ba-key", b"ba-value"), (None, b"mv-value")]


def test_a_delivery_report_reaches_exactly_the_record_it_was_bound_to(kafka_pair, unique):
    """The callback librdkafka calls is bound to its message at produce time (a delivery slot: the
    put's records and the index in them): a transient failure
    of one of two identical records marks that one, and is a RetriableError (held until the
    producer is abandoned, which the next wait for outcomes does)."""
    from confluent_kafka import KafkaError

    _, dst = kafka_pair
    sink = _sink(dst.bootstrap, f"bound-{unique}")
    a, b = _record(0), _record(1)
    try:
        timed_out = KafkaError(KafkaError._MSG_TIMED_OUT)

        class Msg:
            def topic(self):
                return "t"

            def partition(self):
                return 0

        done = sink.checkpoint()
        gen = sink._gen
        put = sink._puts.new(gen)  # as put() registers it
        gen.left = put.left = 1  # as after one produce bound to this checkpoint
        later = sink.checkpoint()
        assert sink._on_outcome([a, b], 1, put, timed_out, Msg()) is True  # held: counted once reported
        assert not later(), "a transient failure counts its checkpoint down once reported"
        sink.wait_outcomes(0)
        [(record, error)] = sink.context.errant_record_reporter.take()
    finally:
        sink.stop()
    assert done() and later(), "a failure is an outcome: the checkpoint completes"
    assert record is b and record is not a
    assert isinstance(error, RetriableError) and "_MSG_TIMED_OUT" in str(error)


class _Batch(MemorySourceTask):
    """Ten records of one partition in one poll; the sixth is too large for the target."""

    def poll(self):
        if self.next[0] >= 10:
            return []
        self.next[0] = 10
        sp = self.partitions[0]
        return [ConnectRecord(self.topic, str(i).encode(), (b"x" * 5000) if i == 5 else b"small",
                              [("i", str(i).encode())], 1_700_000_000_000, sp, {"offset": i}, 0) for i in range(10)]


@pytest.mark.parametrize("with_dlq", [True])
def test_a_failure_in_the_middle_of_a_batch_touches_only_that_record(kafka_pair, unique, with_dlq):
    _, dst = kafka_pair
    topic, dlq = f"mid-{unique}", f"mid-{unique}-dlq"
    create_topic(dst.bootstrap, topic, 1)
    sink_config = {"bootstrap.servers": dst.bootstrap, "topic": topic, "producer.override.message.max.bytes": "2000"}

    def dlq_factory():
        return KafkaSinkConnector.side_writer({"bootstrap.servers": dst.bootstrap}, dlq)

    runner = TaskPairRunner(PairPlan(connector="mid", task_id=0, source=_Batch(), sink=KafkaSinkTask(),
                                     source_config={"records": "10"}, sink_config=sink_config,
                                     policy=RunnerPolicy(epoch_max_ms=3000, epoch_max_records=10),
                                     dlq_factory=dlq_factory))
    results, committed = [], {}
    try:
        for epoch in range(5):  # acknowledgements still in flight at an epoch end count in the next
            results.append(runner.run_epoch(epoch))
            assert results[-1].state == "RUNNING", results[-1].trace
            committed.update(results[-1].offsets)
            if list(committed.values()) == [{"offset": 9}]:
                break
    finally:
        runner.stop()
    total = {k: sum(r.stats[k] for r in results) for k in ("dead_lettered", "retries", "transient")}
    assert total == {"dead_lettered": 1, "retries": 0, "transient": 0}
    assert list(committed.values()) == [{"offset": 9}]
    got = consume_all(dst.bootstrap, topic, [0], 9)
    assert [m.key() for m in got] == [str(i).encode() for i in range(10) if i != 5]  # each exactly once
    [dead] = consume_all(dst.bootstrap, dlq, [0], 1)
    assert dead.key() == b"5" and dict(dead.headers())["__connect.errors.offset"] == b"5"
