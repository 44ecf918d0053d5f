"""MirrorMaker 2's own client reads our checkpoints (``checkpoints.format=mm2``).

Two Apache Kafka clusters: a mirror S -> T with MM2's default topic names (``S.<topic>``) writes
offset syncs; a group consumes part of the topic in S and commits; our checkpoint connector with
``checkpoints.format=mm2`` writes ``S.checkpoints.internal`` in T. Then a Java program compiled
here calls ``org.apache.kafka.connect.mirror.RemoteClusterUtils.translateOffsets`` (the jar from
Maven Central, ``connect-mirror-client``) against T: it must return, for each partition of
``S.<topic>``, an offset at or before where the group stopped in S (never past it: no gap) and
within one copy round of it (the offset-sync spacing here)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from confluent_kafka import Consumer, TopicPartition
from kafka_util import create_topic, produce
from pipeline_util import make_driver, pair_pipeline

from worker.brokers.kafka import MIRROR_CLIENT
from worker.brokers.maven import classpath

pytestmark = pytest.mark.timeout(420)

PARTS, ROUNDS, PER_ROUND, CONSUMED = 2, 4, 60, 65

_MAIN = """
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.connect.mirror.RemoteClusterUtils;

public class Translate {
    public static void main(String[] args) throws Exception {
        Map<String, Object> props = new HashMap<>();
        props.put("bootstrap.servers", args[0]);
        Map<TopicPartition, OffsetAndMetadata> out =
            RemoteClusterUtils.translateOffsets(props, args[1], args[2], Duration.ofSeconds(60));
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : out.entrySet()) {
            System.out.println(e.getKey().topic() + " " + e.getKey().partition() + " " + e.getValue().offset());
        }
    }
}
"""


def _translate_with_mm2_client(tmp_path, bootstrap: str, alias: str, group: str) -> dict[tuple[str, int], int]:
    javac, java = shutil.which("javac"), shutil.which("java")
    if not javac or not java:
        pytest.skip("no JDK (javac) on PATH")
    lib = classpath(MIRROR_CLIENT)[0].parent
    src = tmp_path / "Translate.java"
    src.write_text(_MAIN)
    subprocess.run([javac, "-cp", f"{lib}/*", "-d", str(tmp_path), str(src)], check=True, timeout=180)
    done = subprocess.run([java, "-Xmx128m", "-cp", f"{tmp_path}:{lib}/*", "Translate", bootstrap, alias, group],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    out = {}
    for line in done.stdout.split("\n"):
        if line.strip():
            topic, part, offset = line.split()
            out[(topic, int(part))] = int(offset)
    return out


def _consume_and_commit(bootstrap: str, topic: str, group: str, per_partition: int) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(PARTS)])
        c.commit(offsets=[TopicPartition(topic, p, per_partition) for p in range(PARTS)], asynchronous=False)
    finally:
        c.close()


def _epoch(driver) -> list:
    results = driver.run_epoch()
    failed = [r.trace for r in results if r.state != "RUNNING"]
    assert not failed, failed[0]
    return results


def test_mm2_remote_cluster_utils_translates_a_group_from_our_checkpoints(apache_kafka_pair, spark, tmp_path, unique):
    a, b = apache_kafka_pair
    topic, group = unique, f"{unique}-group"
    create_topic(a.bootstrap, topic, PARTS)
    mirror = pair_pipeline(f"{topic}-mirror", {"connector.class": "kafka", "bootstrap.servers": a.bootstrap,
                                               "topics": topic, "cluster.alias": "S"},
                           {"connector.class": "kafka", "bootstrap.servers": b.bootstrap, "cluster.alias": "T"},
                           **{"replication.policy": "prefix", "offset.syncs.topic": f"{topic}-offset-syncs",
                              "offset.syncs.interval.ms": "10", "epoch.max.ms": "700"})
    driver = make_driver(spark, tmp_path / "mirror", mirror)
    emitted = 0
    for n in range(ROUNDS):  # a round, then epochs until it is copied and its syncs are written
        produce(a.bootstrap, topic, PER_ROUND, PARTS, start=n * PER_ROUND)
        for _ in range(40):
            results = _epoch(driver)
            emitted = max([emitted] + [r.metrics.get("offset_syncs.emitted", 0) for r in results if r.metrics])
            if emitted >= (n + 1) * PARTS:
                break
        else:
            raise AssertionError(f"round {n}: only {emitted} offset syncs written")
    _consume_and_commit(a.bootstrap, topic, group, CONSUMED)

    checkpoint = pair_pipeline(
        f"{topic}-checkpoint",
        {"connector.class": "checkpoint", "upstream.type": "kafka", "upstream.alias": "S",
         "upstream.bootstrap.servers": a.bootstrap, "downstream.type": "kafka", "downstream.alias": "T",
         "downstream.bootstrap.servers": b.bootstrap, "offset.syncs.topic": f"{topic}-offset-syncs",
         "groups": group, "emit.checkpoints.interval.ms": "300", "checkpoints.format": "mm2"},
        {"connector.class": "kafka", "bootstrap.servers": b.bootstrap}, **{"epoch.max.ms": "1000"})
    cdriver = make_driver(spark, tmp_path / "checkpoint", checkpoint)
    for _ in range(30):
        results = _epoch(cdriver)
        if sum(r.metrics.get("checkpoint.emitted", 0) for r in results if r.metrics) >= PARTS:
            break
    else:
        raise AssertionError(f"no checkpoints emitted: {results[0].metrics}")

    translated = _translate_with_mm2_client(tmp_path, b.bootstrap, "S", group)
    assert set(translated) == {(f"S.{topic}", p) for p in range(PARTS)}, translated
    spacing = PER_ROUND // PARTS  # records per partition between two offset syncs
    for (_t, part), offset in translated.items():
        # target partition p holds source partition p in order, from offset 0: the group resumes at
        # or before its source position (no gap), at most one sync spacing before it
        assert CONSUMED - spacing <= offset <= CONSUMED, (part, offset)
