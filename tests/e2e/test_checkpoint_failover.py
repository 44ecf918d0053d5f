"""Consumer fail-over as a user sets it up (issue 36): one ``connect run`` process runs a Kafka
mirror A -> B and a ``checkpoint`` connector A -> B side by side. The mirror's run creates the
offset-syncs topic (``offset-syncs.A.internal``, the README's name), so the checkpoint task starts
before it exists. A consumer group with no members committed 40 % of each partition in A (plus 37,
between two offset syncs) before anything started, and the checkpoint connector picks it by a
regex (``orders-.*``).

The group must get committed offsets in B that a fail-over consumer can resume from: every record
it had not consumed in A is there after them (0 gaps), and at most ``offset.syncs.max.lag`` records
per partition are read again (the sync store's bound for a group within the newest 256 syncs:
``connectors/replicator/syncstore.py``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Consumer, TopicPartition
from kafka_util import create_topic, produce

pytestmark = pytest.mark.timeout(420)

CLI = [sys.executable, "-m", "worker.cli"]
RECORDS, PARTS = 6_000, 3
# The group's next offset in each partition of A: 40 %, and 37 more so that it falls between two
# offset syncs (one every MAX_LAG records): translated "after" the sync below it, not "at" one.
CONSUMED = RECORDS // PARTS * 4 // 10 + 37
MAX_LAG = 100  # the mirror's offset.syncs.max.lag (its default)
SYNCS = "offset-syncs.A.internal"


def _write(path: Path, name: str, config: dict) -> Path:
    path.write_bytes(orjson.dumps({"name": name, "config": config}))
    return path


def _committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets (partition -> offset), read without joining the group."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(PARTS)], timeout=10)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in tps if tp.offset >= 0}


def _read_from(bootstrap: str, topic: str, offsets: dict[int, int]) -> dict[int, list[int]]:
    """Record indexes (``value-<i>``) of each partition from ``offsets`` to the end, as a fail-over
    consumer of the group would read them."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "failover-check", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, o) for p, o in offsets.items()])
    out: dict[int, list[int]] = {p: [] for p in offsets}
    quiet = time.monotonic()
    try:
        while time.monotonic() - quiet < 2:
            for m in c.consume(1000, 0.2):
                assert m.error() is None, m.error()
                out[m.partition()].append(int(m.value().decode().split("-")[1]))
                quiet = time.monotonic()
    finally:
        c.close()
    return out


def test_a_memberless_group_fails_over_with_mirror_and_checkpoint_in_one_run(kafka_pair, tmp_path, unique):
    a, b = kafka_pair
    tag = unique.rsplit("-", 1)[1]
    topic, group = f"orders-{tag}", f"orders-app-{tag}"
    create_topic(a.bootstrap, topic, PARTS)
    produce(a.bootstrap, topic, RECORDS, PARTS)  # keyed, round robin: index i is in partition i % PARTS
    committer = Consumer({"bootstrap.servers": a.bootstrap, "group.id": group, "enable.auto.commit": False})
    committer.commit(offsets=[TopicPartition(topic, p, CONSUMED) for p in range(PARTS)], asynchronous=False)
    committer.close()  # assign + commit: the group has no members

    mirror = _write(tmp_path / "mirror.json", f"mirror-{tag}", {
        "source.connector.class": "kafka", "source.bootstrap.servers": a.bootstrap, "source.topics": topic,
        "source.cluster.alias": "A", "sink.connector.class": "kafka", "sink.bootstrap.servers": b.bootstrap,
        "sink.cluster.alias": "B", "offset.syncs.topic": SYNCS})
    checkpoint = _write(tmp_path / "checkpoint.json", f"checkpoint-{tag}", {
        "source.connector.class": "checkpoint",
        "source.upstream.type": "kafka", "source.upstream.alias": "A", "source.upstream.bootstrap.servers": a.bootstrap,
        "source.downstream.type": "kafka", "source.downstream.alias": "B",
        "source.downstream.bootstrap.servers": b.bootstrap,
        "source.offset.syncs.topic": SYNCS, "source.groups": "orders-.*",
        "source.sync.group.offsets.enabled": "true", "source.emit.checkpoints.interval.ms": "2000",
        "source.checkpoints.topic": "A.checkpoints.internal",
        "sink.connector.class": "kafka", "sink.bootstrap.servers": b.bootstrap})
    log = tmp_path / "run.log"
    proc = subprocess.Popen([*CLI, "run", str(mirror), str(checkpoint), "--data-dir", str(tmp_path / "data"),
                             "--spark-conf", "spark.ui.enabled=false"],
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        committed: dict[int, int] = {}
        deadline = time.monotonic() + 180
        while len(committed) < PARTS and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()[-5000:]
            time.sleep(1)
            committed = _committed(b.bootstrap, group, topic)
        assert len(committed) == PARTS, (f"{group} has committed offsets in B for partitions {sorted(committed)} "
                                         f"of {PARTS} after 180 s\n{log.read_text()[-5000:]}")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)

    seen = _read_from(b.bootstrap, topic, committed)
    for p, indexes in seen.items():
        next_index = CONSUMED * PARTS + p  # the group's next record in A's partition p
        missing = sorted(set(range(next_index, RECORDS, PARTS)) - set(indexes))
        assert not missing, f"partition {p}: {len(missing)} records after the group's position missing: {missing[:5]}"
        again = len([i for i in indexes if i < next_index])
        assert again <= MAX_LAG, f"partition {p}: {again} records read again, more than offset.syncs.max.lag"
    print(f"fail-over: committed in B {committed} for {CONSUMED} in A; read again "
          f"{[len([i for i in v if i < CONSUMED * PARTS + p]) for p, v in seen.items()]}")
