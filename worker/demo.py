"""The README demo: two embedded brokers, sample data, ``connect run``, a check.

1. starts two tansu brokers on free loopback ports (source and target clusters); with
   ``--target pulsar`` (``make demo-pulsar``) the target is a pulsar-lite broker instead, and the
   run bridges Kafka to Pulsar (``conf/demo-kafka-to-pulsar.json``);
2. produces sample orders to ``demo.orders`` (3 partitions) and ``demo.payments`` (2 partitions);
3. runs ``connect run conf/demo-mirror.json`` as a separate process, exactly as a user would;
4. reads ``mirror.demo.*`` on the target until every record arrived (Pulsar: with the Pulsar
   source's reader guards, :mod:`connectors.pulsar.guards`), stops the connector with SIGTERM (it
   finishes its epoch, flushes and commits), and prints produced vs mirrored.

Exit status 0 only when every produced record was mirrored with key, headers (Pulsar: properties)
and, Kafka to Kafka, partition. Otherwise the reasons: which topic is short and by how much, and
whether ``connect run`` says it committed them (then the records are on the target and the check
could not read them back).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
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
DEADLINE_S = 300  # the check's longest wait for the mirrored records
IDLE_LIMIT_S = 90  # ... and for the next one: Spark's start takes 10-40 s, records then flow every epoch
STALL_CHECK_MS = 1000  # the Pulsar readers' stall check (the source's reader.stall.check.ms; its default 5 s)


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


def consume_mirrored(bootstrap: str, expected: dict, deadline: float, keep_going) -> dict:
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
                if not keep_going(len(seen)):
                    break
    finally:
        consumer.close()
    return seen


def read_pulsar(service_url: str, expected: dict, deadline: float, keep_going) -> dict:
    """The Pulsar side of the check: every message of each mirrored topic from the earliest, read
    with the Pulsar source's reader guards. pulsar-lite's readers deliver messages again and stall
    in most runs (its log: dropped connections, "Flow-triggered dispatch failed"); plain readers
    left this check at 12,204 / 50,000 for minutes while all 50,000 were stored. Messages delivered
    again are dropped, and a reader that re-delivers, or is idle for STALL_CHECK_MS while the
    broker has more, is opened again after its last message."""
    import pulsar

    from connectors.pulsar.guards import TopicReaders

    prefix = "persistent://public/default/mirror."
    client = pulsar.Client(service_url, logger=logging.getLogger("pulsar-client"))  # to check.log (see main)
    seen: dict[tuple[str, bytes], tuple[int | None, bytes, list]] = {}
    last_report = 0.0
    try:
        readers = TopicReaders(client, [prefix + t for t in TOPICS], stall_ms=STALL_CHECK_MS)
        while time.monotonic() < deadline and len(seen) < len(expected):
            for name, m in readers.read():
                seen[(name.removeprefix(prefix), m.data())] = (None, m.partition_key().encode(),
                                                              [(k, v.encode()) for k, v in m.properties().items()])
            if time.monotonic() - last_report > 2:
                last_report = time.monotonic()
                if not keep_going(len(seen)):
                    break
        if readers.readers_reopened or readers.duplicates_dropped:
            print(f"demo: the check's readers were opened again {readers.readers_reopened} time(s) and dropped "
                  f"{readers.duplicates_dropped:,} message(s) delivered twice (pulsar-lite's reader stalls; see check.log)")
    finally:
        client.close()
    return seen


def committed_total(log: str) -> int | None:
    """The last ``total N records committed since start`` that ``connect run`` printed, None before its first."""
    totals = re.findall(r"total ([\d,]+) records committed", log)
    return int(totals[-1].replace(",", "")) if totals else None


def why_failed(expected: dict, seen: dict, committed: int | None, timed_out: str | None) -> list[str]:
    """What is short, where, and what the mirror itself says it committed: a shortfall with every
    record committed means the check could not read them back, not that the bridge lost them."""
    reasons = []
    for topic in TOPICS:
        want = sum(1 for t, _ in expected if t == topic)
        got = sum(1 for t, _ in seen if t == topic)
        if got < want:
            reasons.append(f"mirror.{topic}: {got:,} of {want:,} read ({want - got:,} short)")
    if reasons:
        if committed is None:
            reasons.append("connect.log shows no commit: the mirror never finished an epoch")
        elif committed >= len(expected):
            reasons.append(f"connect.log says {committed:,} records committed (all): they were written, "
                           "the check could not read them all back from the target")
        else:
            reasons.append(f"connect.log says {committed:,} of {len(expected):,} records committed: "
                           "the mirror did not move them all")
    if timed_out:
        reasons.append(timed_out)
    return reasons


def watch(total: int, started: float):
    """A progress line every call; False once nothing new arrived for IDLE_LIMIT_S (stop waiting)."""
    state = {"count": -1, "since": time.monotonic()}

    def keep_going(count: int) -> bool:
        now = time.monotonic()
        print(f"demo: mirrored {count:,} / {total:,}   ({now - started:.0f} s)", flush=True)
        if count != state["count"]:
            state.update(count=count, since=now)
        return now - state["since"] < IDLE_LIMIT_S

    return keep_going


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Run the demo: sample data mirrored between two embedded brokers.")
    ap.add_argument("--target", choices=("kafka", "pulsar"), default="kafka",
                    help="the target cluster's broker: kafka (tansu, the default) or pulsar (pulsar-lite)")
    target_kind = ap.parse_args(argv).target
    work = Path(tempfile.mkdtemp(prefix="connect-demo-"))
    print(f"demo: working directory {work}")
    # The check's own client logs (pulsar-client's, the reader guards' warnings) go to a file: on the
    # terminal they would bury the progress lines; a failure points there.
    logging.basicConfig(filename=work / "check.log", level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
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
                started = time.monotonic()
                seen = read(address, expected, started + DEADLINE_S, watch(len(expected), started))
                waited = time.monotonic() - started
            finally:
                proc.send_signal(signal.SIGTERM)
                code = proc.wait(120)
        log_text = (work / "connect.log").read_text(errors="replace")
        print("demo: last progress lines of connect run:")
        for line in [x for x in log_text.splitlines() if x.startswith("epoch")][-4:]:
            print(f"    {line}")
        missing = [k for k in expected if k not in seen]
        moved_partition = sum(1 for k, part in expected.items()
                              if k in seen and seen[k][0] is not None and seen[k][0] != part)
        no_headers = sum(1 for k in expected if k in seen and ("origin", b"demo") not in seen[k][2])
        print()
        print(f"records produced : {len(expected):,}")
        print(f"records mirrored : {len(seen):,}   (read back from the target in {waited:.0f} s)")
        print(f"missing          : {len(missing):,}")
        print(f"partition changed: {moved_partition:,}   headers missing: {no_headers:,}")
        print(f"connect run exit : {code} (SIGTERM: finished the epoch, flushed, committed)")
        ok = not missing and not moved_partition and not no_headers and code == 0
        if ok:
            print("RESULT: OK, produced = mirrored")
            return 0
        gave_up = None
        if missing:
            gave_up = (f"the check stopped after {waited:.0f} s: " + ("nothing new arrived for "
                       f"{IDLE_LIMIT_S} s" if waited < DEADLINE_S else f"its {DEADLINE_S} s deadline passed"))
        reasons = why_failed(expected, seen, committed_total(log_text), gave_up)
        if moved_partition or no_headers:
            reasons.append(f"{moved_partition:,} record(s) landed in another partition, {no_headers:,} lost their headers")
        if code != 0:
            reasons.append(f"connect run exited {code} (see {work / 'connect.log'})")
        reasons.append(f"logs: {work / 'connect.log'}, {work / 'check.log'}, {work / 'target-broker.log'}")
        print("RESULT: FAILED")
        for reason in reasons:
            print(f"  - {reason}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
