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

With ``--busy-beside N``: one connector copying a backlog of ``--busy-records`` as fast as it
goes, on a worker alone and then beside N idle connectors (msg/s of each, steady state).

With ``--raw``, before each N: the same load through a raw consume->produce loop on the same
brokers; with ``--floor``: the same load read straight from the source (no mirror at all), which
is what the source broker and the clients alone allow.

Usage: python bench/many_connectors.py [--connectors 8,24] [--slots N] [--rate 50] [--seconds 40]
       [--drain 60] [--raw] [--floor] [--busy-beside N] [--set key=value ...]
       (``--set``: worker settings, e.g. worker.task.slots=8; ``--connector-set``: keys of every connector,
       e.g. epoch.max.ms=2000)
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

from bench_util import WATCHER_CONSUMER, _stat  # noqa: E402
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


TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pids: list[int]) -> float:
    """CPU seconds (user + system) used so far by ``pids`` (processes that ended are not counted)."""
    total = 0
    for p in pids:
        if (st := _stat(str(p))) is not None:
            total += int(st[1][11]) + int(st[1][12])
    return total / TICK


def cpu_by_role(worker: int, src: EmbeddedKafka, dst: EmbeddedKafka) -> dict[str, float]:
    """CPU seconds so far of the worker's driver, its JVM, its Python workers, and the two brokers."""
    pids = tree(worker)
    names = {p: (_stat(str(p)) or ("?", []))[0] for p in pids}
    return {"driver or raw loop": cpu_s([worker]), "jvm": cpu_s([p for p in pids if names[p] == "java"]),
            "python workers": cpu_s([p for p in pids if p != worker and names[p] != "java"]),
            "source broker": cpu_s([src.proc.pid]), "target broker": cpu_s([dst.proc.pid])}


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
def produce_paced(bootstrap: str, topics: list[str], rate: int, seconds: float, counts, linger_ms: int = 5) -> None:
    """``rate`` msg/s into every topic for ``seconds`` s, in ticks of 20 ms; key = topic:index."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": linger_ms})
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


def raw_mirror(src: str, dst: str, topics: list[str], stop_at: float) -> None:
    """The raw client loop: one consumer of every source topic, one producer to ``raw.<topic>`` on
    the target, with the settings the Kafka source and sink default to (fetch wait 100 ms, linger 5
    ms), until ``stop_at`` (wall clock). What the two brokers and clients allow at this load."""
    c = Consumer({"bootstrap.servers": src, "group.id": "raw", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 100, "fetch.queue.backoff.ms": 10})
    c.assign([TopicPartition(t, 0, 0) for t in topics])
    p = Producer({"bootstrap.servers": dst, "linger.ms": 5, "enable.idempotence": True})
    while time.time() < stop_at:
        for m in c.consume(1000, 0.1):
            if m.error() is None:
                while True:
                    try:
                        p.produce("raw." + m.topic(), m.value(), m.key(), timestamp=m.timestamp()[1])
                        break
                    except BufferError:
                        p.poll(0.01)
        p.poll(0)
    p.flush(30)
    c.close()


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


def start_worker(tag: str, args, work: Path) -> tuple[subprocess.Popen, str, dict]:
    """A `connect worker start` process and its REST address, once it answers."""
    port = free_port()
    cfg = {"rest.port": port, "data.dir": str(work / f"data-{tag}"), **dict(kv.split("=", 1) for kv in args.set)}
    if args.slots:
        cfg["worker.task.slots"] = args.slots
    (work / f"worker-{tag}.json").write_text(json.dumps(cfg))
    log = open(work / f"worker-{tag}.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "worker.cli", "worker", "start", "--config",
                             str(work / f"worker-{tag}.json")],
                            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(base + "/", timeout=5).status_code == 200:
                return proc, base, cfg
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            stop(proc)
            raise SystemExit(f"worker did not start; see {work / f'worker-{tag}.log'}")
        time.sleep(0.5)


def create_topics(bootstrap: str, topics: list[str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
        f.result()


def create_connectors(http: httpx.Client, names_topics: list[tuple[str, str]], src: EmbeddedKafka,
                      dst: EmbeddedKafka, args) -> float:
    """Create one Kafka->Kafka connector per (name, topic) and wait until all are RUNNING; seconds it took."""
    t0 = time.monotonic()
    for name, topic in names_topics:
        config = {"source.connector.class": "kafka", "source.bootstrap.servers": src.bootstrap,
                  "source.topics": topic, "source.start.position": "earliest", "sink.connector.class": "kafka",
                  "sink.bootstrap.servers": dst.bootstrap, "sink.topic.template": "copy.{topic}",
                  "tasks.max": "1", **dict(kv.split("=", 1) for kv in args.connector_set)}
        while (r := http.post("/connectors", json={"name": name, "config": config})).status_code == 503:
            time.sleep(0.5)  # still loading its stored connectors
        assert r.status_code in (200, 201), r.text
    names = {name for name, _ in names_topics}
    while True:
        states = http.get("/connectors", params={"expand": "status"}).json()
        running = sum(1 for k, v in states.items() if k in names and v["status"]["connector"]["state"] == "RUNNING"
                      and v["status"]["tasks"] and all(task["state"] == "RUNNING" for task in v["status"]["tasks"]))
        if running == len(names):
            return time.monotonic() - t0
        if time.monotonic() - t0 > 300:
            raise SystemExit(f"{running} of {len(names)} connectors RUNNING after 300 s")
        time.sleep(1)


def raw_run(n: int, src: EmbeddedKafka, dst: EmbeddedKafka, args) -> dict:
    """The same load through :func:`raw_mirror` instead of a worker (run before it, same brokers)."""
    topics = [f"raw{int(time.time())}-{n}-{i}" for i in range(n)]
    create_topics(src.bootstrap, topics)
    create_topics(dst.bootstrap, [f"raw.{t}" for t in topics])
    deadline = time.time() + args.seconds + args.drain + 30
    mirror = multiprocessing.Process(target=raw_mirror, args=(src.bootstrap, dst.bootstrap, topics, deadline))
    mirror.start()
    time.sleep(2)
    counts = multiprocessing.Value("q", 0)
    cpu0, t0 = cpu_by_role(mirror.pid, src, dst), time.monotonic()
    producer = multiprocessing.Process(target=produce_paced, args=(src.bootstrap, topics, args.rate, args.seconds,
                                                                   counts, args.producer_linger_ms))
    producer.start()
    lat = watch(dst.bootstrap, [f"raw.{t}" for t in topics], counts, [time.monotonic() + args.seconds + args.drain])
    producer.join()
    cpu1, elapsed = cpu_by_role(mirror.pid, src, dst), time.monotonic() - t0
    mirror.terminate()
    mirror.join()
    return _row(f"{n} topics, raw loop", counts.value, lat, processes=1,
                cores={k: round((cpu1[k] - cpu0[k]) / elapsed, 2) for k in cpu1})


def _row(what: str, produced: int, lat: dict[str, list[float]], processes: int, cores: dict) -> dict:
    """A table row of a run without a worker (no RSS, nothing created)."""
    everything = [x for v in lat.values() for x in v]
    return {"connectors": what, "slots": "-", "produced": produced,
            "delivered": len(everything), "p50": pct(everything, 0.5), "p99": pct(everything, 0.99),
            "max": max(everything, default=float("nan")),
            "worst_p99": max(pct(v, 0.99) for v in lat.values()) if lat else float("nan"),
            "rss_empty_mb": 0, "rss_idle_mb": 0, "rss_peak_mb": 0, "processes": processes, "created_s": 0,
            "cores": cores}


def floor_run(n: int, src: EmbeddedKafka, args) -> dict:
    """The brokers' floor: the same paced load read straight from the source topics (no mirror at
    all), so what the source broker and the clients alone add to latency at this load."""
    topics = [f"floor{int(time.time())}-{n}-{i}" for i in range(n)]
    create_topics(src.bootstrap, topics)
    counts = multiprocessing.Value("q", 0)
    producer = multiprocessing.Process(target=produce_paced, args=(src.bootstrap, topics, args.rate, args.seconds,
                                                                   counts, args.producer_linger_ms))
    producer.start()
    lat = watch(src.bootstrap, topics, counts, [time.monotonic() + args.seconds + args.drain])
    producer.join()
    return _row(f"{n} topics, no mirror (source broker alone)", counts.value, lat, processes=0, cores={})


def run(n: int, src: EmbeddedKafka, dst: EmbeddedKafka, args, work: Path) -> dict:
    proc, base, cfg = start_worker(str(n), args, work)
    prefix = f"b{int(time.time())}-{n}"
    topics = [f"{prefix}-{i}" for i in range(n)]
    create_topics(src.bootstrap, topics)
    try:
        with httpx.Client(base_url=base, timeout=30) as http:
            empty = rss_mb(tree(proc.pid))
            created_s = create_connectors(http, [(f"c{i}", t) for i, t in enumerate(topics)], src, dst, args)
            time.sleep(5)  # settle: the first epochs persist start positions
            pids = tree(proc.pid)
            idle = rss_mb(pids)
            sampler = RssSampler(proc.pid)
            sampler.start()
            counts = multiprocessing.Value("q", 0)
            producer = multiprocessing.Process(target=produce_paced,
                                               args=(src.bootstrap, topics, args.rate, args.seconds, counts,
                                                     args.producer_linger_ms))
            stop_at = [time.monotonic() + args.seconds + args.drain + 30]
            cpu0, t0 = cpu_by_role(proc.pid, src, dst), time.monotonic()
            producer.start()
            lat = watch(dst.bootstrap, [f"copy.{t}" for t in topics], counts, stop_at)
            producer.join()
            cpu1, elapsed = cpu_by_role(proc.pid, src, dst), time.monotonic() - t0
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
            "created_s": created_s,
            # cores used on average while the producer ran and the copies arrived
            "cores": {k: round((cpu1[k] - cpu0[k]) / elapsed, 2) for k in cpu1}}


def busy_run(idle_n: int, records: int, src: EmbeddedKafka, dst: EmbeddedKafka, args, work: Path) -> float:
    """msg/s of one connector copying a backlog of ``records`` (steady state: between the 10% and
    90% arrival marks) on a worker that also runs ``idle_n`` connectors with no traffic."""
    proc, base, _ = start_worker(f"busy-{idle_n}", args, work)
    prefix = f"busy{int(time.time())}-{idle_n}"
    idle_topics = [f"{prefix}-idle-{i}" for i in range(idle_n)]
    busy = f"{prefix}-busy"
    create_topics(src.bootstrap, [*idle_topics, busy])
    p = Producer({"bootstrap.servers": src.bootstrap, "linger.ms": 20, "batch.num.messages": 10000})
    for i in range(records):
        while True:
            try:
                p.produce(busy, b"v" * 100, str(i).encode())
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0
    try:
        with httpx.Client(base_url=base, timeout=30) as http:
            if idle_topics:
                create_connectors(http, [(f"idle{i}", t) for i, t in enumerate(idle_topics)], src, dst, args)
                time.sleep(5)
            c = Consumer({**WATCHER_CONSUMER, "bootstrap.servers": dst.bootstrap, "group.id": f"busy-{time.time()}"})
            c.assign([TopicPartition(f"copy.{busy}", 0, 0)])
            threading.Thread(target=create_connectors, args=(http, [("busy", busy)], src, dst, args),
                             daemon=True).start()
            got, marks, deadline = 0, {}, time.monotonic() + 600
            while got < records and time.monotonic() < deadline:
                got += sum(1 for m in c.consume(10000, 0.2) if m.error() is None)
                for mark in (0.1, 0.9):
                    if mark not in marks and got >= mark * records:
                        marks[mark] = (time.monotonic(), got)
            c.close()
    finally:
        stop(proc)
    if len(marks) < 2:
        raise SystemExit(f"busy connector: only {got} of {records} records arrived")
    return (marks[0.9][1] - marks[0.1][1]) / (marks[0.9][0] - marks[0.1][0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--connectors", default="8,24")
    ap.add_argument("--slots", type=int, default=0, help="worker.task.slots (default: the worker's default)")
    ap.add_argument("--rate", type=int, default=50, help="msg/s into every topic")
    ap.add_argument("--seconds", type=float, default=40)
    ap.add_argument("--producer-linger-ms", type=int, default=5,
                    help="linger.ms of the paced producer (its request rate is most of the source broker's load)")
    ap.add_argument("--drain", type=float, default=60)
    ap.add_argument("--work", default=None, help="directory to keep the workers' logs in")
    ap.add_argument("--raw", action="store_true",
                    help="before each N, the same load through a raw consume->produce loop (the brokers' own latency)")
    ap.add_argument("--floor", action="store_true",
                    help="before each N, the same load read straight from the source (no mirror): the broker's floor")
    ap.add_argument("--set", action="append", default=[], help="worker setting key=value")
    ap.add_argument("--connector-set", action="append", default=[], help="connector key=value")
    ap.add_argument("--busy-beside", type=int, default=0, metavar="N",
                    help="instead: one busy connector alone, then beside N idle ones (msg/s of each)")
    ap.add_argument("--busy-records", type=int, default=1_000_000)
    args = ap.parse_args()
    if args.busy_beside:
        with tempfile.TemporaryDirectory() as tmp, EmbeddedKafka() as src, EmbeddedKafka() as dst:
            alone = busy_run(0, args.busy_records, src, dst, args, Path(tmp))
            beside = busy_run(args.busy_beside, args.busy_records, src, dst, args, Path(tmp))
        print(f"one busy connector alone: {alone:,.0f} msg/s; beside {args.busy_beside} idle connectors: "
              f"{beside:,.0f} msg/s = {beside / alone:.2f}x (target >= 0.9)")
        return
    with tempfile.TemporaryDirectory(dir=args.work) as tmp, EmbeddedKafka() as src, EmbeddedKafka() as dst:
        rows = []
        for n in map(int, args.connectors.split(",")):
            if args.floor:
                rows.append(floor_run(n, src, args))
            if args.raw:
                rows.append(raw_run(n, src, dst, args))
            rows.append(run(n, src, dst, args, Path(tmp)))
        if args.work:  # keep the workers' logs
            for log in Path(tmp).glob("worker-*.log"):
                log.rename(Path(args.work) / log.name)
    print("| connectors | slots | delivered | latency p50 / p99 / max | worst connector p99 | RSS no connector / "
          "idle / peak (processes) | all RUNNING after |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['connectors']} | {r['slots']} | {r['delivered']:,} / {r['produced']:,} | "
              f"{r['p50']:,.0f} / {r['p99']:,.0f} / {r['max']:,.0f} ms | {r['worst_p99']:,.0f} ms | "
              f"{r['rss_empty_mb']:,.0f} / {r['rss_idle_mb']:,.0f} / {r['rss_peak_mb']:,.0f} MB ({r['processes']}) | "
              f"{r['created_s']:.0f} s |")
    for r in rows:
        if not r["cores"]:
            continue
        print(f"{r['connectors']} connectors, cores used while the records moved: "
              + ", ".join(f"{k} {v:.2f}" for k, v in r["cores"].items()))


if __name__ == "__main__":
    main()
