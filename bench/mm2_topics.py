"""The many-topics part of ``bench/mm2.py``: ``--topics`` topics (default 200) at ``--topic-rate`` msg/s
each (default 50), one partition each, mirrored by one MirrorMaker 2 whose topic regex covers them,
by one ``connect run`` connector with the same regex (``source.topics.regex``; the shared consumer
is the default), and by the raw client loop subscribed to the regex (the floor).

A round of a contender: fresh source topics ``<tag>-f000..`` on A and their targets
``<tag>.<topic>`` on B (MM2's DefaultReplicationPolicy name; ours and the raw loop write the same
names), the contender started, one probe record per topic that must reach every target (so every
partition is being copied), then a producer process writes the paced load for ``--seconds`` s.
Measured at the target by one watcher reading all the targets: latency per topic (arrival - record
timestamp, the first 5 s left out), the CPU of the contender's process tree over the paced window
(as cores: CPU seconds / wall seconds, and per record) and its peak resident memory over the round.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import e2e
from bench_util import WATCHER_CONSUMER, PeakRss, tree_cpu
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from connectors.kafka.sink import PRODUCER_DEFAULTS
from connectors.kafka.source import CONSUMER_DEFAULTS


def names(tag: str, count: int) -> tuple[list[str], str]:
    """The source topics of a round and the regex (MM2's ``topics``, our ``source.topics.regex``) that
    covers exactly them."""
    return [f"{tag}-f{i:03d}" for i in range(count)], f"{tag}-f[0-9]+"


def target_of(tag: str, topic: str) -> str:
    return f"{tag}.{topic}"


def _admin(bootstrap: str, topics: list[str], create: bool) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = (admin.create_topics([NewTopic(t, 1, 1) for t in topics], operation_timeout=60) if create
               else admin.delete_topics(topics, operation_timeout=60))
    for f in futures.values():
        f.result()


def produce_fanout(bootstrap: str, prefix: str, count: int, rate: float, seconds: float, size: int) -> None:
    """Process entry: ``rate`` msg/s into each of the ``count`` topics of ``prefix`` for ``seconds`` s,
    the topics taken in turn (every topic sees a record every 1/rate s)."""
    topics, _ = names(prefix, count)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    value = b"v" * size
    total = int(rate * seconds) * count
    every = 1 / (rate * count)
    t0 = time.monotonic()
    for i in range(total):
        while True:
            try:
                p.produce(topics[i % count], value, str(i).encode())
                break
            except BufferError:
                p.poll(0.05)
        if i % 50 == 0:
            p.poll(0)
            ahead = i * every - (time.monotonic() - t0)
            if ahead > 0:
                time.sleep(ahead)
    assert p.flush(60) == 0


def raw_fanout(src: str, dst: str, regex: str, tag: str) -> None:
    """Process entry: the raw loop over a regex subscription (consume -> produce to ``<tag>.<topic>``,
    same partition, key, value, headers and timestamp) until SIGTERM."""
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    consumer = Consumer({**CONSUMER_DEFAULTS, "bootstrap.servers": src, "group.id": f"raw-{tag}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    producer = Producer({"bootstrap.servers": dst, **PRODUCER_DEFAULTS})
    consumer.subscribe([f"^{regex}"])
    errors = []
    while not stop:
        for m in consumer.consume(5000, 0.1):
            if m.error() is not None:
                continue  # partition EOF and the like; a lost record shows as missing at the watcher
            while True:
                try:
                    producer.produce(target_of(tag, m.topic()), m.value(), m.key(), partition=m.partition(),
                                     timestamp=m.timestamp()[1], headers=m.headers(),
                                     on_delivery=lambda err, _m: err is not None and errors.append(err))
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.poll(0)
    producer.flush(10)
    consumer.close()
    if errors:
        raise SystemExit(f"raw fan-out: {len(errors)} delivery errors, e.g. {errors[0]}")


class Watcher:
    """One consumer reading every target partition from offset 0: latencies per target topic."""

    def __init__(self, bootstrap: str, targets: list[str], committed: bool) -> None:
        self.consumer = Consumer({**WATCHER_CONSUMER, "bootstrap.servers": bootstrap, "group.id": "watcher",
                                  "isolation.level": "read_committed" if committed else "read_uncommitted"})
        self.consumer.assign([TopicPartition(t, 0, 0) for t in targets])
        self.latencies: dict[str, list[tuple[float, float]]] = {t: [] for t in targets}
        self.probed: set[str] = set()
        self.count = 0

    def until(self, done, timeout: float, proc: subprocess.Popen, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what}: not there after {timeout:.0f} s (probes {len(self.probed)} of "
                                   f"{len(self.latencies)} topics, records {self.count:,})")
            msgs = self.consumer.consume(10000, 0.05)
            if not msgs and proc.poll() is not None:
                raise RuntimeError(f"the mirror exited with {proc.returncode}")
            now = time.time()
            for m in msgs:
                if m.error() is not None:
                    continue
                if m.key() == b"probe":
                    self.probed.add(m.topic())
                else:
                    self.count += 1
                    self.latencies[m.topic()].append((now, now * 1000 - m.timestamp()[1]))

    def close(self) -> None:
        self.consumer.close()


def _probe(bootstrap: str, topics: list[str]) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for t in topics:
        p.produce(t, b"probe", b"probe")
    assert p.flush(30) == 0


def launch(kind: str, a: str, b: str, regex: str, tag: str, work: Path, mm2_launch):
    """The contender's process: ``mm2_launch(tag, regex)`` for MM2; ours and the raw loop here."""
    if kind.startswith("mm2-"):
        return mm2_launch(kind, tag, regex)
    if kind == "raw":
        return e2e._spawn([__file__, "raw-fanout", a, b, regex, tag], work / f"{tag}-raw.log")
    config = {"source.connector.class": "kafka", "source.bootstrap.servers": a, "source.topics.regex": regex,
              "sink.connector.class": "kafka", "sink.bootstrap.servers": b,
              "sink.topic.template": f"{tag}.{{topic}}", "tasks.max": kind.removeprefix("connect-"), **e2e.EXTRA}
    path = work / f"{tag}.json"
    path.write_text(json.dumps({"name": tag, "config": config}))
    return e2e._spawn(["-m", "worker.cli", "run", str(path), "--data-dir", str(work / tag),
                       "--spark-conf", "spark.ui.enabled=false"], work / f"{tag}.log")


def topics_run(kind: str, a: str, b: str, count: int, rate: float, seconds: int, size: int, work: Path, tag: str,
               mm2_launch, committed: bool = True) -> dict[str, float]:
    """One contender, one round of the many-topics load; prints and returns its figures."""
    sources, regex = names(tag, count)
    targets = [target_of(tag, t) for t in sources]
    _admin(a, sources, True)
    _admin(b, targets, True)
    watcher = Watcher(b, targets, committed)
    proc = launch(kind, a, b, regex, tag, work, mm2_launch)
    launched = time.time()
    rss = PeakRss(proc.pid)
    rss.start()
    try:
        _probe(a, sources)
        watcher.until(lambda: len(watcher.probed) == count, 300, proc, f"{kind}: a probe record on every topic")
        started = time.time() - launched
        producer = e2e._spawn([__file__, "produce-fanout", a, tag, str(count), str(rate), str(seconds), str(size)],
                              work / f"{tag}-producer.log")
        cpu0, t0 = tree_cpu(proc.pid), time.monotonic()
        expected = int(rate * seconds) * count
        try:
            watcher.until(lambda: watcher.count >= expected, seconds + 180, proc, f"{kind}: {expected:,} records")
        finally:
            producer.wait(60)
        cores = (tree_cpu(proc.pid) - cpu0) / (time.monotonic() - t0)
    finally:
        peak = rss.stop()
        e2e.stop(proc)
        watcher.close()
    first = min(t for v in watcher.latencies.values() for t, _ in v[:1]) + e2e.WARMUP_S
    per_topic = {t: sorted(x for at, x in v if at >= first) for t, v in watcher.latencies.items()}
    p99s = sorted(e2e.percentile(v, 0.99) for v in per_topic.values() if v)
    every = [x for v in per_topic.values() for x in v]
    out = {"p50_ms": e2e.percentile(every, 0.5), "p99_ms": e2e.percentile(every, 0.99),
           "topic_p99_median_ms": p99s[len(p99s) // 2], "topic_p99_max_ms": p99s[-1],
           "cores": cores, "cpu_us": cores * seconds / max(expected, 1) * 1e6, "rss_mb": peak / 2**20,
           "all_flowing_s": started}
    print(f"    {kind:<10} p50 {out['p50_ms']:6.0f} ms  p99 {out['p99_ms']:6.0f} ms  per-topic p99 median "
          f"{out['topic_p99_median_ms']:6.0f} worst {out['topic_p99_max_ms']:6.0f} ms  CPU {cores:4.2f} cores  peak RSS "
          f"{out['rss_mb']:5.0f} MiB  every topic flowing {started:5.1f} s after launch", flush=True)
    for bootstrap, topics in ((a, sources), (b, targets)):
        _admin(bootstrap, topics, False)
    return out


if __name__ == "__main__":
    if sys.argv[1] == "produce-fanout":
        bootstrap, prefix, count, rate, seconds, size = sys.argv[2:8]
        produce_fanout(bootstrap, prefix, int(count), float(rate), float(seconds), int(size))
    elif sys.argv[1] == "raw-fanout":
        raw_fanout(*sys.argv[2:6])
