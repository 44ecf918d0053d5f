"""A Kafka broker behind tests/netproxy.py: a network partition must delay records, never lose them.

Every client connection goes through the proxy, because the broker advertises the proxy's port in its
metadata. The test produces while the proxy blackholes for ~5 s, restores, and counts by consuming.

Measure librdkafka's recovery after a longer partition by hand (not part of the suite):

    .venv/bin/python tests/integration/test_proxy_kafka.py --seconds 30
    .venv/bin/python tests/integration/test_proxy_kafka.py --seconds 30 --conf socket.timeout.ms=10000 ...
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Producer

if __name__ == "__main__":  # run by hand: make tests/ and the project importable as conftest does
    sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parents[2])]

from kafka_brokers import kafka_broker  # noqa: E402
from kafka_util import consume_all, create_topic  # noqa: E402
from netproxy import TcpProxy  # noqa: E402

from worker.embedded import ApacheKafka, EmbeddedKafka, free_port  # noqa: E402

pytestmark = pytest.mark.timeout(180)

PARTITIONS = 3


def start_proxied_kafka(log_path=None) -> tuple[TcpProxy, EmbeddedKafka | ApacheKafka]:
    """A proxy first (it needs the broker's port), then the broker advertising the proxy's port."""
    broker_port = free_port()
    proxy = TcpProxy(broker_port)
    try:
        kafka = kafka_broker(port=broker_port, advertised_port=proxy.port, log_path=log_path).start()
    except BaseException:
        proxy.close()
        raise
    return proxy, kafka


def run_partition(proxy: TcpProxy, bootstrap: str, topic: str, seconds: float, conf: dict | None = None,
                  before: int = 300, rate: int = 500, after: int = 300, flush_timeout: float = 120.0) -> dict:
    """Produce ``before`` records (flushed), then ``rate``/s for ``seconds`` while blackholed, restore,
    produce ``after`` more and flush. Returns what happened and when (times relative to restore())."""
    errors: list = []
    client_errors: list = []
    delivered: list[tuple[float, int]] = []  # (monotonic time, record index)
    lock = threading.Lock()

    def on_delivery(err, msg):
        with lock:
            if err is not None:
                errors.append(err)
            else:
                delivered.append((time.monotonic(), int(msg.value().split(b"-")[1])))

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                         "message.timeout.ms": 0,  # infinite: librdkafka's default is 300000 (5 min), not infinite
                         "error_cb": lambda e: client_errors.append((time.monotonic(), str(e))),
                         **(conf or {})})
    sent = 0

    def send(count: int) -> None:
        nonlocal sent
        for _ in range(count):
            while True:
                try:
                    producer.produce(topic, value=f"v-{sent}".encode(), key=str(sent).encode(),
                                     partition=sent % PARTITIONS, on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.05)
            sent += 1
        producer.poll(0)

    send(before)
    assert producer.flush(30) == 0, "records produced before the partition were not delivered"
    delivered_before = len(delivered)

    proxy.blackhole()
    t_blackhole = time.monotonic()
    tick = 0.1
    while time.monotonic() - t_blackhole < seconds:
        send(int(rate * tick))
        producer.poll(tick)
    delivered_during = len(delivered) - delivered_before
    in_flight = len(producer)

    proxy.restore()
    t_restore = time.monotonic()
    send(after)
    left = producer.flush(flush_timeout)
    t_flushed = time.monotonic()
    after_restore = [t - t_restore for t, _ in delivered if t >= t_restore]
    return {
        "sent": sent, "delivered": len(delivered), "delivered_before": delivered_before,
        "delivered_during_blackhole": delivered_during, "queued_at_restore": in_flight, "left_after_flush": left,
        "delivery_errors": [str(e) for e in errors], "client_errors": [(round(t - t_restore, 2), e) for t, e in client_errors],
        "first_delivery_after_restore_s": round(min(after_restore), 3) if after_restore else None,
        "all_delivered_after_restore_s": round(max(after_restore), 3) if after_restore else None,
        "flush_returned_after_restore_s": round(t_flushed - t_restore, 3),
        "blackhole_s": round(t_restore - t_blackhole, 2), "proxy_connections": proxy.accepted,
    }


def check_consumed(bootstrap: str, topic: str, sent: int) -> dict:
    """Consume everything; every index 0..sent-1 present, in order per partition. Returns duplicates seen."""
    msgs = consume_all(bootstrap, topic, range(PARTITIONS), sent, timeout=60)
    indexes = [int(m.value().split(b"-")[1]) for m in msgs]
    counts = Counter(indexes)
    missing = set(range(sent)) - set(counts)
    assert not missing, f"{len(missing)} records lost, e.g. {sorted(missing)[:10]}"
    by_part = defaultdict(list)
    for m, i in zip(msgs, indexes, strict=True):
        assert m.partition() == i % PARTITIONS
        by_part[m.partition()].append(i)
    first_seen_in_order = {p: sorted(dict.fromkeys(v)) == list(dict.fromkeys(v)) for p, v in by_part.items()}
    return {"consumed": len(msgs), "duplicates": sum(c - 1 for c in counts.values()),
            "in_order_per_partition": all(first_seen_in_order.values())}


@pytest.fixture
def proxied_kafka(tmp_path):
    proxy, kafka = start_proxied_kafka(tmp_path / "tansu.log")
    yield proxy, kafka
    kafka.stop()
    proxy.close()


def test_metadata_points_clients_at_the_proxy(proxied_kafka, unique):
    proxy, kafka = proxied_kafka
    topic = f"meta-{unique}"
    create_topic(kafka.bootstrap, topic, PARTITIONS)
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": kafka.listener}).list_topics(topic, timeout=10)  # asked directly...
    assert {(b.host, b.port) for b in md.brokers.values()} == {("127.0.0.1", proxy.port)}  # ...answers the proxy


def test_producer_keeps_records_through_a_5s_blackhole(proxied_kafka, unique):
    proxy, kafka = proxied_kafka
    topic = f"partition-{unique}"
    create_topic(kafka.bootstrap, topic, PARTITIONS)
    result = run_partition(proxy, kafka.bootstrap, topic, seconds=5.0)
    print(result)
    assert result["delivered_during_blackhole"] == 0  # nothing crossed the partition
    assert result["queued_at_restore"] > 0
    assert result["left_after_flush"] == 0 and result["delivery_errors"] == []
    assert result["delivered"] == result["sent"]
    assert result["all_delivered_after_restore_s"] < 10  # default timeouts: the held requests simply complete
    consumed = check_consumed(kafka.bootstrap, topic, result["sent"])
    print(consumed)
    assert consumed == {"consumed": result["sent"], "duplicates": 0, "in_order_per_partition": True}


if __name__ == "__main__":
    import argparse
    import json
    import tempfile

    ap = argparse.ArgumentParser(description="measure librdkafka's recovery after a blackhole")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--conf", nargs="*", default=[], help="producer settings key=value")
    args = ap.parse_args()
    conf = dict(kv.split("=", 1) for kv in args.conf)
    with tempfile.TemporaryDirectory() as tmp:
        proxy, kafka = start_proxied_kafka(Path(tmp) / "tansu.log")
        try:
            topic = f"manual-{int(time.time())}"
            create_topic(kafka.bootstrap, topic, PARTITIONS)
            result = run_partition(proxy, kafka.bootstrap, topic, seconds=args.seconds, conf=conf)
            result.update(check_consumed(kafka.bootstrap, topic, result["sent"]))
            print(json.dumps({"conf": conf, **result}, indent=1))
        finally:
            kafka.stop()
            proxy.close()
