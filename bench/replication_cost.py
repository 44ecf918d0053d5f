"""What a replication flow costs: the same Kafka -> Kafka flow with replication off, with the
origin chain on (records born in the source), and with records that already went through two
copies (a two-hop chain read, extended and written), against the raw client loop of the same run.

Two parts, both in one process:

- stages: the replication stages alone on in-memory batches (no broker), nanoseconds per record:
  off (no stage), on (born here), two-hop, and a full mesh's one-path stage (a record of the
  group's topology, dropped or forwarded by its origin); on records (the record path) and as the
  fused step on native batches of confluent-kafka messages (the native path);
- wire: one epoch through the Spark driver against two embedded tansu brokers (as
  ``bench/kafka_mirror.py``), timed to the committed offsets, and the raw confluent-kafka
  consume -> produce loop moving the same records, each printed as a ratio to the raw loop; and
  the CPU per record of this process tree in the same spans (``bench_util.tree_cpu``): the flow
  of records carrying a two-hop chain with replication on against the same records with it off.

Usage: python bench/replication_cost.py [--records 100000] [--rounds 2] [--value-size 100]
"""

from __future__ import annotations

import statistics
import sys
import time
from itertools import permutations
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_util import bench_args, fill_kafka, timed_epoch  # noqa: E402
from confluent_kafka import Message  # noqa: E402
from kafka_mirror import PARTITIONS, raw_cpu  # noqa: E402

from connect.records import make_record  # noqa: E402
from connect.tasks.replication import DEFAULT_ORIGIN_PROPERTY, replication_stages  # noqa: E402
from connect.tasks.stages import StageChain  # noqa: E402
from connect.tasks.topology import Flow, Topology  # noqa: E402
from worker.embedded import EmbeddedKafka  # noqa: E402
from worker.runtime.spark import build_spark  # noqa: E402

BATCH = 5_000
TWO_HOPS = [("i", b"1"), (DEFAULT_ORIGIN_PROPERTY, b"X,Y")]


def _records(n: int, headers) -> list:
    sp = [{"topic": "t", "partition": p} for p in range(PARTITIONS)]
    return [make_record("t", str(i).encode(), b"v" * 100, list(headers), 1, sp[i % PARTITIONS], {"offset": i},
                        i % PARTITIONS) for i in range(n)]


def _native(n: int, headers):
    """A native batch of ``n`` confluent-kafka messages of one topic (what the Kafka source polls)."""
    from connect.batch import NativeBatch
    from connectors.kafka.native import KIND, KafkaCodec

    messages = []
    for i in range(n):
        m = Message()
        m.set_topic("t")
        m.set_key(str(i).encode())
        m.set_value(b"v" * 100)
        m.set_headers(list(headers))
        messages.append(m)
    sps = {"t": {p: {"topic": "t", "partition": p} for p in range(PARTITIONS)}}
    return NativeBatch(KIND, messages, KafkaCodec(sps), {}, "t")


def native_stage_cost(records: int) -> dict[str, float]:
    """ns per record of the fused replication step on native batches (``connect.tasks.fused``), best of 3;
    {} before the native path existed."""
    try:
        from connect.tasks.fused import FusedReplication
    except ImportError:
        return {}
    mesh = Topology(Flow(s, t, frozenset({"t"})) for s, t in permutations("ABX", 2))
    cases = {
        "on": (FusedReplication("A", "B", prop=DEFAULT_ORIGIN_PROPERTY), [("i", b"1")]),
        "two-hop": (FusedReplication("A", "B", prop=DEFAULT_ORIGIN_PROPERTY), TWO_HOPS),
        "mesh, forwarded": (FusedReplication("A", "B", prop=DEFAULT_ORIGIN_PROPERTY, topology=mesh), [("i", b"1")]),
        "mesh, dropped": (FusedReplication("A", "B", prop=DEFAULT_ORIGIN_PROPERTY, topology=mesh),
                          [("i", b"1"), (DEFAULT_ORIGIN_PROPERTY, b"X")]),
    }
    out = {}
    for name, (fused, headers) in cases.items():
        batches = [_native(BATCH, headers) for _ in range(max(records // BATCH, 1))]
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            for batch in batches:
                fused.apply(batch)
            best = min(best, time.perf_counter() - t0)
        out[name] = best / (len(batches) * BATCH) * 1e9
    return out


def stage_cost(records: int) -> dict[str, float]:
    """ns per record of each configuration's stages (best of 3)."""
    mesh = Topology(Flow(s, t, frozenset({"t"})) for s, t in permutations("ABX", 2))
    cases = {
        "off": (StageChain([]), [("i", b"1")]),
        "on": (StageChain(replication_stages("A", "B")), [("i", b"1")]),
        "two-hop": (StageChain(replication_stages("A", "B")), TWO_HOPS),
        "mesh, forwarded": (StageChain(replication_stages("A", "B", topology=mesh)), [("i", b"1")]),
        "mesh, dropped": (StageChain(replication_stages("A", "B", topology=mesh)),
                          [("i", b"1"), (DEFAULT_ORIGIN_PROPERTY, b"X")]),
    }
    out = {}
    for name, (chain, headers) in cases.items():
        batches = [_records(BATCH, headers) for _ in range(max(records // BATCH, 1))]
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            for batch in batches:
                chain.apply(batch)
            best = min(best, time.perf_counter() - t0)
        out[name] = best / (len(batches) * BATCH) * 1e9
    return out


def flow(spark, src: str, dst: str, topic: str, target: str, records: int, replication: bool,
         cpu: list[float]) -> float:
    config = {"source.connector.class": "kafka", "source.bootstrap.servers": src, "source.topics": topic,
              "source.refresh.topics.interval.ms": "0",
              "sink.connector.class": "kafka", "sink.bootstrap.servers": dst, "sink.topic": target}
    if replication:
        config.update({"source.cluster.alias": "A", "sink.cluster.alias": "B"})
    return timed_epoch(spark, f"bench-{target}", config, records, 1, cpu)


def main() -> None:
    args = bench_args(__doc__, 100_000)
    records = args.records - args.records % PARTITIONS

    print("stages alone, ns per record (best of 3):", flush=True)
    cost = stage_cost(records)
    for name, ns in cost.items():
        print(f"  {name:<16} {ns:>8.0f} ns" + (f"   (+{ns - cost['off']:.0f} ns over off)" if name != "off" else ""))
    print("the same on native batches (the fused step of the native path), ns per record (best of 3):", flush=True)
    for name, ns in native_stage_cost(records).items():
        print(f"  {name:<16} {ns:>8.0f} ns")

    with EmbeddedKafka() as a, EmbeddedKafka() as b:
        print(f"producing 2 x {records:,} records ({args.value_size} B values, {PARTITIONS} partitions)...", flush=True)
        fill_kafka(a.bootstrap, "plain", records, args.value_size, PARTITIONS)
        fill_kafka(a.bootstrap, "twohop", records, args.value_size, PARTITIONS, headers=TWO_HOPS)
        spark = build_spark("local[2]", {"spark.ui.enabled": "false"}, app_name="bench")
        spark.sparkContext.parallelize(range(2), 2).map(lambda x: x).collect()  # start Python workers
        cases = {"off": ("plain", False), "on": ("plain", True), "two-hop off": ("twohop", False),
                 "two-hop": ("twohop", True)}
        times: dict[str, list[float]] = {"raw": [], **{k: [] for k in cases}}
        cpu: dict[str, list[float]] = {k: [] for k in times}
        for rnd in range(args.rounds):
            times["raw"].append(raw_cpu(a.bootstrap, b.bootstrap, "plain", f"raw-{rnd}", records, cpu["raw"]))
            for name, (topic, replication) in cases.items():
                times[name].append(flow(spark, a.bootstrap, b.bootstrap, topic, f"{name.replace(' ', '-')}-{rnd}",
                                        records, replication, cpu[name]))
            print(f"round {rnd + 1}: " + "  ".join(f"{k} {records / v[-1]:,.0f} msg/s" for k, v in times.items())
                  + "  | CPU us/record " + " ".join(f"{k} {v[-1] / records * 1e6:.2f}" for k, v in cpu.items()),
                  flush=True)
        spark.stop()

    rate = {k: records / statistics.median(v) for k, v in times.items()}
    print()
    print(f"records per run              {records:,}")
    for name in times:
        paired = statistics.median(r / x for r, x in zip(times["raw"], times[name], strict=True))
        print(f"{name:<28} {rate[name]:>10,.0f} msg/s   / raw {rate[name] / rate['raw']:.2f} of medians, "
              f"{paired:.2f} median of rounds   / off {rate[name] / rate['off']:.2f}")
    us = {k: statistics.median(v) / records * 1e6 for k, v in cpu.items()}
    print("CPU per record (median of rounds, this process tree): "
          + ", ".join(f"{k} {v:.2f} us" for k, v in us.items()))
    print(f"CPU two-hop chain, replication on / off   {us['two-hop'] / us['two-hop off']:.2f}   (target <= 1.10)")


if __name__ == "__main__":
    main()
