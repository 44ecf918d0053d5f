"""RocketMQ mirror throughput: a raw loop with the project's RocketMQ client vs the framework,
RocketMQ -> RocketMQ, one task pair.

One process, the same two embedded brokers and the same source topic (one queue) for both sides of
a ratio, so the ratio compares like with like:

- raw: the loop a user would write with the client alone: pull the queue by offset (one pull in
  flight, as many messages per pull as the source asks for) and send what each pull returned as
  batches of the sink's size to the target queue (body, tags, keys and properties carried, the
  message id kept; every send result checked), timed from client creation until every send is
  acknowledged;
- framework: one epoch of the pipeline through the Spark driver, then a stop that drains what is
  in flight, timed from job submission until the driver holds the committed offsets (the Spark
  session and its Python workers are started, and start offsets persisted, before timing).

Usage: python bench/rocketmq_mirror.py [--records 200000] [--rounds 3] [--value-size 100]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_util import timed_epoch  # noqa: E402

from connectors.rocketmq.mapping import message_properties, record_fields  # noqa: E402
from connectors.rocketmq.sync_client import SyncRocketMQClient  # noqa: E402
from worker.embedded import EmbeddedRocketMQ  # noqa: E402
from worker.runtime.spark import build_spark  # noqa: E402

PULL, BATCH = 512, 256  # the source's pull.batch.size and the sink's batch.size defaults


def fill(namesrv: str, topic: str, records: int, value_size: int) -> None:
    value = b"v" * value_size
    with SyncRocketMQClient(namesrv) as c:
        c.create_topic(namesrv, topic, 1, 1)
        pending = []
        for start in range(0, records, BATCH):
            pending.append(c.send_batch(namesrv, topic, 0, [(value, {"KEYS": str(i), "TAGS": "bench", "i": "1",
                                                                     "UNIQ_KEY": f"{i:032X}"})
                                                            for i in range(start, min(start + BATCH, records))]))
            if len(pending) > 64:
                assert all(f.result(30).ok for f in pending)
                pending = []
        assert all(f.result(30).ok for f in pending)


def raw_loop(src: str, dst: str, topic: str, target: str, records: int) -> float:
    t0 = time.perf_counter()
    a, b = SyncRocketMQClient(src), SyncRocketMQClient(dst)
    b.create_topic(dst, target, 1, 1)
    offset, moved, sends = 0, 0, []
    while moved < records:
        result = a.pull(src, "raw", topic, 0, offset, PULL, suspend_timeout=1.0)
        offset = result.next_begin_offset
        batch = []
        for m in result.messages:
            key, value, headers, _ts = record_fields(m)
            batch.append((value, message_properties(key, value, headers, None)))
            if len(batch) == BATCH:
                sends.append(b.send_batch(dst, target, 0, batch))
                batch = []
        if batch:
            sends.append(b.send_batch(dst, target, 0, batch))
        moved += len(result.messages)
    assert all(f.result(60).ok for f in sends)
    elapsed = time.perf_counter() - t0
    a.close()
    b.close()
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--value-size", type=int, default=100)
    args = ap.parse_args()
    n = args.records
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        src = EmbeddedRocketMQ(Path(tmp) / "src").start()
        dst = EmbeddedRocketMQ(Path(tmp) / "dst").start()
        try:
            print(f"producing {n:,} messages ({args.value_size} B bodies) to the source broker...", flush=True)
            fill(src.namesrv, "Bench", n, args.value_size)
            spark = build_spark("local[2]", {"spark.ui.enabled": "false"}, app_name="bench")
            spark.sparkContext.parallelize(range(2), 2).map(lambda x: x).collect()  # start Python workers
            for rnd in range(args.rounds):
                t_raw = raw_loop(src.namesrv, dst.namesrv, "Bench", f"Raw{rnd}", n)
                t_fw = timed_epoch(spark, f"bench-r2r-{rnd}", {
                    "source.connector.class": "rocketmq", "source.namesrv.addr": src.namesrv, "source.topics": "Bench",
                    "source.refresh.topics.interval.ms": "0", "sink.connector.class": "rocketmq",
                    "sink.namesrv.addr": dst.namesrv, "sink.topic": f"Fw{rnd}", "sink.auto.create.topics": "true"}, n, 1)
                ratios.append(t_raw / t_fw)
                print(f"round {rnd + 1} R->R: raw {n / t_raw:,.0f} msg/s, framework 1 task {n / t_fw:,.0f} msg/s, "
                      f"ratio {t_raw / t_fw:.2f}", flush=True)
            spark.stop()
        finally:
            src.stop()
            dst.stop()
    print()
    print(f"R->R: framework 1 task / raw client loop, median of {len(ratios)} rounds {statistics.median(ratios):.2f} "
          f"(range {min(ratios):.2f}-{max(ratios):.2f}; target >= 0.70)")


if __name__ == "__main__":
    main()
