"""Helpers for tests talking to real Kafka-compatible brokers (no mocks)."""

from __future__ import annotations

import time
from typing import Iterable

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def create_topic(bootstrap: str, topic: str, partitions: int, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1, config=config or {})]).values():
        future.result()


def produce(bootstrap: str, topic: str, count: int, partitions: int, *, start: int = 0, headers: bool = True) -> None:
    """``count`` records spread round-robin over partitions; key = value index, ts = 1.7e12 + i."""
    errors = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    for i in range(start, start + count):
        while True:
            try:
                p.produce(topic, value=f"value-{i}".encode(), key=f"key-{i}".encode(), partition=i % partitions,
                          timestamp=1_700_000_000_000 + i,
                          headers=[("idx", str(i).encode()), ("src", b"test")] if headers else None,
                          on_delivery=lambda err, msg: errors.append(err) if err else None)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(30) == 0
    assert not errors, errors[:3]


def consume_all(bootstrap: str, topic: str, partitions: Iterable[int], expected: int, timeout: float = 60.0,
                ident=None):
    """Read every partition from the beginning until ``expected`` records arrived and 1 s of silence.

    Counting by consuming, not by watermarks: tansu's high watermark is wrong. With ``ident`` (a
    function of a message) distinct identities are counted: after a crash the replayed duplicates
    would otherwise reach the count while the tail is still being copied.
    """
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "verify", "enable.auto.commit": False,
                  "enable.partition.eof": False})
    c.assign([TopicPartition(topic, p, 0) for p in partitions])
    out = []
    seen: set = set()
    deadline = time.monotonic() + timeout
    quiet_since = None
    try:
        while time.monotonic() < deadline:
            msgs = c.consume(10000, 0.2)
            for m in msgs:
                assert m.error() is None, m.error()
                out.append(m)
                if ident is not None:
                    seen.add(ident(m))
            if msgs:
                quiet_since = None
            elif (len(seen) if ident is not None else len(out)) >= expected:
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since > 1.0:
                    break
    finally:
        c.close()
    return out


def produce_keyed(bootstrap: str, topic: str, n: int, partitions: int, *, keys: int = 20, start: int = 0) -> None:
    """Records ``start``..``start + n - 1``: value ``str(i)``, key ``k{i % keys}`` (each key in one partition)."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    for i in range(start, start + n):
        k = i % keys
        while True:
            try:
                p.produce(topic, value=str(i).encode(), key=f"k{k}".encode(), partition=k % partitions)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0


def consume_committed(bootstrap: str, topic: str, partitions: Iterable[int], expected: int, timeout: float = 90.0,
                      quiet_s: float = 3.0, isolation: str = "read_committed") -> list:
    """Every record a ``read_committed`` (or ``isolation``) reader sees, from the beginning, until
    ``expected`` arrived and ``quiet_s`` of silence (more may come: duplicates are what the caller looks for)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "verify-committed", "enable.auto.commit": False,
                  "isolation.level": isolation})
    c.assign([TopicPartition(topic, p, 0) for p in partitions])
    out, quiet, deadline = [], None, time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            msgs = c.consume(10000, 0.2)
            out.extend(msgs)
            if msgs:
                quiet = None
            elif len(out) >= expected:
                quiet = quiet or time.monotonic()
                if time.monotonic() - quiet > quiet_s:
                    break
    finally:
        c.close()
    assert all(m.error() is None for m in out), [m.error() for m in out if m.error()][:3]
    return out


def assert_once_in_key_order(msgs: list, n: int) -> None:
    """Values 0..n-1 each exactly once (``produce_keyed``'s records), each key's values increasing."""
    values = [int(m.value()) for m in msgs]
    assert len(values) == n and set(values) == set(range(n)), \
        f"{len(values) - len(set(values))} duplicate(s), {n - len(set(values) & set(range(n)))} missing"
    by_key: dict[bytes, list[int]] = {}
    for m in msgs:
        by_key.setdefault(m.key(), []).append(int(m.value()))
    for key, seq in by_key.items():
        assert seq == sorted(seq), f"{key!r} out of order"
