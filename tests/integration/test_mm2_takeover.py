"""Take-over from a running MirrorMaker 2 without copying again what it copied.

Real MM2 (dedicated mode, ``connect-mirror`` from Maven Central) mirrors a topic A -> B between two
Apache Kafka clusters while a producer keeps writing to A; MM2 is stopped mid-stream; our mirror
starts with ``mm2.offsets.topic=mm2-offsets.A.internal`` and copies the rest into the same target
topic (``A.<topic>``, MM2's default names). Counted at the target: every record once at least (0
missing), and the records there twice are no more than what MM2 had written but not committed as
copied (its last in-flight batch) - not the thousands it copied before."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from confluent_kafka import Consumer, TopicPartition
from kafka_util import create_topic, produce
from pipeline_util import make_driver, pair_pipeline

from connectors.kafka.mm2offsets import read_mm2_offsets
from worker.brokers.mirror_maker import mm2_properties, start_mirror_maker, stop_mirror_maker

pytestmark = pytest.mark.timeout(600)

PARTS = 2


def _per_partition(indexes: list[int]) -> dict[int, int]:
    return {p: sum(1 for i in indexes if i % PARTS == p) for p in range(PARTS)}


def _indexes(bootstrap: str, topic: str, quiet_s: float = 3.0) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "takeover-check", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTS)])
    out, last = [], time.monotonic()
    try:
        while time.monotonic() - last < quiet_s:
            for m in c.consume(5000, 0.3):
                if m.error() is None:
                    out.append(int(m.value().decode().split("-")[1]))
                    last = time.monotonic()
    finally:
        c.close()
    return out


@pytest.fixture(scope="module")
def slow_start_pair(tmp_path_factory):
    """Two Apache Kafka clusters given 5 minutes to start (a loaded machine formats storage slowly)."""
    from worker.embedded import ApacheKafka

    logs = tmp_path_factory.mktemp("takeover-kafka")
    pair = [ApacheKafka(log_path=logs / "a.log"), ApacheKafka(log_path=logs / "b.log")]
    try:
        for broker in pair:
            broker.start(timeout=300)
        yield pair
    finally:
        for broker in pair:
            broker.stop()


def test_a_mirror_takes_over_from_a_stopped_mm2_without_copying_again(slow_start_pair, spark, tmp_path, unique):
    a, b = slow_start_pair
    topic = f"tk-{unique}"
    create_topic(a.bootstrap, topic, PARTS)
    produce(a.bootstrap, topic, 5000, PARTS)
    props = mm2_properties("A", a.bootstrap, "B", b.bootstrap, topic, {
        "emit.heartbeats.enabled": "false", "emit.checkpoints.enabled": "false",
        "sync.topic.acls.enabled": "false", "refresh.topics.interval.seconds": "2",
        "offset.flush.interval.ms": "1000",
        # plugins found by their ServiceLoader manifests, as MM2's start-up warning advises: its default
        # class-path scan (top level, then the herder's worker) took 60-85 s on a loaded 2-core host
        "plugin.discovery": "service_load", "B.plugin.discovery": "service_load"})
    log = tmp_path / "mm2" / "mm2.log"
    mm2 = start_mirror_maker(props, tmp_path / "mm2")
    stop = threading.Event()
    produced = [5000]

    def keep_producing() -> None:  # mid-stream: records keep arriving while MM2 stops
        while not stop.is_set():
            produce(a.bootstrap, topic, 200, PARTS, start=produced[0])
            produced[0] += 200
            time.sleep(0.1)

    writer = threading.Thread(target=keep_producing, daemon=True)
    try:
        deadline = time.monotonic() + 240
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "watch", "enable.auto.commit": False})
        seen = 0
        writer.start()
        while seen < 8000:  # MM2 is copying: stop it once it copied a good part
            assert mm2.poll() is None, f"MM2 exited with {mm2.returncode}: see {log}"
            assert time.monotonic() < deadline, f"MM2 copied only {seen} records: see {log}"
            try:
                c.assign([TopicPartition(f"A.{topic}", p, 0) for p in range(PARTS)]) if not seen else None
                seen += sum(1 for m in c.consume(5000, 0.5) if m.error() is None)
            except Exception:  # noqa: BLE001 - the topic is not there yet
                time.sleep(0.5)
        c.close()
    finally:
        stop_mirror_maker(mm2)  # SIGTERM first: Connect commits its source offsets on a graceful stop
    copied = _per_partition(_indexes(b.bootstrap, f"A.{topic}"))  # what MM2 wrote, per partition
    at_stop = sum(copied.values())
    stop.set()
    writer.join(30)
    total = produced[0]
    committed = read_mm2_offsets({"bootstrap.servers": b.bootstrap}, "mm2-offsets.A.internal", "A")
    assert committed, "nothing of MM2's progress found"
    # written by MM2 but not committed as copied (a partition MM2 committed nothing of starts at earliest)
    in_flight = sum(copied[p] - committed.get((topic, p), 0) for p in range(PARTS))
    assert 0 <= in_flight < at_stop, (copied, committed)

    ours = pair_pipeline(f"{topic}-takeover",
                         {"connector.class": "kafka", "bootstrap.servers": a.bootstrap, "topics": topic,
                          "cluster.alias": "A", "mm2.offsets.topic": "mm2-offsets.A.internal",
                          "mm2.offsets.client.bootstrap.servers": b.bootstrap},
                         {"connector.class": "kafka", "bootstrap.servers": b.bootstrap, "cluster.alias": "B"},
                         **{"replication.policy": "prefix", "epoch.max.ms": "1500"})
    driver = make_driver(spark, tmp_path / "ours", ours)
    deadline = time.monotonic() + 180
    while True:
        results = driver.run_epoch()
        assert all(r.state == "RUNNING" for r in results), [r.trace for r in results]
        got = _indexes(b.bootstrap, f"A.{topic}", 1.5)
        if len(set(got)) >= total or time.monotonic() > deadline:
            break
    counts = Counter(got)
    missing = sorted(set(range(total)) - set(counts))
    duplicates = sum(n - 1 for n in counts.values())
    print(f"MM2 copied {at_stop}, committed {sum(committed.values())}; total {total}; "
          f"duplicates {duplicates}, in flight at the stop {in_flight}")
    assert not missing, f"{len(missing)} missing, first {missing[:5]}"
    assert duplicates <= in_flight, f"{duplicates} copied twice, more than MM2's {in_flight} in flight"
