"""Shared hosting over the wire (``worker.runtime.hosting``): many task pairs in one Python worker.

One host (``hosts=1``) runs every pair of several connectors. A pair that fails and a pair whose
target is blackholed must not hold the others back, and a kill -9 of the host's Python worker
loses nothing: every pair restarts from its committed offsets on a new host.
"""

from __future__ import annotations

import os
import signal
import threading
import time

from confluent_kafka import Producer
from kafka_util import consume_all, create_topic, produce
from pipeline_util import partition_offsets

from worker.pipeline import parse_pipeline
from worker.runtime.driver import Driver
from worker.runtime.spark import SparkExecutor
from worker.stores.store import OffsetStore


def _pipeline(name: str, source: str, target: str, topic: str, **extra) -> object:
    config = {"source.connector.class": "kafka", "source.bootstrap.servers": source, "source.topics": topic,
              "sink.connector.class": "kafka", "sink.bootstrap.servers": target, "sink.topic": f"{topic}-out",
              "epoch.max.ms": "1000", "epoch.grace.ms": "1000", "source.refresh.topics.interval.ms": "0",
              **{k: str(v) for k, v in extra.items()}}
    return parse_pipeline({"name": name, "config": config})


class _Running:
    """A driver running every connector in its own thread, its results collected."""

    def __init__(self, spark, data_dir, pipelines, hosts: int = 1):
        self.results = []
        self.lock = threading.Lock()
        self.executor = SparkExecutor(spark, hosting="shared", hosts=hosts)
        self.driver = Driver(self.executor, OffsetStore(data_dir), pipelines, on_epoch=self._on_epoch)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.driver.run, args=(self.stop,), daemon=True)

    def _on_epoch(self, _epoch, results, _runtimes):
        with self.lock:
            self.results.extend(results)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive(), "the driver did not stop"

    def committed(self, name: str) -> int:
        rt = next(r for r in self.driver.runtimes if r.name == name)
        return sum(o["offset"] + 1 for o in partition_offsets(rt.offsets) if o)

    def of(self, name: str) -> list:
        with self.lock:
            return [r for r in self.results if r.connector == name]

    def wait(self, what, timeout: float, why: str):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if what():
                return
            time.sleep(0.2)
        raise AssertionError(f"{why} (after {timeout:.0f} s); results: "
                             + "; ".join(f"{r.connector}/{r.task} e{r.epoch} {r.state} pid {r.pid}"
                                         for r in self.results[-12:]))


def test_pairs_in_one_python_worker_keep_committing_beside_a_failed_and_a_blocked_pair(
        kafka_pair, proxied_target, spark, tmp_path, unique):
    src, dst = kafka_pair
    blocked_dst, proxy = proxied_target
    healthy = [f"ok{i}-{unique}" for i in range(3)]
    for topic in healthy:
        create_topic(src.bootstrap, topic, 2)
        produce(src.bootstrap, topic, 200, 2)
    failing, blocked = f"bad-{unique}", f"stuck-{unique}"
    create_topic(src.bootstrap, failing, 1)
    big = Producer({"bootstrap.servers": src.bootstrap})
    big.produce(failing, b"x" * 5000, b"big", partition=0)
    assert big.flush(10) == 0
    create_topic(src.bootstrap, blocked, 1)
    produce(src.bootstrap, blocked, 100, 1)
    pipelines = [_pipeline(t, src.bootstrap, dst.bootstrap, t) for t in healthy]
    # Every record of the failing connector is too large for its producer, and nothing is tolerated.
    pipelines.append(_pipeline(failing, src.bootstrap, dst.bootstrap, failing,
                               **{"sink.producer.override.message.max.bytes": 1000}))
    pipelines.append(_pipeline(blocked, src.bootstrap, blocked_dst.bootstrap, blocked))
    with _Running(spark, tmp_path, pipelines) as run:
        run.wait(lambda: all(run.committed(t) >= 200 for t in healthy) and run.committed(blocked) >= 100, 90,
                 "the first records were not committed")
        proxy.blackhole()
        try:
            produce(src.bootstrap, blocked, 100, 1, start=100)
            time.sleep(2)  # the blocked pair has records in flight to the blackholed target
            blocked_at = run.committed(blocked)
            marks = {t: len(run.of(t)) for t in healthy}
            for topic in healthy:
                produce(src.bootstrap, topic, 300, 2, start=200)
            run.wait(lambda: all(run.committed(t) >= 500 for t in healthy), 60,
                     "the healthy connectors stopped committing beside the blocked one")
            # and they keep running epochs meanwhile (the 300 records may have been committed by the first)
            run.wait(lambda: all(len(run.of(t)) - marks[t] >= 2 for t in healthy), 15,
                     "the healthy connectors stopped running epochs beside the blocked one")
            assert run.committed(blocked) == blocked_at < 200  # nothing it could not deliver is committed
            stuck = run.of(blocked)[-1]
            assert stuck.state == "RUNNING" and stuck.stats.get("in_flight", 0) > 0, stuck.stats
        finally:
            proxy.restore()
        run.wait(lambda: run.committed(blocked) >= 200, 60, "the blocked connector did not catch up")
        bad = run.of(failing)
        assert bad and bad[-1].state == "FAILED" and "MSG_SIZE_TOO_LARGE" in (bad[-1].trace or ""), bad[-1:]
        assert not [r for r in run.results if r.connector != failing and r.state != "RUNNING"]
        pids = {r.pid for r in run.results if r.pid}
        assert len(pids) == 1, f"one host process expected, epochs ran in {pids}"
    for topic in healthy:
        keys = {m.key() for m in consume_all(dst.bootstrap, f"{topic}-out", range(2), 500)}
        assert keys == {f"key-{i}".encode() for i in range(500)}
    keys = {m.key() for m in consume_all(blocked_dst.bootstrap, f"{blocked}-out", [0], 200)}
    assert keys == {f"key-{i}".encode() for i in range(200)}


def test_kill_9_of_a_python_worker_hosting_several_pairs_loses_nothing(kafka_pair, spark, tmp_path, unique):
    src, dst = kafka_pair
    topics = [f"k{i}-{unique}" for i in range(3)]
    for topic in topics:
        create_topic(src.bootstrap, topic, 2)
        produce(src.bootstrap, topic, 500, 2)
    pipelines = [_pipeline(t, src.bootstrap, dst.bootstrap, t, **{"errors.restart.backoff.ms": 200}) for t in topics]
    with _Running(spark, tmp_path, pipelines) as run:
        run.wait(lambda: all(run.committed(t) >= 500 for t in topics), 90, "the first records were not committed")
        pids = {r.pid for r in run.results}
        assert len(pids) == 1
        victim = pids.pop()
        writer = threading.Thread(target=lambda: [produce(src.bootstrap, t, 1500, 2, start=500) for t in topics])
        writer.start()
        time.sleep(0.5)
        os.kill(victim, signal.SIGKILL)
        writer.join(60)
        run.wait(lambda: all(run.committed(t) >= 2000 for t in topics), 120,
                 "the pairs did not recover from the lost host")
        lost = [r for r in run.results if r.state == "FAILED"]
        assert lost and all(r.retriable and "was lost" in (r.trace or "") for r in lost), lost[:1]
        assert {r.pid for r in run.results if r.state == "RUNNING" and r.pid} - {victim}, "no epoch on a new host"
        assert {r.connector for r in lost} <= set(topics)
    for topic in topics:
        got = consume_all(dst.bootstrap, f"{topic}-out", range(2), 2000)
        keys = [m.key() for m in got]
        assert set(keys) == {f"key-{i}".encode() for i in range(2000)}, f"{topic}: records lost"
        assert len(keys) - 2000 <= 1500, "more duplicates than the replayed epochs can explain"


class _IdleFlood:
    """A peer on 127.0.0.2 holding ``count`` silent connections to each port, opening a new one as
    soon as the server closes one (the lock-out of issue 35: 64 such connections took every place)."""

    def __init__(self, ports: list[int], count: int = 65):
        import socket

        self._socket = socket
        self.ports, self.count = ports, count
        self.opened = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _connect(self, port: int):
        """A connection under way (non-blocking: a full listen queue does not hold the others back)."""
        s = self._socket.socket()
        s.setblocking(False)
        s.bind(("127.0.0.2", 0))
        s.connect_ex(("127.0.0.1", port))
        self.opened += 1
        return s

    def _run(self) -> None:
        import select

        held: dict = {}
        while not self.stop.is_set():
            for port in self.ports:
                for _ in range(self.count - sum(1 for p in held.values() if p == port)):
                    held[self._connect(port)] = port
            readable, _, _ = select.select(list(held), [], [], 0.05) if held else ([], [], [])
            for s in readable:  # closed or refused (EOF, an error answer): take a new place next round
                held.pop(s)
                s.close()
            time.sleep(0.01)
        for s in held:
            s.close()


def test_idle_connections_refilled_by_another_peer_do_not_lock_executors_out(kafka_pair, spark, tmp_path, unique,
                                                                            monkeypatch):
    """Issue 35: 64 idle peers took every pending place and executors were closed before their hello.
    Real executors (Python workers) must get in while a peer on another address keeps 65 silent
    connections to each control port, re-opening each one the server closes. The hello deadline is
    stretched to 60 s so the flood keeps its places for the whole test. Checked to fail with neither
    the per-address cap nor eviction (after 90 s, every epoch FAILED); on a2dbae7 it passes, as
    that server's 5-connection listen queue throttles this flood (unit tests cover that commit)."""
    from worker.runtime import control

    monkeypatch.setattr(control, "_HELLO_TIMEOUT_S", 60.0)
    src, dst = kafka_pair
    topic = f"flood-{unique}"
    create_topic(src.bootstrap, topic, 2)
    produce(src.bootstrap, topic, 300, 2)
    run = _Running(spark, tmp_path, [_pipeline(topic, src.bootstrap, dst.bootstrap, topic)])
    flood = _IdleFlood([run.driver.control.address[1], run.executor.pool._server.address[1]])
    flood.thread.start()
    try:
        time.sleep(1)  # every pending place is taken before the first host starts
        with run:
            run.wait(lambda: run.committed(topic) >= 300, 90, "the executors could not reach the driver")
    finally:
        flood.stop.set()
        flood.thread.join(10)
    keys = {m.key() for m in consume_all(dst.bootstrap, f"{topic}-out", range(2), 300)}
    assert len(keys) == 300
    print(f"committed 300 records while a peer opened {flood.opened} idle control connections")
