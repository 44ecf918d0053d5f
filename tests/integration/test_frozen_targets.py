"""A target broker frozen mid-stream (SIGSTOP: connections stay open, nothing answers), then thawed,
while a producer keeps writing keyed records to the source: nothing is lost, and per partition /
queue (so per key) the first copies arrive in source order. Sends time out during the freeze; a
transient failure holds its partition until the failed records are re-sent.
"""

from __future__ import annotations

import hashlib
import threading
import time

from pipeline_util import first_copies_out_of_order, make_driver, pair_pipeline

RATE, SECONDS = 1000, 12  # records per second written to the source, for this long
FREEZE_AT, FREEZE_FOR = 2, 8  # seconds after the producer starts; how long the target stays frozen
# Values large enough that what is written during the freeze outgrows the sockets' buffers: the
# clients then hold sends that never reached the broker, the ones a timeout fails and that must
# not be overtaken by later ones.
PAD = b"-" + b"x" * 8000
EPOCHS = {"epoch.max.ms": 1000, "epoch.grace.ms": 1000, "errors.retry.timeout": 60_000}


class _Steady(threading.Thread):
    """Calls ``send(i)`` for i in 0..total-1 at RATE per second, then ``done()``."""

    def __init__(self, send, done, total: int):
        super().__init__(daemon=True)
        self.send, self.done, self.total = send, done, total
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            t0 = time.monotonic()
            for i in range(self.total):
                self.send(i)
                if i % 100 == 0:
                    ahead = i / RATE - (time.monotonic() - t0)
                    if ahead > 0:
                        time.sleep(ahead)
            self.done()
        except BaseException as exc:  # noqa: BLE001 - surfaced by the test
            self.error = exc


def _through_a_freeze(driver, target, producer: _Steady, total: int) -> dict:
    """Run epochs while the producer writes; freeze the target at FREEZE_AT for FREEZE_FOR seconds;
    go on until every record is committed. Returns the summed stats."""
    stats = {"transient": 0, "retries": 0, "failed_epochs": 0, "longest_epoch_s": 0.0}
    driver.run_epoch()  # start positions
    producer.start()
    t0 = time.monotonic()
    phase, committed = "before", 0
    try:
        while time.monotonic() - t0 < 150:
            now = time.monotonic() - t0
            if phase == "before" and now > FREEZE_AT:
                target.freeze()
                phase = "frozen"
            elif phase == "frozen" and now > FREEZE_AT + FREEZE_FOR:
                target.thaw()
                phase = "after"
            for r in driver.run_epoch():
                stats["longest_epoch_s"] = round(max(stats["longest_epoch_s"], r.ended_at - r.started_at), 2)
                if r.state == "FAILED":  # only transient trouble may fail the pair (restarted by the driver)
                    assert r.retriable, r.trace
                    stats["failed_epochs"] += 1
                assert r.stats.get("skipped", 0) == 0, "a transient failure was skipped"
                stats["transient"] += r.stats.get("transient", 0)
                stats["retries"] += r.stats.get("retries", 0)
            # Acknowledged and committed, not only moved: what is still in flight when the loop
            # ends is not delivered by driver.close() (a later run would re-send it).
            committed = sum(rt.committed_total for rt in driver.runtimes)
            if phase == "after" and not producer.is_alive() and committed >= total:
                break
    finally:
        target.thaw()
        driver.close()
    producer.join(30)
    assert producer.error is None, producer.error
    assert committed >= total, f"{committed} of {total} committed"
    # epoch.max.ms + epoch.grace.ms, plus a source poll and Spark's overhead on a loaded machine
    assert stats["longest_epoch_s"] <= 2 + 2.5, f"an epoch lasted {stats['longest_epoch_s']} s: waits must be bounded"
    return stats


def _check(name: str, by_partition: dict, total: int, stats: dict) -> None:
    got = sorted({i for indexes in by_partition.values() for i in indexes})
    missing = total - len(got)
    assert got == list(range(total)), f"{name}: {missing} record(s) lost"
    broken = sum(first_copies_out_of_order(indexes) for indexes in by_partition.values())
    copies = sum(map(len, by_partition.values()))
    print(f"{name} frozen {FREEZE_FOR} s: {stats}, {copies - total} duplicates, {broken} out of order")
    assert broken == 0, f"{name}: {broken} of {total} records landed out of key order"


def test_rocketmq_target_frozen_mid_stream_loses_nothing_and_keeps_queue_order(rocketmq_pair, spark, tmp_path, unique):
    from rocketmq_util import consume_all

    from connectors.rocketmq.sync_client import SyncRocketMQClient

    src, dst = rocketmq_pair
    topic, queues, total = "Frozen" + hashlib.sha1(unique.encode()).hexdigest()[:10], 2, RATE * SECONDS
    client = SyncRocketMQClient(src.namesrv, timeout=30)  # the source is not frozen, only slow at times
    client.create_topic(src.broker_addr, topic, queues, queues)
    futures: list = []

    def send(i: int) -> None:
        futures.append(client.send(src.broker_addr, topic, i % queues, f"value-{i}".encode() + PAD,
                                   {"KEYS": f"key-{i % 50}", "idx": str(i)}))
        if len(futures) >= 500:
            assert all(f.result(30).ok for f in futures)
            futures.clear()

    def done() -> None:
        assert all(f.result(30).ok for f in futures)
        client.close()

    driver = make_driver(spark, tmp_path, pair_pipeline(
        unique, {"connector.class": "rocketmq", "namesrv.addr": src.namesrv, "topics": topic},
        {"connector.class": "rocketmq", "namesrv.addr": dst.namesrv, "auto.create.topics": "true",
         "request.timeout.ms": 2000}, **EPOCHS))
    stats = _through_a_freeze(driver, dst, _Steady(send, done, total), total)
    by_queue = {q: [int(m.body.split(b"-")[1]) for m in msgs] for q, msgs in consume_all(dst, topic).items()}
    _check("rocketmq", by_queue, total, stats)
    assert stats["transient"] > 0, "the freeze made no send fail: nothing was tested"


def test_pulsar_target_frozen_mid_stream_loses_nothing_and_keeps_key_order(pulsar_pair, spark, tmp_path, unique):
    import pulsar
    from pulsar_util import client as pulsar_client
    from pulsar_util import consume_all

    src, dst = pulsar_pair
    topic, total = f"persistent://public/default/frozen-{unique}", RATE * SECONDS
    c = pulsar_client(src)
    producer = c.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=5,
                                 block_if_queue_full=True, max_pending_messages=20_000)
    errors: list = []

    def send(i: int) -> None:
        producer.send_async(f"value-{i}".encode() + PAD, lambda res, _mid: errors.append(res) if res != pulsar.Result.Ok
                            else None, partition_key=f"key-{i % 50}")

    def done() -> None:
        producer.flush()
        producer.close()
        c.close()
        assert not errors, errors[:3]

    driver = make_driver(spark, tmp_path, pair_pipeline(
        unique, {"connector.class": "pulsar", "service.url": src.service_url, "topics": topic},
        {"connector.class": "pulsar", "service.url": dst.service_url, "topic.template": "{topic}-copy",
         "send.timeout.ms": 2000}, **EPOCHS))
    stats = _through_a_freeze(driver, dst, _Steady(send, done, total), total)
    index = lambda m: int(m.data().split(b"-")[1])  # noqa: E731
    got = consume_all(dst, f"{topic}-copy", 0, total, ident=index)
    _check("pulsar", {p: [index(m) for m in msgs] for p, msgs in got.items()},
           total, stats)
    assert stats["transient"] > 0, "the freeze made no send fail: nothing was tested"


def test_kafka_to_rocketmq_target_frozen_keeps_key_order(kafka_pair, rocketmq_pair, spark, tmp_path, unique):
    """Issue 36's case, scaled: keyed Kafka records into RocketMQ, whose sink has little room
    (max.pending.messages) and short request timeouts, so puts run out of room, give up the rest
    of a batch and look the route up again while earlier sends are still timing out."""
    from confluent_kafka import Producer
    from kafka_util import create_topic
    from rocketmq_util import consume_all

    src, _ = kafka_pair
    _, dst = rocketmq_pair
    topic, partitions, total = f"frozenk2r{hashlib.sha1(unique.encode()).hexdigest()[:10]}", 2, RATE * SECONDS
    create_topic(src.bootstrap, topic, partitions)
    producer = Producer({"bootstrap.servers": src.bootstrap, "linger.ms": 5})

    def send(i: int) -> None:
        producer.produce(topic, value=f"value-{i}".encode() + PAD, key=f"key-{i % 50}".encode(),
                         partition=(i % 50) % partitions)
        producer.poll(0)

    def done() -> None:
        assert producer.flush(30) == 0

    driver = make_driver(spark, tmp_path, pair_pipeline(
        unique, {"connector.class": "kafka", "bootstrap.servers": src.bootstrap, "topics": topic},
        {"connector.class": "rocketmq", "namesrv.addr": dst.namesrv, "auto.create.topics": "true",
         "request.timeout.ms": 1500, "max.pending.messages": 300, "batch.size": 50}, **EPOCHS))
    stats = _through_a_freeze(driver, dst, _Steady(send, done, total), total)
    by_key: dict = {}
    for msgs in consume_all(dst, topic).values():
        for m in msgs:
            i = int(m.body.split(b"-")[1])
            by_key.setdefault(i % 50, []).append(i)
    _check("kafka->rocketmq", by_key, total, stats)
    assert stats["transient"] > 0, "the freeze made no send fail: nothing was tested"
