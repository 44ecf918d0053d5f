"""Kafka -> Kafka mirror throughput: raw confluent-kafka loop vs the framework (1 and 2 tasks).

Everything runs in one process against the same two embedded tansu brokers and the same source
topic (2 partitions), so the ratios compare like with like:

- raw: one consume -> produce loop (the source's consumer settings; the sink's producer settings:
  idempotent, acks=all, delivery reports checked), timed from client creation to the final flush;
- framework, 1 task and 2 tasks: one epoch of the pipeline through the Spark driver, then a stop
  (which drains what is in flight), timed from job submission until the driver has the committed
  offsets (task start, drain and Spark job overhead included). The Spark session and its Python
  workers are started, and the one-time epoch that persists start positions has run, before timing.
- CPU per record: user + system CPU of this process tree (the bench process, the Spark JVM, the
  Python workers; not the brokers, which run in sessions of their own) over the same timed span,
  divided by the records moved (``bench_util.tree_cpu``). The raw loop runs in the bench process,
  so the idle Spark JVM counts for it too.

Usage: python bench/kafka_mirror.py [--records 200000] [--rounds 2] [--value-size 100] [--offset-syncs MAX_LAG]

``--offset-syncs 100`` measures instead what offset syncs cost: a replication flow of 1 task with
``offset.syncs.topic`` against the same flow without it, side by side per round.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_util import fill_kafka, timed_epoch, tree_cpu  # noqa: E402

from connectors.kafka.sink import PRODUCER_DEFAULTS  # noqa: E402
from connectors.kafka.source import CONSUMER_DEFAULTS  # noqa: E402
from worker.embedded import EmbeddedKafka  # noqa: E402
from worker.runtime.spark import build_spark  # noqa: E402

PARTITIONS = 2


def raw_loop(src: str, dst: str, topic: str, target: str, records: int) -> float:
    t0 = time.perf_counter()
    errors = []
    consumer = Consumer({**CONSUMER_DEFAULTS, "bootstrap.servers": src, "group.id": "raw"})
    producer = Producer({"bootstrap.servers": dst, **PRODUCER_DEFAULTS})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)

    produce = producer.produce
    n = 0
    while n < records:
        for m in consumer.consume(5000, 0.1):
            if m.error() is not None:
                raise RuntimeError(m.error())
            while True:
                try:
                    produce(target, m.value(), m.key(), partition=m.partition(), on_delivery=on_delivery,
                            timestamp=m.timestamp()[1], headers=m.headers())
                    break
                except BufferError:
                    producer.poll(0.05)
            n += 1
        producer.poll(0)
    while producer.flush(1.0):
        pass
    elapsed = time.perf_counter() - t0
    consumer.close()
    assert not errors, errors[:3]
    return elapsed


def framework_epoch(spark, src: str, dst: str, topic: str, target: str, records: int, tasks: int,
                    cpu: list[float] | None = None, **extra: str) -> float:
    return timed_epoch(spark, f"bench-{target}", {
        "source.connector.class": "kafka", "source.bootstrap.servers": src, "source.topics": topic,
        "source.refresh.topics.interval.ms": "0",
        "sink.connector.class": "kafka", "sink.bootstrap.servers": dst, "sink.topic": target, **extra}, records, tasks,
        cpu)


def raw_cpu(src: str, dst: str, topic: str, target: str, records: int, cpu: list[float]) -> float:
    """:func:`raw_loop`, its CPU seconds (this process tree) appended to ``cpu``."""
    c0 = tree_cpu(os.getpid())
    elapsed = raw_loop(src, dst, topic, target, records)
    cpu.append(tree_cpu(os.getpid()) - c0)
    return elapsed


def offset_syncs_rounds(spark, a: str, b: str, topic: str, records: int, rounds: int, max_lag: int) -> None:
    """A replication flow (cluster aliases set) of 1 task with ``offset.syncs.topic`` against the same
    flow without it, side by side per round: what the offset syncs (one every ``max_lag`` records
    per partition) cost per record."""
    replication = {"source.cluster.alias": "A", "sink.cluster.alias": "B"}
    times: dict[str, list[float]] = {"plain": [], "syncs": []}
    for rnd in range(rounds):
        times["plain"].append(framework_epoch(spark, a, b, topic, f"rp-{rnd}", records, 1, **replication))
        times["syncs"].append(framework_epoch(spark, a, b, topic, f"rs-{rnd}", records, 1, **replication,
                                              **{"offset.syncs.topic": f"syncs-{rnd}",
                                                 "offset.syncs.max.lag": str(max_lag)}))
        print(f"round {rnd + 1}: without syncs {records / times['plain'][-1]:,.0f} msg/s, with syncs "
              f"{records / times['syncs'][-1]:,.0f} msg/s | with/without {times['plain'][-1] / times['syncs'][-1]:.3f}",
              flush=True)
    paired = statistics.median(p / s for p, s in zip(times["plain"], times["syncs"], strict=True))
    extra_us = (statistics.median(times["syncs"]) - statistics.median(times["plain"])) / records * 1e6
    print()
    print(f"offset syncs every {max_lag} records per partition ({records // max_lag:,} syncs per run)")
    print(f"ratio with syncs / without   {paired:.3f} median of rounds   (target >= 0.95)")
    print(f"cost per record              {extra_us:+.2f} us (median times)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a connector key for every framework run, e.g. sink.producer.shared=false")
    ap.add_argument("--offset-syncs", type=int, default=0, metavar="MAX_LAG",
                    help="instead: a replication flow with offset.syncs.topic (offset.syncs.max.lag=MAX_LAG) "
                         "against the same flow without it")
    args = ap.parse_args()
    records = args.records - args.records % PARTITIONS
    extra = dict(kv.split("=", 1) for kv in args.set)

    with EmbeddedKafka() as a, EmbeddedKafka() as b:
        topic = "bench-source"
        print(f"producing {records:,} records ({args.value_size} B values, {PARTITIONS} partitions)...", flush=True)
        fill_kafka(a.bootstrap, topic, records, args.value_size, PARTITIONS)
        spark = build_spark("local[2]", {"spark.ui.enabled": "false"}, app_name="bench")
        spark.sparkContext.parallelize(range(2), 2).map(lambda x: x).collect()  # start Python workers
        if args.offset_syncs:
            offset_syncs_rounds(spark, a.bootstrap, b.bootstrap, topic, records, args.rounds, args.offset_syncs)
            spark.stop()
            return
        times: dict[str, list[float]] = {"raw": [], "fw1": [], "fw2": []}
        cpu: dict[str, list[float]] = {"raw": [], "fw1": [], "fw2": []}
        for rnd in range(args.rounds):
            times["raw"].append(raw_cpu(a.bootstrap, b.bootstrap, topic, f"raw-{rnd}", records, cpu["raw"]))
            times["fw1"].append(framework_epoch(spark, a.bootstrap, b.bootstrap, topic, f"fw1-{rnd}", records, 1,
                                                cpu["fw1"], **extra))
            times["fw2"].append(framework_epoch(spark, a.bootstrap, b.bootstrap, topic, f"fw2-{rnd}", records, 2,
                                                cpu["fw2"], **extra))
            print(f"round {rnd + 1}: " + "  ".join(f"{k} {records / v[-1]:,.0f} msg/s" for k, v in times.items())
                  + f"  | 1 task/raw {times['raw'][-1] / times['fw1'][-1]:.2f}"
                  + f"  2 tasks/1 task {times['fw1'][-1] / times['fw2'][-1]:.2f}"
                  + "  | CPU us/record " + " ".join(f"{k} {v[-1] / records * 1e6:.2f}" for k, v in cpu.items()),
                  flush=True)
        spark.stop()

    rate = {k: records / statistics.median(v) for k, v in times.items()}
    print()
    print(f"records per run           {records:,}")
    print(f"raw confluent-kafka loop  {rate['raw']:>10,.0f} msg/s")
    print(f"framework, 1 task         {rate['fw1']:>10,.0f} msg/s")
    print(f"framework, 2 tasks        {rate['fw2']:>10,.0f} msg/s")
    paired_1 = statistics.median(r / f for r, f in zip(times["raw"], times["fw1"], strict=True))
    paired_2 = statistics.median(f1 / f2 for f1, f2 in zip(times["fw1"], times["fw2"], strict=True))
    print(f"ratio 1 task / raw        {rate['fw1'] / rate['raw']:.2f} of medians, {paired_1:.2f} median of rounds"
          "   (target >= 0.90)")
    print(f"ratio 2 tasks / 1 task    {rate['fw2'] / rate['fw1']:.2f} of medians, {paired_2:.2f} median of rounds"
          "   (target >= 1.8)")
    us = {k: statistics.median(v) / records * 1e6 for k, v in cpu.items()}
    print(f"CPU per record            raw {us['raw']:.2f} us, 1 task {us['fw1']:.2f} us, 2 tasks {us['fw2']:.2f} us "
          "(median of rounds; this process tree)")
    print(f"CPU 1 task / raw          {us['fw1'] / us['raw']:.2f}   (target <= 1.25)")
    print(f"CPU 2 tasks / 1 task      {us['fw2'] / us['fw1']:.2f}   (target <= 1.05)")


if __name__ == "__main__":
    main()
