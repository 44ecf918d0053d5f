"""Many small connectors on one worker, measured as a new user would (issue 23's table).

One `connect worker start` (a process, default settings unless ``--slots`` / ``--set``), two
embedded tansu brokers (source, target). For each N in ``--connectors``: N topics of one partition
on the source, N Kafka->Kafka connectors created through the REST API (one task each, copying
``src-<i>`` to ``copy.src-<i>``), a paced producer process writing ``--rate`` msg/s into every
topic for ``--seconds`` s (record timestamp = produce time), a watcher in this process reading every
target topic. Printed per N:

- delivered / produced (after at most ``--drain`` s more);
- latency at the target (arrival - record timestamp): p50 / p99 / max over all records, and the
  worst connector's p99;
- resident memory (RSS) of the worker's whole process tree (driver, JVM, every Python worker):
  before any connector, once every connector is RUNNING with no traffic, and the peak while the
  producer runs; and the number of processes in the tree.

Usage: python bench/many_connectors.py [--connectors 8,24] [--slots N] [--rate 50] [--seconds 40]
       [--drain 60] [--set key=value ...]   (``--set``: worker settings, e.g. worker.task.slots=8;
       ``--connector-set``: keys of every connector, e.g. epoch.max.ms=2000)
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench_util import _stat  # noqa: E402
from e2e import stop  # noqa: E402

from worker.embedded import EmbeddedKafka  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")


# -- the worker's process tree ------------------------------------------------------------------
def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (st := _stat(entry)) is not None:
            kids.setdefault(int(st[1][1]), []).append(int(entry))
    return kids


def tree(pid: int) -> list[int]:
    """``pid`` and every descendant."""
    kids, out, todo = _children(), [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, ()))
    return out


def rss_mb(pids: list[int]) -> float:
    total = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/statm") as f:
                total += int(f.read().split()[1]) * PAGE
        except OSError:
            pass
    return total / 2**20


class RssSampler(threading.Thread):
    """Peak RSS of a process tree, sampled every ``every`` s."""

    def __init__(self, pid: int, every: float = 1.0):
        super().__init__(daemon=True)
        self.pid, self.every, self.peak, self.processes = pid, every, 0.0, 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(self.every):
            pids = tree(self.pid)
            self.processes = max(self.processes, len(pids))
            self.peak = max(self.peak, rss_mb(pids))


# -- load ---------------------------------------------------------------------------------------
def produce_paced(bootstrap: str, topics: list[str], rate: int, seconds: float, counts) -> None:
    """``rate`` msg/s into every topic for ``seconds`` s, in ticks of 20 ms; key = topic:index."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    start = time.monotonic()
    sent = 0
    per_tick = rate / 50
    tick = 0
    owed = 0.0
    while time.monotonic() - start < seconds:
        owed += per_tick
        n = int(owed)
        owed -= n
        for _ in range(n):
            for t in topics:
                while True:
                    try:
                        p.produce(t, b"v" * 100, f"{t}:{sent}".encode(), timestamp=int(time.time() * 1000))
                        break
                    except BufferError:
                        p.poll(0.01)
            sent += 1
        p.poll(0)
        tick += 1
        time.sleep(max(start + tick * 0.02 - time.monotonic(), 0))
    assert p.flush(60) == 0
    counts.value = sent * len(topics)


def watch(bootstrap: str, topics: list[str], expected_holder, stop_at: list[float]) -> dict[str, list[float]]:
    """Latency (ms) of every record arriving in ``topics``, per topic, until all expected arrived or
    ``stop_at[0]`` (monotonic) passes."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"watch-{time.time()}", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 10, "fetch.queue.backoff.ms": 1})
    c.assign([TopicPartition(t, 0, 0) for t in topics])
    lat: dict[str, list[float]] = {t: [] for t in topics}
    got = 0
    while time.monotonic() < stop_at[0]:
        expected = expected_holder.value
        if expected and got >= expected:
            break
        for m in c.consume(5000, 0.2):
            if m.error() is not None:
                continue
            now = time.time() * 1000
            lat[m.topic()].append(now - m.timestamp()[1])
            got += 1
    c.close()
    return lat


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(int(q * len(values)), len(values) - 1)]


# -- one run ------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(n: int, src: EmbeddedKafka, dst: EmbeddedKafka, args, work: Path) -> dict:
    port = free_port()
    cfg = {"rest.port": port, "data.dir": str(work / f"data-{n}"), **dict(kv.split("=", 1) for kv in args.set)}
    if args.slots:
        cfg["worker.task.slots"] = args.slots
    (work / f"worker-{n}.json").write_text(json.dumps(cfg))
    log = open(work / f"worker-{n}.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "worker.cli", "worker", "start", "--config", str(work / f"worker-{n}.json")],
                            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    prefix = f"b{int(time.time())}-{n}"
    topics = [f"{prefix}-{i}" for i in range(n)]
    admin = AdminClient({"bootstrap.servers": src.bootstrap})
    for f in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
        f.result()
    try:
        with httpx.Client(base_url=base, timeout=30) as http:
            deadline = time.monotonic() + 120
            while True:
                try:
                    if http.get("/").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit(f"worker did not start; see {work / f'worker-{n}.log'}")
                time.sleep(0.5)
            empty = rss_mb(tree(proc.pid))
            t0 = time.monotonic()
            for i, t in enumerate(topics):
                config = {"source.connector.class": "kafka", "source.bootstrap.servers": src.bootstrap,
                          "source.topics": t, "source.start.position": "earliest", "sink.connector.class": "kafka",
                          "sink.bootstrap.servers": dst.bootstrap, "sink.topic.template": "copy.{topic}",
                          "tasks.max": "1", **dict(kv.split("=", 1) for kv in args.connector_set)}
                while (r := http.post("/connectors", json={"name": f"c{i}", "config": config})).status_code == 503:
                    time.sleep(0.5)  # still loading its stored connectors
                assert r.status_code in (200, 201), r.text
            while True:
                states = http.get("/connectors", params={"expand": "status"}).json()
                running = sum(1 for v in states.values() if v["status"]["connector"]["state"] == "RUNNING"
                              and all(task["state"] == "RUNNING" for task in v["status"]["tasks"]))
                if running == n:
                    break
                if time.monotonic() - t0 > 300:
                    raise SystemExit(f"{running} of {n} connectors RUNNING after 300 s")
                time.sleep(1)
            created_s = time.monotonic() - t0
            time.sleep(5)  # settle: the first epochs persist start positions
            pids = tree(proc.pid)
            idle = rss_mb(pids)
            sampler = RssSampler(proc.pid)
            sampler.start()
            counts = multiprocessing.Value("q", 0)
            producer = multiprocessing.Process(target=produce_paced,
                                               args=(src.bootstrap, topics, args.rate, args.seconds, counts))
            stop_at = [time.monotonic() + args.seconds + args.drain + 30]
            producer.start()
            lat = watch(dst.bootstrap, [f"copy.{t}" for t in topics], counts, stop_at)
            producer.join()
            sampler.done.set()
            sampler.join()
    finally:
        stop(proc)
    everything = [x for v in lat.values() for x in v]
    worst = max(pct(v, 0.99) for v in lat.values()) if lat else float("nan")
    return {"connectors": n, "slots": cfg.get("worker.task.slots", "default"), "produced": counts.value,
            "delivered": len(everything), "p50": pct(everything, 0.5), "p99": pct(everything, 0.99),
            "max": max(everything, default=float("nan")), "worst_p99": worst, "rss_empty_mb": empty, "rss_idle_mb": idle,
            "rss_peak_mb": max(sampler.peak, idle), "processes": max(sampler.processes, len(pids)),
            "created_s": created_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--connectors", default="8,24")
    ap.add_argument("--slots", type=int, default=0, help="worker.task.slots (default: the worker's default)")
    ap.add_argument("--rate", type=int, default=50, help="msg/s into every topic")
    ap.add_argument("--seconds", type=float, default=40)
    ap.add_argument("--drain", type=float, default=60)
    ap.add_argument("--set", action="append", default=[], help="worker setting key=value")
    ap.add_argument("--connector-set", action="append", default=[], help="connector key=value")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, EmbeddedKafka() as src, EmbeddedKafka() as dst:
        rows = [run(int(n), src, dst, args, Path(tmp)) for n in args.connectors.split(",")]
    print("| connectors | slots | delivered | latency p50 / p99 / max | worst connector p99 | RSS no connector / "
          "idle / peak (processes) | all RUNNING after |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['connectors']} | {r['slots']} | {r['delivered']:,} / {r['produced']:,} | "
              f"{r['p50']:,.0f} / {r['p99']:,.0f} / {r['max']:,.0f} ms | {r['worst_p99']:,.0f} ms | "
              f"{r['rss_empty_mb']:,.0f} / {r['rss_idle_mb']:,.0f} / {r['rss_peak_mb']:,.0f} MB ({r['processes']}) | "
              f"{r['created_s']:.0f} s |")


if __name__ == "__main__":
    main()
