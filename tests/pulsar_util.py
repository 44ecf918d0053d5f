"""Helpers for tests talking to real pulsar-lite brokers (no mocks)."""

from __future__ import annotations

import time

import pulsar

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


def client(broker) -> pulsar.Client:
    return pulsar.Client(broker.service_url, logger=QUIET, operation_timeout_seconds=30)


def wait_serving(broker, timeout: float = 120.0) -> None:
    """Until ``broker`` stores a message (on a topic of its own): after a thaw, a JVM broker catches
    up for a while before it answers in the times a short send timeout allows."""
    deadline = time.monotonic() + timeout
    c = client(broker)
    try:
        while True:
            try:
                p = c.create_producer("persistent://public/default/__serving-check", send_timeout_millis=5000)
                p.send(b"ok")
                p.close()
                return
            except pulsar.PulsarException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        c.close()


def produce(broker, topic: str, count: int, partitions: int, *, start: int = 0) -> None:
    """``count`` messages round robin over the partitions (written to each ``-partition-N`` by name,
    or to ``topic`` when ``partitions`` is 0); key ``key-i``, properties ``idx``/``src``, event time
    1.7e12 + i, ordering key ``ok-<i % 7>``; every send result checked."""
    c = client(broker)
    errors = []
    try:
        names = [f"{topic}-partition-{p}" for p in range(partitions)] if partitions else [topic]
        producers = [c.create_producer(n, batching_enabled=True, batching_max_publish_delay_ms=5,
                                       block_if_queue_full=True, max_pending_messages=20_000) for n in names]
        for i in range(start, start + count):
            producers[i % len(producers)].send_async(
                f"value-{i}".encode(), lambda res, _mid: errors.append(res) if res != pulsar.Result.Ok else None,
                partition_key=f"key-{i}", properties={"idx": str(i), "src": "test"},
                event_timestamp=1_700_000_000_000 + i, ordering_key=f"ok-{i % 7}")
        for p in producers:
            p.flush()
            p.close()
    finally:
        c.close()
    assert not errors, errors[:3]


def consume_all(broker, topic: str, partitions: int, expected: int, timeout: float = 60.0,
                ident=None) -> dict[int, list]:
    """Every message of each partition (from the earliest), by partition index (-1: not
    partitioned), until ``expected`` arrived and 1 s of silence followed. With ``ident`` (message ->
    identity), ``expected`` counts distinct identities, so duplicates cannot end the read early
    while a stalled reader still holds the tail. Read with the Pulsar
    source's own guards (``connectors.pulsar.guards``): pulsar-lite's readers stall and deliver
    again under load, which plain readers turned into missing or doubled records in tests."""
    from connectors.pulsar.guards import TopicReaders

    c = client(broker)
    names = {f"{topic}-partition-{p}": p for p in range(partitions)} if partitions else {topic: -1}
    readers = TopicReaders(c, list(names), stall_ms=1000)
    out: dict[int, list] = {p: [] for p in names.values()}
    deadline = time.monotonic() + timeout
    quiet_since = None
    seen: set = set()
    try:
        while time.monotonic() < deadline:
            got = readers.read(5000, 50)
            for name, m in got:
                wrapped = pulsar.Message._wrap(m)
                out[names[name]].append(wrapped)
                if ident is not None:
                    seen.add(ident(wrapped))
            total = len(seen) if ident is not None else sum(map(len, out.values()))
            if got:
                quiet_since = None
            elif total >= expected:
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since > 1.0:
                    break
    finally:
        readers.close()
        c.close()
    return out
