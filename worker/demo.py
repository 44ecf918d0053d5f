"""The README demo: two embedded brokers, sample data, ``connect run``, a check.

1. starts two tansu brokers on free loopback ports (source and target clusters); with
   ``--target pulsar`` (``make demo-pulsar``) the target is a pulsar-lite broker instead, and the
   run bridges Kafka to Pulsar (``conf/demo-kafka-to-pulsar.json``);
2. produces sample orders to ``demo.orders`` (3 partitions) and ``demo.payments`` (2 partitions);
3. runs ``connect run conf/demo-mirror.json`` as a separate process, exactly as a user would;
4. reads ``mirror.demo.*`` on the target until every record arrived, stops the connector with
   SIGTERM (it finishes its epoch, flushes and commits), and prints produced vs mirrored.

Exit status 0 only when every produced record was mirrored with key, headers (Pulsar: properties)
and, Kafka to Kafka, partition.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from worker.embedded import EmbeddedKafka, EmbeddedPulsar

CONF = Path(__file__).resolve().parent.parent / "conf"
TOPICS = {"demo.orders": 3, "demo.payments": 2}
RECORDS = {"demo.orders": 30_000, "demo.payments": 20_000}


def produce_samples(bootstrap: str) -> dict[tuple[str, bytes], int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, n, 1) for t, n in TOPICS.items()]).values():
        future.result()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10, "enable.idempotence": True})
    expected = {}
    for topic, count in RECORDS.items():
        for i in range(count):
            key = f"customer-{i % 997}".encode()
            value = orjson.dumps({"id": i, "topic": topic, "amount": round(i * 1.37 % 500, 2)})
            part = i % TOPICS[topic]
            while True:
                try:
                    producer.produce(topic, value, key, partition=part, headers=[("origin", b"demo")])
                    break
                except BufferError:
                    producer.poll(0.05)
            expected[(topic, value)] = part
    if producer.flush(30):
        raise SystemExit("demo: could not produce the sample data")
    return expected


def consume_mirrored(bootstrap: str, expected: dict, deadline: float, on_progress) -> dict:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "demo-verify", "enable.auto.commit": False})
    assigned = False
    seen: dict[tuple[str, bytes], tuple[int, bytes, list]] = {}
    last_report = 0.0
    try:
        while time.monotonic() < deadline and len(seen) < len(expected):
            if not assigned:
                topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=5).topics
                wanted = [f"mirror.{t}" for t in TOPICS]
                if all(t in topics for t in wanted):
                    consumer.assign([TopicPartition(t, p, 0) for t in wanted for p in topics[t].partitions])
                    assigned = True
                else:
                    time.sleep(0.5)
                    continue
            for m in consumer.consume(5000, 0.5):
                if m.error() is None:
                    source_topic = m.topic().removeprefix("mirror.")
                    seen[(source_topic, m.value())] = (m.partition(), m.key(), m.headers() or [])
            if time.monotonic() - last_report > 2:
                last_report = time.monotonic()
                on_progress(len(seen))
    finally:
        consumer.close()
    return seen


def read_pulsar(service_url: str, expected: dict, deadline: float, on_progress) -> dict:
    """The Pulsar side of the check: a reader per mirrored topic, from the earliest message."""
    import pulsar

    client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    seen: dict[tuple[str, bytes], tuple[int | None, bytes, list]] = {}
    readers = {t: client.create_reader(f"persistent://public/default/mirror.{t}", pulsar.MessageId.earliest)
               for t in TOPICS}
    last_report = 0.0
    try:
        while time.monotonic() < deadline and len(seen) < len(expected):
            for topic, reader in readers.items():
                for _ in range(5000):
                    try:
                        m = reader.read_next(100)
                    except pulsar.Timeout:
                        break
                    seen[(topic, m.data())] = (None, m.partition_key().encode(),
                                               [(k, v.encode()) for k, v in m.properties().items()])
            if time.monotonic() - last_report > 2:
                last_report = time.monotonic()
                on_progress(len(seen))
    finally:
        client.close()
    return seen


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Run the demo: sample data mirrored between two embedded brokers.")
    ap.add_argument("--target", choices=("kafka", "pulsar"), default="kafka",
                    help="the target cluster's broker: kafka (tansu, the default) or pulsar (pulsar-lite)")
    target_kind = ap.parse_args(argv).target
    work = Path(tempfile.mkdtemp(prefix="connect-demo-"))
    print(f"demo: working directory {work}")
    target_broker = (EmbeddedKafka(log_path=work / "target-broker.log") if target_kind == "kafka"
                     else EmbeddedPulsar(work / "target-pulsar", log_path=work / "target-broker.log"))
    with EmbeddedKafka(log_path=work / "source-broker.log") as source, target_broker as target:
        address = target.bootstrap if target_kind == "kafka" else target.service_url
        print(f"demo: source cluster {source.bootstrap}, target cluster ({target_kind}) {address}")
        expected = produce_samples(source.bootstrap)
        print(f"demo: produced {len(expected):,} records to {', '.join(TOPICS)}")
        env = {**os.environ, "SOURCE_BOOTSTRAP": source.bootstrap, "TARGET_BOOTSTRAP": address, "TARGET_PULSAR": address}
        config = CONF / ("demo-mirror.json" if target_kind == "kafka" else "demo-kafka-to-pulsar.json")
        cmd = [sys.executable, "-m", "worker.cli", "run", str(config), "--data-dir", str(work / "data")]
        print(f"demo: {' '.join(cmd[2:])}   (progress in {work / 'connect.log'})")
        read = consume_mirrored if target_kind == "kafka" else read_pulsar
        with open(work / "connect.log", "wb") as log:
            proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
            try:
                seen = read(address, expected, time.monotonic() + 300,
                            lambda n: print(f"demo: mirrored {n:,} / {len(expected):,}", flush=True))
            finally:
                proc.send_signal(signal.SIGTERM)
                code = proc.wait(120)
        tail = (work / "connect.log").read_text(errors="replace").splitlines()
        print("demo: last progress lines of connect run:")
        for line in [x for x in tail if x.startswith("epoch")][-4:]:
            print(f"    {line}")
        lost = [k for k in expected if k not in seen]
        moved_partition = sum(1 for k, part in expected.items()
                              if k in seen and seen[k][0] is not None and seen[k][0] != part)
        no_headers = sum(1 for k in expected if k in seen and ("origin", b"demo") not in seen[k][2])
        print()
        print(f"records produced : {len(expected):,}")
        print(f"records mirrored : {len(seen):,}")
        print(f"lost             : {len(lost):,}")
        print(f"partition changed: {moved_partition:,}   headers missing: {no_headers:,}")
        print(f"connect run exit : {code} (SIGTERM: finished the epoch, flushed, committed)")
        ok = not lost and not moved_partition and not no_headers and code == 0
        print("RESULT: OK, produced = mirrored" if ok else "RESULT: FAILED")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
