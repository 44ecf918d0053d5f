"""TopicTail over the wire (the reader of the offset syncs a checkpoint connector translates with, and
of the heartbeats an emitter echoes): it reads the topic it is given by its exact name - one that
Kafka's default ``topics.exclude`` (``__.*|.*\\.internal``) matches too, as the README's
``offset-syncs.A.internal`` - including when the topic is created after the tail started; and a
topic still missing is reported once, not left to look like an idle one."""

from __future__ import annotations

import logging
import time

from kafka_util import create_topic, produce

from connectors.replicator.tail import TopicTail


def _read(tail: TopicTail, count: int, timeout: float = 60) -> list:
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < count and time.monotonic() < deadline:
        out += tail.poll(time.monotonic() + 0.5)
        time.sleep(0.05)
    return out


def test_a_tail_reads_an_internal_topic_created_after_it_started(kafka_pair, unique):
    _, b = kafka_pair
    topic = f"offset-syncs.{unique}.internal"
    tail = TopicTail("kafka", {"bootstrap.servers": b.bootstrap}, topic, f"{unique}-syncs", retry_s=0.2)
    try:
        assert tail.poll(time.monotonic() + 0.5) == [] and not tail.caught_up  # not there yet
        create_topic(b.bootstrap, topic, 2)
        produce(b.bootstrap, topic, 50, 2)
        got = _read(tail, 50)
        assert sorted(r.value for r in got) == sorted(f"value-{i}".encode() for i in range(50))
        assert tail.poll(time.monotonic() + 0.5) == [] and tail.caught_up
    finally:
        tail.close()


def test_a_tail_warns_once_when_its_topic_stays_missing(kafka_pair, unique, caplog):
    _, b = kafka_pair
    topic = f"never-{unique}"
    tail = TopicTail("kafka", {"bootstrap.servers": b.bootstrap}, topic, f"{unique}-t", retry_s=0.1, warn_s=0.5)
    try:
        with caplog.at_level(logging.WARNING, logger="connectors.replicator.tail"):
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                assert tail.poll(time.monotonic() + 0.1) == []
                time.sleep(0.05)
        warnings = [r.getMessage() for r in caplog.records if topic in r.getMessage()]
        assert len(warnings) == 1 and "not found in the kafka cluster" in warnings[0], warnings
    finally:
        tail.close()
