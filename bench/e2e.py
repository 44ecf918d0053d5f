"""What users see: `connect run` as a process, measured from outside at the target topic.

Two embedded tansu brokers (source, target). Every mirror runs as its own process and a watcher
consumer in this process reads the target topic from the start, noting when each record arrives:

- throughput: ``--records`` records (100 B values, 2 partitions) are produced to a fresh source
  topic, then the mirror starts; steady state = records between the 10% and 90% arrival marks
  divided by the time between those marks. Mirrors (``--mirrors``): the raw confluent-kafka
  consume->produce loop (``bench/e2e.py raw-loop``, the source's consumer and the sink's producer
  settings), `connect run` with 1 and with 2 task pairs, each in the same round. Also: seconds from
  launch to the first record at the target, and the longest stall inside the steady window: the
  longest time no record arrived at all, and the longest one partition went without a record.
- latency: a producer process writes ``--rate`` msg/s for ``--seconds`` s while the mirror runs;
  latency = arrival at the target - record timestamp (set at produce time, kept by the mirror),
  the first 5 s left out. Against the raw loop and against no mirror at all (the watcher reads
  the source topic). p50/p95/p99/max, and p99 per second so spikes at epoch ends show.
- CPU per record (throughput rounds): user + system CPU of the mirror's whole process tree (the
  `connect run` process, its Spark JVM and Python workers; the raw loop's process) between the 10%
  and 90% arrival marks, divided by the records that arrived in between (``bench_util.tree_cpu``).

The watcher's consumer never backs off for a full local queue (``bench_util.WATCHER_CONSUMER``):
with librdkafka's default it measured itself, at ~150,000 msg/s, whenever it fell behind.

Usage: python bench/e2e.py [--records 600000] [--rounds 3] [--rate 20000] [--seconds 25]
       [--epoch-ms N] [--only throughput|latency|cpu] [--mirrors raw,connect-1,connect-2]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench_util import WATCHER_CONSUMER, tree_cpu  # noqa: E402

from connectors.kafka.sink import PRODUCER_DEFAULTS  # noqa: E402
from connectors.kafka.source import CONSUMER_DEFAULTS  # noqa: E402
from worker.embedded import EmbeddedKafka  # noqa: E402

PARTITIONS = 2
EXTRA: dict[str, str] = {}  # connector keys of every `connect run` mirror (--set)
MIRRORS = ("raw", "connect-1", "connect-2")
WARMUP_S = 5.0
STALL_S = 0.1  # longest stall inside the steady window that a mirror may show (issue 36)


# -- processes under test ------------------------------------------------------------------------
def raw_loop(src: str, dst: str, topic: str, target: str) -> None:
    """The raw client loop, as a process: consume -> produce until SIGTERM, delivery reports checked."""
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    consumer = Consumer({**CONSUMER_DEFAULTS, "bootstrap.servers": src, "group.id": "raw"})
    producer = Producer({"bootstrap.servers": dst, **PRODUCER_DEFAULTS})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    errors = []

    def on_delivery(err, _msg):
        if err is not None:
            errors.append(err)

    while not stop:
        for m in consumer.consume(5000, 0.1):
            if m.error() is not None:
                raise RuntimeError(m.error())
            while True:
                try:
                    producer.produce(target, m.value(), m.key(), partition=m.partition(), on_delivery=on_delivery,
                                     timestamp=m.timestamp()[1], headers=m.headers())
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.poll(0)
    producer.flush(10)
    if errors:
        raise SystemExit(f"raw loop: {len(errors)} delivery errors, e.g. {errors[0]}")


def produce(bootstrap: str, topic: str, records: int, rate: float, value_size: int) -> None:
    """``records`` records, round robin over the partitions; at ``rate`` msg/s (0 = as fast as possible)."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5 if rate else 20, "batch.num.messages": 10000})
    value = b"v" * value_size
    t0 = time.monotonic()
    for i in range(records):
        while True:
            try:
                p.produce(topic, value, str(i).encode(), partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.05)
        if rate and i % 50 == 0:
            p.poll(0)
            ahead = i / rate - (time.monotonic() - t0)
            if ahead > 0:
                time.sleep(ahead)
    assert p.flush(60) == 0


def _spawn(args: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *args], cwd=ROOT, stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def start_mirror(kind: str, src: str, dst: str, topic: str, target: str, work: Path, epoch_ms: int | None,
                 extra: dict[str, str] | None = None) -> subprocess.Popen:
    """``kind``'s process (``raw`` or ``connect-N``), mirroring ``topic`` to ``target``; ``extra``:
    connector keys of this mirror only, over ``EXTRA``."""
    if kind == "raw":
        return _spawn([__file__, "raw-loop", src, dst, topic, target], work / f"{target}.log")
    tasks = {"connect-1": 1, "connect-2": 2}[kind]
    config = {"source.connector.class": "kafka", "source.bootstrap.servers": src, "source.topics": topic,
              "sink.connector.class": "kafka", "sink.bootstrap.servers": dst, "sink.topic": target,
              "tasks.max": str(tasks)}
    if epoch_ms:
        config["epoch.max.ms"] = str(epoch_ms)
    config.update(EXTRA)
    config.update(extra or {})
    path = work / f"{target}.json"
    path.write_text(json.dumps({"name": target, "config": config}))
    return _spawn(["-m", "worker.cli", "run", str(path), "--data-dir", str(work / target),
                   "--spark-conf", "spark.ui.enabled=false"], work / f"{target}.log")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# -- the watcher ---------------------------------------------------------------------------------
def watch(bootstrap: str, topic: str, expected: int, timeout: float, proc: subprocess.Popen | None = None,
          latency: bool = True, probe: bool = False, cpu: dict | None = None, marks: tuple = (0.1, 0.9),
          committed: bool = True, start: dict[int, int] | None = None):
    """Read ``topic`` from the start until ``expected`` records arrived: [(arrival, count, [latencies ms],
    {partition: count})].
    The probe record (key ``probe``) counts only with ``probe=True``. ``cpu``: gets the CPU seconds of
    ``proc``'s process tree when 10% and 90% (``marks``) of the records had arrived (keys 0.1 and 0.9,
    with the counts then under ``("n", mark)``). ``committed``: read ``read_committed`` (records of a
    transaction arrive when it commits), else ``read_uncommitted`` (when they are written).
    ``start``: the offset to read each partition from (default 0)."""
    c = Consumer({**WATCHER_CONSUMER, "bootstrap.servers": bootstrap, "group.id": "watcher",
                  "isolation.level": "read_committed" if committed else "read_uncommitted"})
    c.assign([TopicPartition(topic, p, (start or {}).get(p, 0)) for p in range(PARTITIONS)])
    arrivals, seen = [], 0
    deadline = time.monotonic() + timeout
    try:
        while seen < expected and time.monotonic() < deadline:
            msgs = c.consume(10000, 0.05)
            if not msgs:
                if proc is not None and proc.poll() is not None:
                    raise RuntimeError(f"the mirror exited with {proc.returncode}")
                continue
            now = time.time()
            good = [m for m in msgs if m.error() is None and (probe or m.key() != b"probe")]
            seen += len(good)
            if cpu is not None and proc is not None:
                for mark in marks:
                    if mark not in cpu and seen >= mark * expected:
                        cpu[mark], cpu[("n", mark)] = tree_cpu(proc.pid), seen
            parts: dict[int, int] = {}
            for m in good:
                parts[m.partition()] = parts.get(m.partition(), 0) + 1
            arrivals.append((now, len(good), [now * 1000 - m.timestamp()[1] for m in good] if latency else (), parts))
    finally:
        c.close()
    if seen < expected:
        raise RuntimeError(f"only {seen} of {expected} records reached {topic} within {timeout:.0f} s")
    return arrivals


def _marks(arrivals, total: int) -> dict[float, float]:
    """When 10% and 90% of ``total`` had arrived."""
    marks, count = {}, 0
    for t, n, *_ in arrivals:
        count += n
        for frac in (0.1, 0.9):
            if frac not in marks and count >= frac * total:
                marks[frac] = t
    return marks


def steady_rate(arrivals, total: int) -> float:
    marks = _marks(arrivals, total)
    return 0.8 * total / max(marks[0.9] - marks[0.1], 1e-9)


def longest_stalls(arrivals, total: int) -> tuple[float, float]:
    """Inside the steady window (10% to 90% of ``total`` arrived): the longest time without any
    record arriving, and the longest time one partition went without a record (a pair that waits
    while its sibling moves on shows only there). Seconds, from the watcher's arrival times; of a
    gap that began before the window, the part inside it."""
    marks = _marks(arrivals, total)
    start, end = marks[0.1], marks[0.9]
    overall = per_partition = 0.0
    previous: float | None = None
    last: dict[int, float] = {}
    for t, n, _, parts in arrivals:
        if not n:
            continue
        if start <= t <= end:
            if previous is not None:
                overall = max(overall, t - max(previous, start))
            for p in parts:
                if p in last:
                    per_partition = max(per_partition, t - max(last[p], start))
        previous = t
        for p in parts:
            last[p] = t
    return overall, per_partition


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(int(q * len(values)), len(values) - 1)] if values else float("nan")


# -- the two measurements ------------------------------------------------------------------------
def throughput_round(rnd: int, a: EmbeddedKafka, b: EmbeddedKafka, records: int, value_size: int, work: Path,
                     epoch_ms: int | None, kinds: tuple[str, ...] = MIRRORS) -> dict[str, tuple]:
    """Per mirror: (steady msg/s, first record after launch s, CPU us/record, longest stall s,
    longest stall of one partition s)."""
    out = {}
    for kind in kinds:
        topic, target = f"tp-{rnd}-{kind}", f"tp-{rnd}-{kind}-out"
        _create(a.bootstrap, topic)
        _create(b.bootstrap, target)  # the watcher fetches from the first record on
        produce(a.bootstrap, topic, records, 0, value_size)
        launched = time.time()
        proc = start_mirror(kind, a.bootstrap, b.bootstrap, topic, target, work, epoch_ms)
        cpu: dict = {}
        try:
            arrivals = watch(b.bootstrap, target, records, 600, proc, latency=False, cpu=cpu)
        finally:
            stop(proc)
        us = (cpu[0.9] - cpu[0.1]) / max(cpu[("n", 0.9)] - cpu[("n", 0.1)], 1) * 1e6
        stall, stall_part = longest_stalls(arrivals, records)
        out[kind] = (steady_rate(arrivals, records), arrivals[0][0] - launched, us, stall, stall_part)
        print(f"    {kind:<10} {out[kind][0]:>10,.0f} msg/s steady, first record {out[kind][1]:.1f} s after launch, "
              f"CPU {us:.2f} us/record, longest stall {stall * 1000:.0f} ms (one partition {stall_part * 1000:.0f} ms)",
              flush=True)
    return out


def _paced(topic: str, kind: str, a: EmbeddedKafka, b: EmbeddedKafka, rate: int, seconds: int, value_size: int,
           work: Path, epoch_ms: int | None, **watching) -> list:
    """A producer process writes ``rate`` msg/s for ``seconds`` s into a fresh ``topic`` while mirror
    ``kind`` runs (``none``: no mirror, the source topic is watched); the watcher's arrivals."""
    target = f"{topic}-out"
    _create(a.bootstrap, topic)
    _create(b.bootstrap, target)
    proc = None
    if kind != "none":
        proc = start_mirror(kind, a.bootstrap, b.bootstrap, topic, target, work, epoch_ms)
        _wait_started(b.bootstrap, target, a.bootstrap, topic, proc)
    total = rate * seconds
    producer = _spawn([__file__, "produce", a.bootstrap, topic, str(total), str(rate), str(value_size)],
                      work / f"{topic}-producer.log")
    try:
        return watch(*((a.bootstrap, topic) if kind == "none" else (b.bootstrap, target)), total, seconds + 120, proc,
                     **watching)
    finally:
        producer.wait(60)
        if proc is not None:
            stop(proc)


def paced_latencies(src: str, topic: str, dst: str, target: str, rate: int, seconds: int, value_size: int,
                    log: Path, proc: subprocess.Popen | None, **watching) -> list[float]:
    """A producer process writes ``rate`` msg/s for ``seconds`` s into ``topic`` on ``src`` while ``proc``
    mirrors it to ``target`` on ``dst``: the latencies (ms) of the records that arrived after ``WARMUP_S``."""
    total = rate * seconds
    producer = _spawn([__file__, "produce", src, topic, str(total), str(rate), str(value_size)], log)
    try:
        arrivals = watch(dst, target, total, seconds + 120, proc, **watching)
    finally:
        producer.wait(60)
    first = arrivals[0][0] + WARMUP_S
    return [x for t, _, xs, _ in arrivals if t >= first for x in xs]


def paced_cpu_round(rnd: int, a: EmbeddedKafka, b: EmbeddedKafka, rate: int, seconds: int, value_size: int,
                    work: Path, epoch_ms: int | None) -> dict[str, float]:
    """CPU per record of each mirror kept at the same rate: a producer process writes ``rate`` msg/s
    for ``seconds`` s while the mirror runs; CPU of the mirror's tree between the 20% and 90% arrival
    marks over the records between them. From a backlog each mirror runs at its own rate, and the
    raw loop's CPU per record moves with that rate (see the README), so this compares like with like."""
    out = {}
    total = rate * seconds
    for kind in ("raw", "connect-1", "connect-2"):
        cpu: dict = {}
        arrivals = _paced(f"cpu-{rnd}-{kind}", kind, a, b, rate, seconds, value_size, work, epoch_ms,
                          latency=False, cpu=cpu, marks=(0.2, 0.9))
        n = cpu[("n", 0.9)] - cpu[("n", 0.2)]
        out[kind] = (cpu[0.9] - cpu[0.2]) / max(n, 1) * 1e6
        print(f"    {kind:<10} {steady_rate(arrivals, total):>10,.0f} msg/s, CPU {out[kind]:.2f} us/record", flush=True)
    return out


def latency_round(rnd: int, a: EmbeddedKafka, b: EmbeddedKafka, rate: int, seconds: int, value_size: int,
                  work: Path, epoch_ms: int | None) -> dict[str, dict]:
    out = {}
    for kind in ("none", "raw", "connect-1"):
        arrivals = _paced(f"lat-{rnd}-{kind}", kind, a, b, rate, seconds, value_size, work, epoch_ms)
        start = arrivals[0][0] + WARMUP_S
        lat = [x for t, _, xs, _ in arrivals if t >= start for x in xs]
        per_second: dict[int, list[float]] = {}
        for t, _, xs, _ in arrivals:
            if t >= start:
                per_second.setdefault(int(t - start), []).extend(xs)
        out[kind] = {"p50": percentile(lat, 0.5), "p95": percentile(lat, 0.95), "p99": percentile(lat, 0.99),
                     "max": max(lat), "p99s": [percentile(v, 0.99) for _, v in sorted(per_second.items())]}
        s = out[kind]
        print(f"    {kind:<10} p50 {s['p50']:6.0f} ms  p95 {s['p95']:6.0f}  p99 {s['p99']:6.0f}  max {s['max']:6.0f}"
              f"   p99 per second: {' '.join(f'{v:.0f}' for v in s['p99s'])}", flush=True)
    return out


def _wait_started(dst: str, target: str, src: str, topic: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    """Before the timed producer starts: one probe record goes through the mirror (it is running)."""
    p = Producer({"bootstrap.servers": src})
    p.produce(topic, b"probe", b"probe", partition=0)
    p.flush(10)
    watch(dst, target, 1, timeout, proc, probe=True)


def _create(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        f.result()


def _span(values: list[float], fmt: str) -> str:
    return f"median {format(statistics.median(values), fmt)} (range {format(min(values), fmt)}-{format(max(values), fmt)})"


def _ratio_line(label: str, values: list[float], note: str = "") -> None:
    print(f"{label:<35}{_span(values, '.2f')}   per round: {', '.join(f'{x:.2f}' for x in values)}{note}")


def throughput_summary(thr: list[dict[str, tuple]], kinds: tuple[str, ...]) -> None:
    """The ratios of the throughput rounds (those whose mirrors ran), then each mirror's figures."""
    pairs = [("1 pair / raw loop", "connect-1", "raw"), ("2 pairs / 1 pair", "connect-2", "connect-1")]
    for label, top, bottom in pairs:
        if top in kinds and bottom in kinds:
            _ratio_line(f"steady state, {label}:", [r[top][0] / r[bottom][0] for r in thr],
                        "   (target >= 1.0)" if top == "connect-2" else "")
    for label, top, bottom in pairs:
        if top in kinds and bottom in kinds:
            _ratio_line(f"CPU per record, {label}:", [r[top][2] / r[bottom][2] for r in thr],
                        f"   (target <= {1.25 if bottom == 'raw' else 1.05})")
    for kind in kinds:
        print(f"{kind:<10} msg/s {_span([r[kind][0] for r in thr], ',.0f')}, first record after launch "
              f"{_span([r[kind][1] for r in thr], '.1f')} s, CPU {_span([r[kind][2] for r in thr], '.2f')} "
              "us/record")
    for kind in kinds:
        worst, worst_part = max(r[kind][3] for r in thr), max(r[kind][4] for r in thr)
        flag = "" if worst <= STALL_S else f"   OVER {STALL_S * 1000:.0f} ms"
        print(f"{kind:<10} longest stall inside the steady window {worst * 1000:.0f} ms (worst round), "
              f"one partition {worst_part * 1000:.0f} ms{flag}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "raw-loop":
        return raw_loop(*sys.argv[2:6])
    if len(sys.argv) > 1 and sys.argv[1] == "produce":
        bootstrap, topic, records, rate, size = sys.argv[2:7]
        return produce(bootstrap, topic, int(records), float(rate), int(size))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=600_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rate", type=int, default=20_000)
    ap.add_argument("--seconds", type=int, default=25)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--epoch-ms", type=int, default=None, help="epoch.max.ms of the mirrors (default: the product's)")
    ap.add_argument("--cpu-rate", type=int, default=150_000, help="rate of the paced CPU rounds (msg/s)")
    ap.add_argument("--cpu-seconds", type=int, default=20)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a connector key of every `connect run` mirror, e.g. source.poll.batch.size=5000")
    ap.add_argument("--only", choices=["throughput", "latency", "cpu"])
    ap.add_argument("--mirrors", default=",".join(MIRRORS),
                    help=f"the mirrors of the throughput rounds, in this order (of {', '.join(MIRRORS)})")
    args = ap.parse_args()
    kinds = tuple(k for k in args.mirrors.split(",") if k)
    if not kinds or set(kinds) - set(MIRRORS):
        ap.error(f"--mirrors: a comma-separated list of {', '.join(MIRRORS)}, not {args.mirrors!r}")
    EXTRA.update(kv.split("=", 1) for kv in args.set)
    records = args.records - args.records % PARTITIONS
    with EmbeddedKafka() as a, EmbeddedKafka() as b, tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        thr, lat, paced = [], [], []
        for rnd in range(args.rounds):
            if args.only in (None, "cpu"):
                print(f"round {rnd + 1}: CPU per record at {args.cpu_rate:,} msg/s for {args.cpu_seconds} s", flush=True)
                paced.append(paced_cpu_round(rnd, a, b, args.cpu_rate, args.cpu_seconds, args.value_size, work,
                                             args.epoch_ms))
            if args.only in (None, "throughput"):
                print(f"round {rnd + 1}: throughput, {records:,} records", flush=True)
                thr.append(throughput_round(rnd, a, b, records, args.value_size, work, args.epoch_ms, kinds))
            if args.only in (None, "latency"):
                print(f"round {rnd + 1}: latency at {args.rate:,} msg/s for {args.seconds} s", flush=True)
                lat.append(latency_round(rnd, a, b, args.rate, args.seconds, args.value_size, work, args.epoch_ms))
    print()
    if thr:
        throughput_summary(thr, kinds)
    if paced:
        one = [r["connect-1"] / r["raw"] for r in paced]
        two = [r["connect-2"] / r["connect-1"] for r in paced]
        print(f"CPU per record at {args.cpu_rate:,} msg/s, 1 pair / raw loop: {_span(one, '.2f')}   per round: "
              f"{', '.join(f'{x:.2f}' for x in one)}   (target <= 1.25)")
        print(f"CPU per record at {args.cpu_rate:,} msg/s, 2 pairs / 1 pair:  {_span(two, '.2f')}   per round: "
              f"{', '.join(f'{x:.2f}' for x in two)}   (target <= 1.05)")
        for kind in ("raw", "connect-1", "connect-2"):
            print(f"{kind:<10} CPU at {args.cpu_rate:,} msg/s {_span([r[kind] for r in paced], '.2f')} us/record")
    if lat:
        for kind in ("none", "raw", "connect-1"):
            print(f"latency {kind:<10} " + "  ".join(f"{q} {_span([r[kind][q] for r in lat], '.0f')} ms"
                                                      for q in ("p50", "p99", "max")))


if __name__ == "__main__":
    main()
