"""Active-active replication without loops, over real brokers: identity topic names everywhere,
producers writing to every cluster at once, and every record ending up exactly once in every cluster.

- a full mesh of three Kafka clusters (six flows, ``replication.max.hops=1``);
- a ring of three Kafka clusters (A -> B -> C -> A, no hop limit: the origin chain alone stops it);
- a mixed-broker ring Kafka -> Pulsar -> RocketMQ -> Kafka;
- a mixed-broker full mesh Kafka <-> Pulsar <-> RocketMQ (six flows, max hops 1), producers
  writing to the three clusters while it runs.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import pulsar_util
import pytest
import rocketmq_util
from confluent_kafka import Consumer, TopicPartition
from kafka_util import create_topic, produce
from pipeline_util import make_driver, pair_pipeline

from connect.tasks.origin import DEFAULT_ORIGIN_PROPERTY as PROP

pytestmark = pytest.mark.timeout(400)


def kafka_values(bootstrap: str, topic: str) -> list[tuple[bytes, bytes | None]]:
    """(value, origin chain) of every record of the topic, from every partition it has now: a sink
    grows a target topic to its source's partition count (a RocketMQ topic's 4 queues make a
    2-partition Kafka topic 4; tansu, without CreatePartitions, never grew it). Read up to each
    partition's high watermark (exact on Apache Kafka, a lower bound on tansu) and until 1 s quiet."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "mesh-verify", "enable.auto.commit": False})
    out, quiet, deadline = [], 0, time.monotonic() + 60
    try:
        partitions = sorted(c.list_topics(topic, timeout=15).topics[topic].partitions)
        highs = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=15)[1] for p in partitions}
        position = dict.fromkeys(partitions, 0)
        c.assign([TopicPartition(topic, p, 0) for p in partitions])
        while (quiet < 5 or any(position[p] < highs[p] for p in partitions)) and time.monotonic() < deadline:
            msgs = c.consume(10000, 0.2)
            quiet = 0 if msgs else quiet + 1
            for m in msgs:
                if m.error() is None:
                    out.append((m.value(), dict(m.headers() or []).get(PROP)))
                    position[m.partition()] = m.offset() + 1
    finally:
        c.close()
    return out


def run_while(driver, done, timeout: float, what: str) -> None:
    """Run the driver's connectors in a thread until ``done()`` holds (then stop them)."""
    stop = threading.Event()
    thread = threading.Thread(target=driver.run, args=(stop,), kwargs={"idle_wait": 0.2}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if done():
                return
            time.sleep(1.0)
        raise AssertionError(f"timed out after {timeout} s waiting for {what}")
    finally:
        stop.set()
        thread.join(60)


def kafka_flow(name: str, src_alias: str, src, dst_alias: str, dst, topic: str, **extra):
    return pair_pipeline(
        name, {"connector.class": "kafka", "bootstrap.servers": src.bootstrap, "topics": topic,
               "start.position": "earliest", "cluster.alias": src_alias},
        {"connector.class": "kafka", "bootstrap.servers": dst.bootstrap, "cluster.alias": dst_alias},
        **{"epoch.max.ms": "1000", **extra})


def assert_exactly_once_everywhere(clusters: dict, topic: str, expected: set[bytes]) -> dict[str, list]:
    seen = {}
    for alias, broker in clusters.items():
        got = kafka_values(broker.bootstrap, topic)
        counts = Counter(v for v, _ in got)
        assert set(counts) == expected, f"{alias}: {len(expected - set(counts))} missing, {len(set(counts) - expected)} foreign"
        assert max(counts.values()) == 1, f"{alias}: {sum(n - 1 for n in counts.values())} duplicates (a loop or two paths)"
        seen[alias] = got
    return seen


def _produce_all(clusters: dict, topic: str, n: int) -> None:
    threads = [threading.Thread(target=produce, args=(b.bootstrap, topic, n, 2), kwargs={"start": i * n})
               for i, b in enumerate(clusters.values())]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_kafka_full_mesh_identity_names_no_loop_no_loss(kafka_pair, third_kafka, spark, tmp_path, unique):
    clusters = {"A": kafka_pair[0], "B": kafka_pair[1], "C": third_kafka}
    topic, n = f"mesh-{unique.rsplit('-', 1)[1]}", 3000
    for broker in clusters.values():
        create_topic(broker.bootstrap, topic, 2)
    flows = [kafka_flow(f"{unique}-{s}{t}", s, clusters[s], t, clusters[t], topic, **{"replication.max.hops": "1"})
             for s in clusters for t in clusters if s != t]
    driver = make_driver(spark, tmp_path, *flows)
    expected = {f"value-{i}".encode() for i in range(3 * n)}
    producer = threading.Thread(target=_produce_all, args=(clusters, topic, n))
    producer.start()  # every cluster written at once, while the mesh runs

    def converged() -> bool:
        return not producer.is_alive() and all(len(kafka_values(b.bootstrap, topic)) >= 3 * n for b in clusters.values())

    run_while(driver, converged, 300, f"{3 * n} records in every cluster")
    producer.join()
    seen = assert_exactly_once_everywhere(clusters, topic, expected)
    chains = {v: c for v, c in seen["C"]}
    assert chains[b"value-0"] == b"A" and chains[f"value-{n}".encode()] == b"B"  # copied once, from where born
    assert chains[f"value-{2 * n}".encode()] is None  # born in C


def test_kafka_ring_identity_names_the_origin_chain_stops_the_loop(kafka_pair, third_kafka, spark, tmp_path, unique):
    clusters = {"A": kafka_pair[0], "B": kafka_pair[1], "C": third_kafka}
    topic, n = f"ring-{unique.rsplit('-', 1)[1]}", 3000
    for broker in clusters.values():
        create_topic(broker.bootstrap, topic, 2)
    ring = [("A", "B"), ("B", "C"), ("C", "A")]
    driver = make_driver(spark, tmp_path, *[kafka_flow(f"{unique}-{s}{t}", s, clusters[s], t, clusters[t], topic)
                                            for s, t in ring])
    expected = {f"value-{i}".encode() for i in range(3 * n)}
    _produce_all(clusters, topic, n)

    def converged() -> bool:
        return all(len(kafka_values(b.bootstrap, topic)) >= 3 * n for b in clusters.values())

    run_while(driver, converged, 300, f"{3 * n} records in every cluster")
    time.sleep(3)  # a loop would keep copying: nothing more may arrive
    seen = assert_exactly_once_everywhere(clusters, topic, expected)
    chains = {v: c for v, c in seen["C"]}
    assert chains[b"value-0"] == b"A,B"  # born in A, copied through B
    assert {v: c for v, c in seen["A"]}[f"value-{n}".encode()] == b"B,C"


def test_mixed_ring_kafka_pulsar_rocketmq_identity_names_exactly_once(kafka_pair, pulsar_pair, rocketmq_pair, spark,
                                                                      tmp_path, unique):
    kafka, pulsar, rocketmq = kafka_pair[0], pulsar_pair[0], rocketmq_pair[0]
    topic, n = f"mix-{unique.rsplit('-', 1)[1]}", 2000
    create_topic(kafka.bootstrap, topic, 2)
    kafka_side = {"connector.class": "kafka", "bootstrap.servers": kafka.bootstrap, "cluster.alias": "K"}
    pulsar_side = {"connector.class": "pulsar", "service.url": pulsar.service_url, "cluster.alias": "P"}
    rocketmq_side = {"connector.class": "rocketmq", "namesrv.addr": rocketmq.namesrv, "cluster.alias": "R"}
    # every cluster holds its own records before the ring starts (and the topics exist)
    produce(kafka.bootstrap, topic, n, 2)
    pulsar_util.produce(pulsar, topic, n, 0, start=n)
    rocketmq_util.produce(rocketmq, topic, n, 2, start=2 * n)
    flows = [
        pair_pipeline(f"{unique}-KP", {**kafka_side, "topics": topic, "start.position": "earliest"}, pulsar_side),
        pair_pipeline(f"{unique}-PR", {**pulsar_side, "topics": topic, "start.position": "earliest"}, rocketmq_side),
        pair_pipeline(f"{unique}-RK", {**rocketmq_side, "topics": topic, "start.position": "earliest"}, kafka_side),
    ]
    driver = make_driver(spark, tmp_path, *flows)
    expected = {f"value-{i}".encode() for i in range(3 * n)}

    def in_pulsar() -> list:
        return [m for msgs in pulsar_util.consume_all(pulsar, topic, 0, 0, timeout=3).values() for m in msgs]

    def in_rocketmq() -> list:
        return [m for msgs in rocketmq_util.consume_all(rocketmq, topic).values() for m in msgs]

    def converged() -> bool:
        return (len(kafka_values(kafka.bootstrap, topic)) >= 3 * n and len(in_rocketmq()) >= 3 * n
                and len(in_pulsar()) >= 3 * n)

    run_while(driver, converged, 300, f"{3 * n} records in Kafka, Pulsar and RocketMQ")
    got = {"kafka": [v for v, _ in kafka_values(kafka.bootstrap, topic)],
           "pulsar": [m.data() for m in in_pulsar()],
           "rocketmq": [m.body for m in in_rocketmq()]}
    for where, values in got.items():
        counts = Counter(values)
        assert set(counts) == expected, f"{where}: {len(expected - set(counts))} missing"
        assert max(counts.values()) == 1, f"{where}: {sum(c - 1 for c in counts.values())} duplicates"
    chain_in_kafka = {v: c for v, c in kafka_values(kafka.bootstrap, topic)}
    assert chain_in_kafka[f"value-{n}".encode()] == b"P,R"  # born in Pulsar, through RocketMQ
    assert chain_in_kafka[b"value-0"] is None
    by_value = {m.data(): m.properties().get(PROP) for m in in_pulsar()}
    assert by_value[f"value-{2 * n}".encode()] == "R,K" and by_value[b"value-0"] == "K"


def _mixed_values(kafka, pulsar, rocketmq, topic: str) -> dict[str, list[tuple[bytes, str | None]]]:
    """(value, origin chain) of every record in each cluster."""
    return {
        "K": [(v, c.decode() if c else None) for v, c in kafka_values(kafka.bootstrap, topic)],
        "P": [(m.data(), m.properties().get(PROP)) for msgs in pulsar_util.consume_all(pulsar, topic, 0, 0, timeout=3).values()
              for m in msgs],
        "R": [(m.body, m.properties.get(PROP)) for msgs in rocketmq_util.consume_all(rocketmq, topic).values() for m in msgs],
    }


def test_mixed_full_mesh_kafka_pulsar_rocketmq_producers_everywhere_exactly_once(kafka_pair, pulsar_pair, rocketmq_pair,
                                                                                 spark, tmp_path, unique):
    kafka, pulsar, rocketmq = kafka_pair[1], pulsar_pair[1], rocketmq_pair[1]
    topic, n = f"mixmesh-{unique.rsplit('-', 1)[1]}", 1500
    sides = {"K": {"connector.class": "kafka", "bootstrap.servers": kafka.bootstrap},
             "P": {"connector.class": "pulsar", "service.url": pulsar.service_url},
             "R": {"connector.class": "rocketmq", "namesrv.addr": rocketmq.namesrv}}
    # the topics exist everywhere before the mesh starts (one record each, born there)
    create_topic(kafka.bootstrap, topic, 2)
    produce(kafka.bootstrap, topic, 1, 2, start=3 * n)
    pulsar_util.produce(pulsar, topic, 1, 0, start=3 * n + 1)
    rocketmq_util.produce(rocketmq, topic, 1, 2, start=3 * n + 2)
    flows = [pair_pipeline(f"{unique}-{s}{t}", {**sides[s], "topics": topic, "start.position": "earliest", "cluster.alias": s},
                           {**sides[t], "cluster.alias": t}, **{"epoch.max.ms": "1000", "replication.max.hops": "1"})
             for s in sides for t in sides if s != t]
    driver = make_driver(spark, tmp_path, *flows)
    producers = [threading.Thread(target=produce, args=(kafka.bootstrap, topic, n, 2)),
                 threading.Thread(target=pulsar_util.produce, args=(pulsar, topic, n, 0), kwargs={"start": n}),
                 threading.Thread(target=rocketmq_util.produce, args=(rocketmq, topic, n, 2), kwargs={"start": 2 * n})]
    for t in producers:
        t.start()  # every cluster written at once, while the mesh runs
    expected = {f"value-{i}".encode() for i in range(3 * n + 3)}

    def converged() -> bool:
        return not any(t.is_alive() for t in producers) and all(
            len(v) >= len(expected) for v in _mixed_values(kafka, pulsar, rocketmq, topic).values())

    run_while(driver, converged, 300, f"{len(expected)} records in Kafka, Pulsar and RocketMQ")
    time.sleep(2)  # a loop or a second path would keep adding copies
    seen = _mixed_values(kafka, pulsar, rocketmq, topic)
    born = {f"value-{i}".encode(): a for a, lo in (("K", 0), ("P", n), ("R", 2 * n)) for i in range(lo, lo + n)}
    born.update({f"value-{3 * n + i}".encode(): a for i, a in enumerate("KPR")})
    for where, records in seen.items():
        counts = Counter(v for v, _ in records)
        assert set(counts) == expected, f"{where}: {len(expected - set(counts))} missing"
        assert max(counts.values()) == 1, f"{where}: {sum(c - 1 for c in counts.values())} duplicates"
        for value, chain in records:  # born here: no chain; else copied once, straight from where it was born
            assert chain == (None if born[value] == where else born[value]), (where, value, chain)
