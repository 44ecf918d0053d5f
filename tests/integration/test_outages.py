"""Outages of the target cluster, over the wire: nothing lost, nothing skipped, epochs bounded.

The target Kafka advertises a loopback TCP proxy (tests/netproxy.py) as its address, so every
client connection - bootstrap and after metadata - goes through it. ``blackhole()`` stops all
traffic without closing anything (like a network partition); ``restore()`` heals it. A source
producer keeps writing meanwhile.
"""

from __future__ import annotations

import threading
import time

import pytest
from kafka_util import consume_all, create_topic
from pipeline_util import (
    committed_positions,
    committed_total,
    first_copies_out_of_order,
    kafka_pipeline,
    make_driver,
    partition_offsets,
)

EPOCH_MS, GRACE_MS = 2000, 2000
# An epoch may last epoch.max.ms + epoch.grace.ms, plus the last source poll (100 ms) and the
# Spark job's own overhead; 1.5 s covers both on a loaded 2-core machine.
EPOCH_BOUND_S = (EPOCH_MS + GRACE_MS) / 1000 + 1.5


class SteadyProducer(threading.Thread):
    """Writes ``count`` keyed records to the source at ``rate`` per second, round robin over partitions."""

    def __init__(self, bootstrap: str, topic: str, count: int, rate: int, partitions: int):
        super().__init__(daemon=True)
        self.args = (bootstrap, topic, count, rate, partitions)
        self.error: BaseException | None = None

    def run(self) -> None:
        from confluent_kafka import Producer

        bootstrap, topic, count, rate, partitions = self.args
        try:
            p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
            t0 = time.monotonic()
            for i in range(count):
                p.produce(topic, f"v-{i}".encode(), str(i).encode(), partition=i % partitions)
                if i % 100 == 0:
                    p.poll(0)
                    ahead = i / rate - (time.monotonic() - t0)
                    if ahead > 0:
                        time.sleep(ahead)
            assert p.flush(30) == 0
        except BaseException as exc:  # noqa: BLE001 - surfaced by the test
            self.error = exc


def _values(messages) -> set[int]:
    return {int(m.value().decode().split("-")[1]) for m in messages}


def _ranges(values: list[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for v in values:
        if runs and runs[-1][1] == v - 1:
            runs[-1] = (runs[-1][0], v)
        else:
            runs.append((v, v))
    return runs


@pytest.mark.slow
# Two of the four combinations (each runs 40 s): the short message timeout with errors.tolerance=all
# is the one where transient failures could be mistaken for tolerable ones; the default timeouts
# with tolerance none is the baseline.
@pytest.mark.parametrize("message_timeout, tolerance", [(None, "none"), (5000, "all")],
                         ids=["default-timeouts-none", "message-timeout-5s-all"])
def test_target_blackholed_30s_loses_nothing_and_resumes_by_itself(kafka_pair, proxied_target, spark, tmp_path,
                                                                   unique, tolerance, message_timeout):
    src, _ = kafka_pair
    target, proxy = proxied_target
    topic, parts, rate, seconds = f"outage-{unique}", 2, 2000, 40
    total = rate * seconds
    create_topic(src.bootstrap, topic, parts)
    extra = {"source.topics": topic, "sink.topic.template": "o.{topic}", "errors.tolerance": tolerance,
             "epoch.max.ms": EPOCH_MS, "epoch.grace.ms": GRACE_MS, "errors.restart.backoff.ms": 500}
    if message_timeout is not None:
        extra["sink.producer.override.message.timeout.ms"] = message_timeout
    pipeline = kafka_pipeline(unique, src.bootstrap, target.bootstrap, **extra)
    producer = SteadyProducer(src.bootstrap, topic, total, rate, parts)
    driver = make_driver(spark, tmp_path, pipeline)
    durations, failures, restarts = [], [], 0
    try:
        driver.run_epoch()  # start positions
        producer.start()
        t0 = time.monotonic()
        phase = "before"
        deadline = t0 + 180
        while time.monotonic() < deadline:
            now = time.monotonic() - t0
            if phase == "before" and now > 5:
                proxy.blackhole()
                phase, blackholed_at = "down", time.monotonic()
            elif phase == "down" and time.monotonic() - blackholed_at > 30:
                proxy.restore()
                phase = "after"
            for r in driver.run_epoch():
                durations.append(r.ended_at - r.started_at)
                restarts += r.restarted
                if r.state == "FAILED":
                    failures.append(r)
                assert r.stats.get("skipped", 0) == 0, "a transient failure was skipped"
            if phase == "after" and not producer.is_alive() and committed_positions(driver) >= total:
                break
        positions, records = committed_positions(driver), committed_total(driver)
    finally:
        proxy.restore()
        driver.close()
    producer.join(30)
    assert producer.error is None, producer.error
    got = consume_all(target.bootstrap, f"o.{topic}", range(parts), total, timeout=60)
    missing = set(range(total)) - _values(got)
    assert not missing, (f"{len(missing)} records lost ({positions} offsets and {records} records committed), "
                         f"e.g. {_ranges(sorted(missing))[:5]}")
    assert positions >= total, f"{positions} of {total} offsets committed"
    # Per partition (each key's records stay in one): the first copies come in source order, a
    # finite message.timeout.ms included (the sink holds the partition until a timed-out record is re-sent).
    broken = sum(first_copies_out_of_order([int(m.value().decode().split("-")[1]) for m in got if m.partition() == p])
                 for p in range(parts))
    assert broken == 0, f"{broken} of {total} records landed out of key order ({len(got) - total} duplicates)"
    assert max(durations) <= EPOCH_BOUND_S, f"longest epoch {max(durations):.1f} s > {EPOCH_BOUND_S} s"
    for r in failures:  # only transient trouble may fail the pair, and the driver restarted it
        assert r.retriable, r.trace
    print(f"outage tolerance={tolerance} timeout={message_timeout}: {len(durations)} epochs, longest "
          f"{max(durations):.2f} s, {len(failures)} transient pair failures, {len(got) - total} duplicates")


@pytest.mark.slow
def test_one_blackholed_target_does_not_slow_the_other_connector(kafka_pair, proxied_target, spark, tmp_path, unique):
    src, dst = kafka_pair
    target, proxy = proxied_target
    healthy_topic, sick_topic = f"healthy-{unique}", f"sick-{unique}"
    for topic in (healthy_topic, sick_topic):
        create_topic(src.bootstrap, topic, 1)
    healthy = kafka_pipeline(f"{unique}-ok", src.bootstrap, dst.bootstrap, **{
        "source.topics": healthy_topic, "epoch.max.ms": 1000})
    sick = kafka_pipeline(f"{unique}-sick", src.bootstrap, target.bootstrap, **{
        "source.topics": sick_topic, "epoch.max.ms": 1000, "epoch.grace.ms": 3000})
    producers = [SteadyProducer(src.bootstrap, t, 60_000, 2000, 1) for t in (healthy_topic, sick_topic)]
    commits: dict[str, list[tuple[float, int]]] = {healthy.name: [], sick.name: []}

    def on_epoch(_epoch, results, runtimes):
        for r in results:
            commits[r.connector].append((time.monotonic(), sum(o["offset"] for o in partition_offsets(r.offsets))))

    driver = make_driver(spark, tmp_path, healthy, sick)
    driver.on_epoch = on_epoch
    stop = threading.Event()
    runner = threading.Thread(target=driver.run, args=(stop,), daemon=True)
    for p in producers:
        p.start()
    runner.start()
    try:
        time.sleep(8)
        proxy.blackhole()
        down_at = time.monotonic()
        time.sleep(15)
        up_at = time.monotonic()
        proxy.restore()
    finally:
        proxy.restore()
        stop.set()
        runner.join(60)

    def epochs_per_s(name, start, end):
        return sum(1 for t, _ in commits[name] if start <= t < end) / (end - start)

    before = epochs_per_s(healthy.name, down_at - 5, down_at)
    during = epochs_per_s(healthy.name, down_at + 1, up_at)
    moved = [n for t, n in commits[healthy.name] if down_at + 1 <= t < up_at]
    print(f"healthy connector: {before:.2f} epochs/s before, {during:.2f} during the other's outage")
    assert during >= 0.7 * before and during > 0.4, (before, during)
    assert moved and max(moved) > min(moved), "the healthy connector kept committing new offsets"


@pytest.mark.slow
@pytest.mark.parametrize("how", ["sigterm", "kill-9"])
def test_stopped_during_the_outage_then_restarted_loses_nothing(kafka_pair, proxied_target, tmp_path, unique, how):
    """`connect run` as a process, stopped while its target is blackholed - so records of earlier
    epochs are still in flight (epochs end without draining) - and restarted after.
    SIGTERM: exit 0 within the epoch bound. kill -9: nothing is committed on the way out."""
    import os
    import signal
    import subprocess
    import sys

    import orjson
    from kafka_util import produce
    from pipeline_util import committed_in_store

    src, _ = kafka_pair
    target, proxy = proxied_target
    topic, parts, n = f"term-outage-{unique}", 2, 20_000
    create_topic(src.bootstrap, topic, parts)
    produce(src.bootstrap, topic, n, parts)
    config = tmp_path / "c.json"
    config.write_bytes(orjson.dumps({"name": unique, "config": {
        "source.connector.class": "kafka", "source.bootstrap.servers": src.bootstrap, "source.topics": topic,
        "sink.connector.class": "kafka", "sink.bootstrap.servers": target.bootstrap,
        "sink.topic.template": "t.{topic}", "epoch.max.ms": str(EPOCH_MS), "epoch.grace.ms": str(GRACE_MS)}}))
    data = tmp_path / "data"

    def start(log_name: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "worker.cli", "run", str(config), "--data-dir", str(data),
                                 "--spark-conf", "spark.ui.enabled=false"],
                                stdout=open(tmp_path / log_name, "wb"), stderr=subprocess.STDOUT,
                                start_new_session=True)

    def wait_committed(proc: subprocess.Popen, log_name: str, at_least: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while committed_in_store(data) < at_least and time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / log_name).read_text()[-3000:]
            time.sleep(0.2)
        assert committed_in_store(data) >= at_least, (tmp_path / log_name).read_text()[-3000:]

    first = start("first.log")
    try:
        wait_committed(first, "first.log", n, 120)  # the backlog is mirrored and committed
        proxy.blackhole()
        produce(src.bootstrap, topic, n, parts, start=n, headers=False)  # arrives during the outage
        time.sleep(2 * EPOCH_MS / 1000)  # epochs now end with records unacknowledged
        t0 = time.monotonic()
        if how == "kill-9":
            before = committed_in_store(data)
            os.killpg(first.pid, signal.SIGKILL)
        else:
            first.send_signal(signal.SIGTERM)
        first.wait(60)
        elapsed = time.monotonic() - t0
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
        proxy.restore()
    log = (tmp_path / "first.log").read_text()
    during = committed_in_store(data)
    assert during < 2 * n, "records produced during the outage cannot have been committed"
    if how == "kill-9":
        assert during == before
    else:
        assert first.returncode == 0, log[-3000:]
        assert elapsed <= EPOCH_BOUND_S, f"SIGTERM during the outage took {elapsed:.1f} s > {EPOCH_BOUND_S} s"

    second = start("second.log")
    try:
        wait_committed(second, "second.log", 2 * n, 120)
    finally:
        second.send_signal(signal.SIGTERM)
        code = second.wait(60)
    assert code == 0, (tmp_path / "second.log").read_text()[-3000:]
    got = consume_all(target.bootstrap, f"t.{topic}", range(parts), 2 * n, timeout=60)
    values = {m.value() for m in got}
    missing = {f"value-{i}".encode() for i in range(2 * n)} - values
    assert not missing, f"{len(missing)} records lost"
    print(f"{how} during the outage: exit {first.returncode} after {elapsed:.1f} s with {during} committed; "
          f"restart mirrored the rest, {len(got) - 2 * n} duplicates")


def test_kafka_sink_checkpoints_complete_only_when_every_record_before_them_is_acknowledged(
        proxied_target, unique):
    """The asynchronous sink over the wire: a checkpoint taken while the target is blackholed
    stays incomplete (its records are in flight, not lost); once traffic flows it completes, and
    every record of it is on the target."""
    from connect.records import ConnectRecord
    from connect.sink import SinkTaskContext
    from connectors.kafka.sink import KafkaSinkTask

    broker, proxy = proxied_target
    topic = f"cp-{unique}"
    create_topic(broker.bootstrap, topic, 2)
    config = {"bootstrap.servers": broker.bootstrap, "topic": topic}
    sink = KafkaSinkTask()
    sink.context = SinkTaskContext("cp-0", config)
    sink.start(config, sink.context)
    sink.context.deadline = time.monotonic() + 60
    sp = [{"topic": "s", "partition": p} for p in (0, 1)]

    def records(start, n):
        return [ConnectRecord("s", str(i).encode(), f"v-{i}".encode(), None, 0, sp[i % 2], {"offset": i}, i % 2)
                for i in range(start, start + n)]

    try:
        sink.put(records(0, 500))
        first = sink.checkpoint()
        deadline = time.monotonic() + 20
        while not first() and time.monotonic() < deadline:
            sink.wait_outcomes(0.1)
        assert first(), "the first checkpoint never completed with the target up"
        proxy.blackhole()
        sink.put(records(500, 500))
        second = sink.checkpoint()
        for _ in range(20):  # 2 s of serving outcomes: none can arrive
            sink.wait_outcomes(0.1)
        assert not second(), "a checkpoint completed while its records could not have been acknowledged"
        proxy.restore()
        deadline = time.monotonic() + 60
        while not second() and time.monotonic() < deadline:
            sink.wait_outcomes(0.1)
        assert second(), "the checkpoint did not complete after the target came back"
        assert sink.context.errant_record_reporter.take() == []
    finally:
        proxy.restore()
        sink.stop()
    got = consume_all(broker.bootstrap, topic, [0, 1], 1000)
    assert _values(got) == set(range(1000))


def test_kafka_sink_timeout_abandons_the_producer_and_reports_in_put_order(proxied_target, unique):
    """With message.timeout.ms set, the sink owns the timeout: once the oldest record waits longer,
    the producer is abandoned and every record without an outcome is reported transient in put
    order (across partitions), a batch put at that moment after them; a fresh producer then
    delivers the re-sent records, in order."""
    from connect.errors import RetriableError
    from connect.records import ConnectRecord
    from connect.sink import SinkTaskContext
    from connectors.kafka.sink import KafkaSinkTask

    broker, proxy = proxied_target
    topic = f"abandon-{unique}"
    create_topic(broker.bootstrap, topic, 2)
    config = {"bootstrap.servers": broker.bootstrap, "topic": topic, "producer.override.message.timeout.ms": "2000"}
    sink = KafkaSinkTask()
    sink.context = SinkTaskContext("abandon-0", config)
    sink.start(config, sink.context)
    sink.context.deadline = time.monotonic() + 60
    sp = [{"topic": "s", "partition": p} for p in (0, 1)]
    records = [ConnectRecord("s", str(i).encode(), f"v-{i}".encode(), None, 0, sp[i % 2], {"offset": i}, i % 2)
               for i in range(1200)]
    try:
        sink.put(records[:100])  # connected, with metadata
        first = sink.checkpoint()
        while not first():
            sink.wait_outcomes(0.1)
        assert sink.context.errant_record_reporter.take() == []
        proxy.blackhole()
        for start in range(100, 1000, 300):
            sink.put(records[start:start + 300])
        sink.wait_outcomes(1.0)
        assert sink.context.errant_record_reporter.take() == []  # not yet timed out
        time.sleep(1.2)
        sink.put(records[1000:1200])  # the timeout is due: abandoned first, this batch goes behind
        second = sink.checkpoint()
        assert second(), "every record has an outcome: the abandoned ones are reported"
        failed = sink.context.errant_record_reporter.take()
        assert [r for r, _ in failed] == records[100:1200], "reported in put order"
        assert all(isinstance(e, RetriableError) for _, e in failed)
        assert "timed out after 2000 ms (producer.override.message.timeout.ms)" in str(failed[0][1])
        proxy.restore()
        sink.put([r for r, _ in failed])  # the runner's re-send, to the fresh producer
        third = sink.checkpoint()
        deadline = time.monotonic() + 30
        while not third() and time.monotonic() < deadline:
            sink.wait_outcomes(0.1)
        assert third() and sink.context.errant_record_reporter.take() == []
    finally:
        proxy.restore()
        sink.stop()
    got = consume_all(broker.bootstrap, topic, [0, 1], 1200)
    for p in (0, 1):
        values = [int(m.value().decode().split("-")[1]) for m in got if m.partition() == p]
        assert first_copies_out_of_order(values) == 0 and set(values) == set(range(p, 1200, 2))


@pytest.mark.parametrize("value", ["-1", "5s", "1.5", True])
def test_a_bad_delivery_timeout_is_a_config_error_naming_the_key(value):
    from connect.errors import ConfigError
    from connect.sink import SinkTaskContext
    from connectors.kafka.sink import KafkaSinkConnector, KafkaSinkTask

    config = {"bootstrap.servers": "127.0.0.1:1", "producer.override.message.timeout.ms": value}
    [issue] = KafkaSinkConnector.validate(config)
    assert issue.key == "producer.override.message.timeout.ms" and "whole number of milliseconds" in issue.message
    with pytest.raises(ConfigError, match="producer.override.message.timeout.ms"):
        KafkaSinkTask().start(config, SinkTaskContext("bad-0", config))
