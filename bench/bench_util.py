"""What the mirror benchmarks share: one timed epoch of a pipeline through the Spark driver."""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from contextlib import ExitStack

from worker.pipeline import parse_pipeline
from worker.runtime.driver import Driver
from worker.runtime.spark import SparkExecutor
from worker.stores.store import OffsetStore

_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


BROKERS = frozenset({"tansu", "pulsar-lite"})  # process names of the embedded brokers

# librdkafka settings of a consumer that measures when records arrive (a benchmark's watcher).
# librdkafka stops fetching for ``fetch.queue.backoff.ms`` (default 1000 ms) whenever the
# consumer's local queue holds ``queued.min.messages`` (100,000; the queue of the whole consumer,
# every partition forwards to it). A watcher that once falls that far behind a mirror (tansu answers
# a fetch with ~47,000 records of 100 B per partition) then reads ~150,000 records, waits out the
# second, and reads again: it measures itself, at ~150,000 msg/s with a ~0.95 s stall per cycle,
# however fast the mirror is (issue 36: "two pairs at half the speed of one"). 1 ms keeps the
# fetcher going as soon as the queue drains below the threshold.
WATCHER_CONSUMER = {"enable.auto.commit": False, "fetch.wait.max.ms": 5, "fetch.error.backoff.ms": 10,
                    "fetch.queue.backoff.ms": 1, "topic.metadata.refresh.interval.ms": 500}


def _stat(pid: str) -> tuple[str, list[str]] | None:
    """(process name, the fields after it) of ``/proc/<pid>/stat``; None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    return text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()


def _tree(root: int, skip: frozenset[str]) -> list[tuple[str, list[str]]]:
    """(pid, /proc/<pid>/stat fields) of ``root`` and all its descendants, except processes named
    in ``skip`` and theirs."""
    stats = {pid: st for pid in os.listdir("/proc") if pid.isdigit() and (st := _stat(pid)) is not None}
    children: dict[str, list[str]] = {}
    for pid, (_, fields) in stats.items():
        children.setdefault(fields[1], []).append(pid)  # fields[1]: the parent's pid
    out, todo = [], [str(root)]
    while todo:
        pid = todo.pop()
        st = stats.get(pid)
        if st is None or st[0] in skip:
            continue
        out.append((pid, st[1]))
        todo.extend(children.get(pid, ()))
    return out


def tree_cpu(root: int, skip: frozenset[str] = BROKERS) -> float:
    """CPU seconds (user + system) used so far by ``root`` and all its descendants - a mirror's
    whole process tree: its Spark JVM (a session of its own) and the JVM's Python workers
    included - except processes named in ``skip`` and theirs (the embedded brokers a benchmark
    process started). Processes that ended are not counted: take both readings while it runs."""
    return sum(int(fields[11]) + int(fields[12]) for _, fields in _tree(root, skip)) / _TICK  # utime, stime


def tree_rss(root: int, skip: frozenset[str] = BROKERS) -> int:
    """Resident bytes of ``root``'s process tree now (the sum over its processes, as :func:`tree_cpu`
    counts them)."""
    return sum(int(fields[21]) for _, fields in _tree(root, skip)) * _PAGE  # rss, in pages


class PeakRss(threading.Thread):
    """Samples :func:`tree_rss` of ``root`` every ``interval`` s until :meth:`stop`; ``peak``: the
    highest sum seen (bytes)."""

    def __init__(self, root: int, interval: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.root, self.interval, self.peak = root, interval, 0
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            self.peak = max(self.peak, tree_rss(self.root))
            self._done.wait(self.interval)

    def stop(self) -> int:
        self._done.set()
        self.join()
        return self.peak


def fill_kafka(bootstrap: str, topic: str, records: int, value_size: int, partitions: int,
               headers: list[tuple[str, bytes]] | None = None) -> None:
    """Create ``topic`` and write ``records`` records round robin over its partitions (key = index),
    each with ``headers`` (default: one small header)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result()
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000})
    value = b"v" * value_size
    headers = [("i", b"1")] if headers is None else headers
    for i in range(records):
        while True:
            try:
                p.produce(topic, value, str(i).encode(), partition=i % partitions, headers=headers)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0


def timed_epoch(spark, name: str, config: dict[str, str], records: int, tasks: int,
                cpu: list[float] | None = None) -> float:
    """Seconds for ``records`` records to move and be acknowledged in one epoch of ``config`` (a
    pipeline's keys; epoch bounds are set here), after a first epoch that only persists start
    positions. A stop follows the epoch and drains what is still in flight, as a raw loop's final
    flush does, so the time covers every acknowledgement. ``cpu``: gets the CPU seconds this
    process tree (driver, Spark JVM, Python workers; not the brokers) used in that time."""
    pipeline = parse_pipeline({"name": name, "config": {
        **config, "tasks.max": str(tasks), "epoch.max.ms": "600000", "epoch.max.records": str(records // tasks),
        "max.in.flight.records": "100000"}})
    with tempfile.TemporaryDirectory() as data:
        store = OffsetStore(data)
        driver = Driver(SparkExecutor(spark), store, [pipeline])
        driver.run_epoch()
        c0 = tree_cpu(os.getpid())
        t0 = time.perf_counter()
        results = driver.run_epoch()
        driver.stop_event.set()
        tail = driver.run_epoch()
        elapsed = time.perf_counter() - t0
        if cpu is not None:
            cpu.append(tree_cpu(os.getpid()) - c0)
        driver.close()
        store.close()
    inside = max(r.ended_at for r in results) - min(r.started_at for r in results)
    print(f"    framework {tasks} task(s): {elapsed:.2f} s end to end, {inside:.2f} s inside the task pair epoch(s)",
          flush=True)
    moved = sum(r.stats["records"] for r in results)
    failed = [r.trace for r in results + tail if r.state != "RUNNING"]
    assert not failed, failed[0]
    assert moved == records, f"framework moved {moved} of {records}"
    return elapsed


def median_of(rounds: list[dict], kind: str, key: str) -> float | None:
    """Median over ``rounds`` (each ``{contender: {figure: value}}``) of ``kind``'s ``key``; None if
    no round has ``kind``."""
    values = [r[kind][key] for r in rounds if kind in r]
    return statistics.median(values) if values else None


def ratio_of(rounds: list[dict], top: str, bottom: str, key: str) -> float | None:
    """Median of the per-round ratios ``top``/``bottom`` of ``key`` (rounds where both ran and the
    bottom is not 0); None if there are none."""
    values = [r[top][key] / r[bottom][key] for r in rounds if top in r and bottom in r and r[bottom][key]]
    return statistics.median(values) if values else None


def bench_args(doc: str, records: int, rounds: int = 2) -> argparse.Namespace:
    """``--records``, ``--rounds`` and ``--value-size`` of a mirror benchmark (``doc``: its usage text)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=records)
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--value-size", type=int, default=100)
    return ap.parse_args()


def apache_kafka_pair(stack: ExitStack, clusters: str | None) -> tuple[str, str]:
    """Bootstrap servers of the two clusters a bench runs on: ``clusters`` (``--clusters A,B``, running
    ones), else two Apache Kafka clusters started here and stopped with ``stack``."""
    if clusters:
        a, b = clusters.split(",")
        return a, b
    from worker.embedded import ApacheKafka

    print("starting two Apache Kafka clusters...", flush=True)
    a, b = (stack.enter_context(ApacheKafka()).bootstrap for _ in range(2))
    return a, b
