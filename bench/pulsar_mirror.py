"""Pulsar mirror throughput: the raw pulsar-client loop vs the framework, Pulsar -> Pulsar and
Kafka -> Pulsar, one task pair each.

One process, the same embedded brokers (pulsar-lite, tansu) and the same source topic for both
sides of a ratio, so the ratio compares like with like:

- raw: the loop a user would write with the clients alone: read (a Pulsar reader from the
  earliest message, or a Kafka consumer), ``send_async`` each message to a batching Pulsar
  producer with the sink's settings (key, properties, event time carried; every send result
  checked), timed from client creation to the final flush;
- framework: one epoch of the pipeline through the Spark driver, then a stop that drains what is
  in flight, timed from job submission until the driver holds the committed positions (the Spark
  session and its Python workers are started, and start positions persisted, before timing).

Usage: python bench/pulsar_mirror.py [--records 200000] [--rounds 3] [--value-size 100]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pulsar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_util import fill_kafka, timed_epoch  # noqa: E402

from connectors.kafka.source import CONSUMER_DEFAULTS  # noqa: E402
from worker.embedded import EmbeddedKafka, EmbeddedPulsar  # noqa: E402
from worker.runtime.spark import build_spark  # noqa: E402

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


def _producer(client: pulsar.Client, topic: str):
    # The sink's defaults: batching (1000 messages, 5 ms), no send timeout, 20,000 pending.
    return client.create_producer(topic, send_timeout_millis=0, block_if_queue_full=True, max_pending_messages=20_000,
                                  batching_enabled=True, batching_max_messages=1000, batching_max_publish_delay_ms=5)


def fill_pulsar(url: str, topic: str, records: int, value_size: int) -> None:
    client = pulsar.Client(url, logger=QUIET)
    producer = _producer(client, topic)
    value, errors = b"v" * value_size, []
    for i in range(records):
        producer.send_async(value, lambda res, _m: errors.append(res) if res != pulsar.Result.Ok else None,
                            partition_key=str(i), properties={"i": "1"}, event_timestamp=1_700_000_000_000 + i)
    producer.flush()
    client.close()
    assert not errors, errors[:3]


def raw_from_pulsar(src: str, dst: str, topic: str, target: str, records: int) -> float:
    t0 = time.perf_counter()
    a, b = pulsar.Client(src, logger=QUIET), pulsar.Client(dst, logger=QUIET)
    reader = a.create_reader(topic, pulsar.MessageId.earliest, receiver_queue_size=5000)
    producer = _producer(b, target)
    errors: list = []

    def done(res, _mid):
        if res != pulsar.Result.Ok:
            errors.append(res)

    send, read = producer.send_async, reader.read_next
    for _ in range(records):
        m = read(10_000)
        send(m.data(), done, partition_key=m.partition_key(), properties=m.properties(),
             event_timestamp=m.event_timestamp())
    producer.flush()
    elapsed = time.perf_counter() - t0
    a.close()
    b.close()
    assert not errors, errors[:3]
    return elapsed


def raw_from_kafka(src: str, dst: str, topic: str, target: str, records: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    t0 = time.perf_counter()
    # the source's consumer settings (fetch.queue.backoff.ms among them: the default pauses a
    # consumer that reads a backlog for a second at a time)
    consumer = Consumer({**CONSUMER_DEFAULTS, "bootstrap.servers": src, "group.id": "raw"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    client = pulsar.Client(dst, logger=QUIET)
    producer = _producer(client, target)
    errors: list = []

    def done(res, _mid):
        if res != pulsar.Result.Ok:
            errors.append(res)

    send, n = producer.send_async, 0
    while n < records:
        for m in consumer.consume(5000, 0.1):
            if m.error() is not None:
                raise RuntimeError(m.error())
            send(m.value(), done, partition_key=m.key().decode(),
                 properties={k: v.decode() for k, v in m.headers() or ()}, event_timestamp=m.timestamp()[1])
            n += 1
    producer.flush()
    elapsed = time.perf_counter() - t0
    consumer.close()
    client.close()
    assert not errors, errors[:3]
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--value-size", type=int, default=100)
    args = ap.parse_args()
    n = args.records
    with tempfile.TemporaryDirectory() as tmp, EmbeddedKafka() as kafka:
        src = EmbeddedPulsar(Path(tmp) / "src").start()
        dst = EmbeddedPulsar(Path(tmp) / "dst").start()
        try:
            print(f"producing {n:,} records ({args.value_size} B values) to Pulsar and to Kafka...", flush=True)
            fill_pulsar(src.service_url, "persistent://public/default/bench", n, args.value_size)
            fill_kafka(kafka.bootstrap, "bench", n, args.value_size, 1)
            spark = build_spark("local[2]", {"spark.ui.enabled": "false"}, app_name="bench")
            spark.sparkContext.parallelize(range(2), 2).map(lambda x: x).collect()  # start Python workers
            pulsar_src = {"source.connector.class": "pulsar", "source.service.url": src.service_url,
                          "source.topics": "persistent://public/default/bench", "source.refresh.topics.interval.ms": "0"}
            kafka_src = {"source.connector.class": "kafka", "source.bootstrap.servers": kafka.bootstrap,
                         "source.topics": "bench", "source.refresh.topics.interval.ms": "0"}
            ratios: dict[str, list[float]] = {"P->P": [], "K->P": []}
            for rnd in range(args.rounds):
                for route, source, raw in (("P->P", pulsar_src, raw_from_pulsar), ("K->P", kafka_src, raw_from_kafka)):
                    tag = route.replace("->", "2").lower()
                    src_addr, topic = ((src.service_url, "persistent://public/default/bench") if route == "P->P"
                                       else (kafka.bootstrap, "bench"))
                    t_raw = raw(src_addr, dst.service_url, topic, f"persistent://public/default/raw-{tag}-{rnd}", n)
                    t_fw = timed_epoch(spark, f"bench-{tag}-{rnd}", {
                        **source, "sink.connector.class": "pulsar", "sink.service.url": dst.service_url,
                        "sink.topic": f"persistent://public/default/fw-{tag}-{rnd}"}, n, 1)
                    ratios[route].append(t_raw / t_fw)
                    print(f"round {rnd + 1} {route}: raw {n / t_raw:,.0f} msg/s, framework 1 task {n / t_fw:,.0f} msg/s,"
                          f" ratio {t_raw / t_fw:.2f}", flush=True)
            spark.stop()
        finally:
            src.stop()
            dst.stop()
    print()
    for route, values in ratios.items():
        print(f"{route}: framework 1 task / raw pulsar-client loop, median of {len(values)} rounds "
              f"{statistics.median(values):.2f} (range {min(values):.2f}-{max(values):.2f}; target >= 0.70)")


if __name__ == "__main__":
    main()
