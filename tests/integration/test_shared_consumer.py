"""One Kafka consumer shared by several source tasks of a process (connectors.kafka.shared), over the
wire against Apache Kafka (or tansu): each task gets exactly its partitions in order, concurrent pollers hand each
other what they fetch, a task that stops polling is paused at its bound while the others flow, and
a task re-subscribed from an earlier offset gets those records again, nothing fetched for its
previous position."""

from __future__ import annotations

import contextlib
import threading
import time

from confluent_kafka import TopicPartition
from kafka_brokers import use_apache_kafka
from kafka_util import create_topic, produce

from connectors.kafka.shared import SharedConsumers


def _conf(bootstrap: str) -> dict:
    return {"bootstrap.servers": bootstrap, "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100, "group.id": "ignored-per-task"}


@contextlib.contextmanager
def _one_topic(kafka_pair, topic: str, records: int):
    """``topic`` (1 partition) with ``records`` records, and the shared consumer for the source."""
    src, _ = kafka_pair
    create_topic(src.bootstrap, topic, 1)
    produce(src.bootstrap, topic, records, 1)
    shared = SharedConsumers()
    try:
        yield shared.get(_conf(src.bootstrap))
    finally:
        shared.close_all()


def _read(sub, expected: int, timeout: float = 30.0) -> list[int]:
    out: list[int] = []
    deadline = time.monotonic() + timeout
    while len(out) < expected and time.monotonic() < deadline:
        for m in sub.take(500, 0.1):
            assert m.error() is None, m.error()
            out.append(int(m.value().split(b"-")[1]))
    return out


def test_tasks_share_one_consumer_each_gets_its_partitions_in_order(kafka_pair, unique):
    src, _ = kafka_pair
    topics = [f"{unique}-{i}" for i in range(3)]
    for t in topics:
        create_topic(src.bootstrap, t, 2)
        produce(src.bootstrap, t, 2000, 2)
    shared = SharedConsumers()
    try:
        one = shared.get(_conf(src.bootstrap))
        # another task's settings differ only by its group.id: the same consumer
        assert shared.get({**_conf(src.bootstrap), "group.id": "other-task"}) is one
        subs = [one.subscribe([TopicPartition(t, p, 0) for p in (0, 1)], 100) for t in topics]
        got: list[list[int]] = [[] for _ in subs]
        threads = [threading.Thread(target=lambda i=i: got[i].extend(_read(subs[i], 2000))) for i in range(3)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
        for i, values in enumerate(got):
            assert sorted(values) == list(range(2000)), f"task {i}: {len(values)} records"
            for part in (0, 1):  # per partition, in offset order
                mine = [v for v in values if v % 2 == part]
                assert mine == sorted(mine)
    finally:
        shared.close_all()


def test_a_task_that_stops_polling_is_paused_at_its_bound_and_the_others_flow(kafka_pair, unique):
    src, _ = kafka_pair
    slow_t, fast_t = f"{unique}-slow", f"{unique}-fast"
    for t in (slow_t, fast_t):
        create_topic(src.bootstrap, t, 1)
    produce(src.bootstrap, slow_t, 5000, 1)
    produce(src.bootstrap, fast_t, 3000, 1)
    shared = SharedConsumers()
    try:
        consumer = shared.get(_conf(src.bootstrap))
        slow = consumer.subscribe([TopicPartition(slow_t, 0, 0)], 200)
        fast = consumer.subscribe([TopicPartition(fast_t, 0, 0)], 200)
        assert _read(fast, 3000) == list(range(3000))  # led by the fast task alone
        # what was fetched for the slow task waits for it, bounded: paused at 200 (+ one fetch)
        assert slow.paused
        assert 200 <= len(slow.buffer) <= 200 + 500, len(slow.buffer)
        produce(src.bootstrap, fast_t, 1000, 1, start=3000)
        assert _read(fast, 1000) == list(range(3000, 4000))
        assert len(slow.buffer) <= 200 + 500
        # polling again resumes it, and nothing was skipped while it was paused
        assert _read(slow, 5000) == list(range(5000))
        assert not slow.paused
    finally:
        shared.close_all()


def test_a_task_resubscribed_from_an_earlier_offset_gets_those_records_again(kafka_pair, unique):
    topic = f"{unique}-again"
    with _one_topic(kafka_pair, topic, 3000) as consumer:
        other = consumer.subscribe([], 100)  # keeps the consumer shared (routing, not the lone fast path)
        first = consumer.subscribe([TopicPartition(topic, 0, 0)], 500)
        assert _read(first, 2500)[:2500] == list(range(2500))
        assert first.positions[(topic, 0)] >= 2500
        first.close()  # a restart from committed offset 999: the records after it come again
        again = consumer.subscribe([TopicPartition(topic, 0, 1000)], 500)
        assert _read(again, 2000) == list(range(1000, 3000))
        assert again.take(500, 0.5) == []
        other.close()
        again.close()
        assert consumer.idle_since is not None


def test_calls_beside_a_polling_task_do_not_wait_for_its_fetch_loop(kafka_pair, unique):
    """confluent-kafka 2.16: get_watermark_offsets / position from one thread while another loops in
    consume() waits until the loop stops. Through ``locked`` they wait for one fetch at most."""
    topic = f"{unique}-calls"
    with _one_topic(kafka_pair, topic, 10) as consumer:
        busy = consumer.subscribe([TopicPartition(topic, 0, 0)], 100)
        stop = threading.Event()
        poller = threading.Thread(target=lambda: [busy.take(100, 0.1) for _ in iter(stop.is_set, True)])
        poller.start()
        try:
            time.sleep(0.5)
            highs: list[int] = []
            caller = threading.Thread(target=lambda: highs.extend(
                busy.consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1] for _ in range(5)),
                daemon=True)  # a daemon: if the call hangs, the test fails instead of hanging
            caller.start()
            caller.join(5)
            assert not caller.is_alive(), "a call waited for the fetch loop"
            # exact on Apache Kafka; tansu answers the base offset of the last batch + 1
            assert highs == [10] * 5 if use_apache_kafka() else len(highs) == 5 and min(highs) >= 1
        finally:
            stop.set()
            poller.join(10)
        assert busy.positions[(topic, 0)] == 10


def test_two_connectors_reading_one_partition_get_a_consumer_each(kafka_pair, unique):
    """A mirror and a monitor of one topic: the same partition through two shared consumers, each
    task every record."""
    topic = f"{unique}-twice"
    with _one_topic(kafka_pair, topic, 500) as first_consumer:
        src, _ = kafka_pair
        shared = SharedConsumers()
        try:
            a = shared.get(_conf(src.bootstrap), [(topic, 0)])
            b = shared.get(_conf(src.bootstrap), [(topic, 0)])  # reserved by a, not subscribed yet
            assert a is not b
            subs = [c.subscribe([TopicPartition(topic, 0, 0)], 100) for c in (a, b)]
            assert [_read(s, 500) for s in subs] == [list(range(500))] * 2
            assert shared.get(_conf(src.bootstrap), [(f"{topic}-other", 0)]) is a  # no overlap: shared
        finally:
            shared.close_all()
        assert first_consumer.partitions() == set()


def test_a_busy_source_task_leaves_the_shared_consumer_and_loses_nothing(kafka_pair, unique, caplog):
    """Two Kafka source tasks of one process (an idle topic, a 20,000-record backlog): they start on one
    shared consumer; the busy one takes more than OWN_CONSUMER_RATE records/s, moves to a consumer of its
    own at the positions it took, and reads every record exactly once, in order."""
    import logging

    from connect.source import OffsetStorageReader, SourceTaskContext
    from connectors.kafka.source import KafkaSourceConnector, KafkaSourceTask

    src, _ = kafka_pair
    busy_t, idle_t = f"{unique}-busy", f"{unique}-idle"
    create_topic(src.bootstrap, busy_t, 1)
    create_topic(src.bootstrap, idle_t, 1)
    produce(src.bootstrap, busy_t, 20_000, 1)
    caplog.set_level(logging.INFO, logger="connectors.kafka.source")
    tasks = []
    for topic in (idle_t, busy_t):
        connector = KafkaSourceConnector()
        connector.start({"bootstrap.servers": src.bootstrap, "topics": topic, "start.position": "earliest",
                         "refresh.topics.interval.ms": "0"})
        [config] = connector.task_configs(1)
        connector.stop()
        task = KafkaSourceTask()
        task.context = SourceTaskContext(f"{topic}-0", config, OffsetStorageReader(None))
        task.start(config, task.context)
        tasks.append(task)
    idle, busy = tasks
    try:
        assert idle._shared is busy._shared is not None  # one consumer for both
        got: list[int] = []
        deadline = time.monotonic() + 60
        while len(got) < 20_000 and time.monotonic() < deadline:
            busy.context.deadline = idle.context.deadline = time.monotonic() + 0.5
            assert not idle.poll()
            for r in busy.poll() or []:
                got.append(int(r.value.split(b"-")[1]))
        assert got == list(range(20_000))  # nothing lost, nothing twice, in order across the move
        assert busy._shared is None and busy._sub is None and idle._shared is not None
        assert any("left the shared consumer" in r.getMessage() for r in caplog.records)
    finally:
        for task in tasks:
            task.stop()
