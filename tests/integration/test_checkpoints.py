"""Checkpoints with true offset translation, over the wire, for K->K, R->R, P->P and cross-broker
pairs: a mirror writes offset syncs; a consumer group consumes part of the topic in the source
cluster (with the brokers' own consumer mechanics: Kafka commit, RocketMQ consumer offsets,
Pulsar acknowledgements); the checkpoint connector translates its positions, emits checkpoint
records and moves the same group in the target cluster; a consumer of that group in the target
then reads from there. It must see every record the group had not consumed in the source (zero
gaps), and the records it sees again (duplicates) are counted and bounded by what the mirror
copied between two offset syncs (here one produce round).

Records are produced in rounds with a mirror epoch between them, so offset syncs fall at round
boundaries and the group's position falls inside a round."""

from __future__ import annotations

import time

import pulsar
import pulsar_util
import pytest
from confluent_kafka import Consumer, TopicPartition
from kafka_util import create_topic
from kafka_util import produce as kafka_produce
from pipeline_util import make_driver, pair_pipeline

from connectors.rocketmq.client import SyncRocketMQClient

pytestmark = pytest.mark.timeout(300)

PARTS = 2
ROUNDS = 4
PER_ROUND = 60  # records per round (all partitions)
CONSUMED = 65  # records the group consumes in the source, per partition: inside round 3 of 6


class KafkaCluster:
    kind = "kafka"

    def __init__(self, broker):
        self.b = broker

    def side(self) -> dict:
        return {"connector.class": "kafka", "bootstrap.servers": self.b.bootstrap}

    def client_keys(self) -> dict:
        return {"bootstrap.servers": self.b.bootstrap}

    def create(self, topic: str) -> None:
        create_topic(self.b.bootstrap, topic, PARTS)

    def produce(self, topic: str, count: int, start: int) -> None:
        kafka_produce(self.b.bootstrap, topic, count, PARTS, start=start)

    def consume_and_commit(self, topic: str, group: str, per_partition: int) -> dict[int, int]:
        """The group consumes ``per_partition`` records of each partition and commits; index of the
        first record it did not consume, per partition."""
        c = Consumer({"bootstrap.servers": self.b.bootstrap, "group.id": group, "enable.auto.commit": False})
        c.assign([TopicPartition(topic, p, 0) for p in range(PARTS)])
        seen: dict[int, list[int]] = {p: [] for p in range(PARTS)}
        deadline = time.monotonic() + 30
        while any(len(v) < per_partition for v in seen.values()) and time.monotonic() < deadline:
            for m in c.consume(500, 0.2):
                if len(seen[m.partition()]) < per_partition:
                    seen[m.partition()].append(int(m.value().decode().split("-")[1]))
                    if len(seen[m.partition()]) == per_partition:
                        c.commit(offsets=[TopicPartition(topic, m.partition(), m.offset() + 1)], asynchronous=False)
        c.close()
        return {p: v[-1] + PARTS for p, v in seen.items()}  # round robin: the next index of this partition

    def read_group(self, topic: str, group: str) -> dict[int, list[int]]:
        c = Consumer({"bootstrap.servers": self.b.bootstrap, "group.id": group, "enable.auto.commit": False,
                      "auto.offset.reset": "error"})
        committed = c.committed([TopicPartition(topic, p) for p in range(PARTS)], timeout=10)
        assert all(tp.offset >= 0 for tp in committed), committed
        c.assign(committed)
        out: dict[int, list[int]] = {p: [] for p in range(PARTS)}
        quiet = time.monotonic()
        while time.monotonic() - quiet < 2:
            for m in c.consume(1000, 0.2):
                assert m.error() is None, m.error()
                out[m.partition()].append(int(m.value().decode().split("-")[1]))
                quiet = time.monotonic()
        c.close()
        return out


class RocketMQCluster:
    kind = "rocketmq"

    def __init__(self, broker):
        self.b = broker

    def side(self) -> dict:
        return {"connector.class": "rocketmq", "namesrv.addr": self.b.namesrv}

    def client_keys(self) -> dict:
        return {"namesrv.addr": self.b.namesrv}

    def create(self, topic: str) -> None:
        with SyncRocketMQClient(self.b.namesrv) as c:
            c.create_topic(self.b.namesrv, topic, PARTS, PARTS)

    def produce(self, topic: str, count: int, start: int) -> None:
        with SyncRocketMQClient(self.b.namesrv) as c:
            futures = [c.send(self.b.namesrv, topic, i % PARTS, f"value-{i}".encode(), {"KEYS": f"key-{i}"},
                              born_timestamp=1_700_000_000_000 + i) for i in range(start, start + count)]
            assert all(f.result(30).ok for f in futures)

    def _queues(self, c, topic: str):
        route = c.topic_route(topic)
        return [(mq, route.master_addr(mq.broker_name)) for mq in route.read_queues()]

    def consume_and_commit(self, topic: str, group: str, per_partition: int) -> dict[int, int]:
        nxt = {}
        with SyncRocketMQClient(self.b.namesrv) as c:
            for mq, addr in self._queues(c, topic):
                r = c.pull(addr, group, topic, mq.queue_id, 0, per_partition)
                assert r.status == "FOUND" and len(r.messages) == per_partition, (r.status, len(r.messages))
                c.update_consumer_offset(addr, group, topic, mq.queue_id, per_partition)
                nxt[mq.queue_id] = int(r.messages[-1].body.decode().split("-")[1]) + PARTS
        return nxt

    def read_group(self, topic: str, group: str) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        with SyncRocketMQClient(self.b.namesrv) as c:
            for mq, addr in self._queues(c, topic):
                offset = c.query_consumer_offset(addr, group, topic, mq.queue_id)
                assert offset is not None and offset >= 0, (group, mq)
                got = out[mq.queue_id] = []
                while True:
                    r = c.pull(addr, group, topic, mq.queue_id, offset, 500)
                    if r.status != "FOUND":
                        break
                    got += [int(m.body.decode().split("-")[1]) for m in r.messages]
                    offset = r.next_begin_offset
        return out


class PulsarCluster:
    kind = "pulsar"

    def __init__(self, broker):
        self.b = broker

    def side(self) -> dict:
        return {"connector.class": "pulsar", "service.url": self.b.service_url}

    def client_keys(self) -> dict:
        return {"service.url": self.b.service_url}

    def full(self, topic: str) -> str:
        return topic if "://" in topic else f"persistent://public/default/{topic}"

    def create(self, topic: str) -> None:
        self.b.create_partitioned_topics({self.full(topic): PARTS})

    def produce(self, topic: str, count: int, start: int) -> None:
        pulsar_util.produce(self.b, self.full(topic), count, PARTS, start=start)

    def consume_and_commit(self, topic: str, group: str, per_partition: int) -> dict[int, int]:
        c = pulsar_util.client(self.b)
        nxt = {}
        try:
            for p in range(PARTS):
                cons = c.subscribe(f"{self.full(topic)}-partition-{p}", group, consumer_type=pulsar.ConsumerType.Exclusive,
                                   initial_position=pulsar.InitialPosition.Earliest)
                for i in range(per_partition):
                    try:
                        m = cons.receive(10_000)
                    except pulsar.Timeout:
                        raise AssertionError(f"partition {p}: only {i} of {per_partition} messages") from None
                cons.acknowledge_cumulative(m)
                time.sleep(1.0)  # acknowledgements are flushed in the background
                cons.close()
                nxt[p] = int(m.data().decode().split("-")[1]) + PARTS
        finally:
            c.close()
        return nxt

    def read_group(self, topic: str, group: str) -> dict[int, list[int]]:
        c = pulsar_util.client(self.b)
        out: dict[int, list[int]] = {}
        try:
            for p in range(PARTS):
                cons = c.subscribe(f"{self.full(topic)}-partition-{p}", group, consumer_type=pulsar.ConsumerType.Exclusive)
                got = out[p] = []
                while True:
                    try:
                        m = cons.receive(2000)
                    except pulsar.Timeout:
                        break
                    got.append(int(m.data().decode().split("-")[1]))
                cons.close()
        finally:
            c.close()
        return out


def _cluster(kind: str, broker):
    return {"kafka": KafkaCluster, "rocketmq": RocketMQCluster, "pulsar": PulsarCluster}[kind](broker)


def _translate_and_check(spark, tmp_path, src, dst, topic: str, group: str, drivers: list) -> None:
    syncs = f"{topic}-offset-syncs"
    src_topic = src.full(topic) if src.kind == "pulsar" else topic
    mirror = pair_pipeline(f"{topic}-mirror", {**src.side(), "topics": src_topic, "cluster.alias": "S"},
                           {**dst.side(), "cluster.alias": "T",
                            **({"topic.template": f"persistent://public/default/{topic}"} if dst.kind == "pulsar" else {})},
                           **{"offset.syncs.topic": syncs if dst.kind != "pulsar" else f"persistent://public/default/{syncs}",
                              "offset.syncs.interval.ms": "10", "epoch.max.ms": "700"})
    driver = make_driver(spark, tmp_path / "mirror", mirror)
    drivers.append(driver)
    per_partition = PER_ROUND // PARTS
    emitted = 0
    for n in range(ROUNDS):  # a round, then epochs until it is copied and its offset syncs are written
        src.produce(topic, PER_ROUND, n * PER_ROUND)
        for _ in range(40):
            results = driver.run_epoch()
            failed = [r.trace for r in results if r.state != "RUNNING"]
            assert not failed, failed[0]
            emitted = max([emitted] + [r.metrics.get("offset_syncs.emitted", 0) for r in results if r.metrics])
            if emitted >= (n + 1) * PARTS:
                break
        else:
            raise AssertionError(f"round {n}: only {emitted} offset syncs written")
    next_index = src.consume_and_commit(src_topic, group, CONSUMED)

    syncs_topic = f"persistent://public/default/{syncs}" if dst.kind == "pulsar" else syncs
    checkpoints = f"{topic}-checkpoints"
    cp = pair_pipeline(
        f"{topic}-checkpoint",
        {"connector.class": "checkpoint", "upstream.type": src.kind, "upstream.alias": "S",
         **{f"upstream.{k}": v for k, v in src.client_keys().items()}, "downstream.type": dst.kind,
         "downstream.alias": "T", **{f"downstream.{k}": v for k, v in dst.client_keys().items()},
         "offset.syncs.topic": syncs_topic, "groups": group, "emit.checkpoints.interval.ms": "300",
         "sync.group.offsets.enabled": "true",
         "checkpoints.topic": f"persistent://public/default/{checkpoints}" if dst.kind == "pulsar" else checkpoints},
        {**dst.side(), **({"auto.create.topics": "true"} if dst.kind == "rocketmq" else {})}, **{"epoch.max.ms": "1000"})
    cdriver = make_driver(spark, tmp_path / "checkpoint", cp)
    drivers.append(cdriver)
    applied = []
    for _ in range(20):
        results = cdriver.run_epoch()
        failed = [r.trace for r in results if r.state != "RUNNING"]
        assert not failed, failed[0]
        applied = [r.metrics.get("checkpoint.applied", 0) for r in results if r.metrics]
        if applied and applied[0] >= PARTS:
            break
    assert applied and applied[0] >= PARTS, f"group not moved in the target: {results[0].metrics}"

    dst_topic = dst.full(topic) if dst.kind == "pulsar" else topic
    seen = dst.read_group(dst_topic, group)
    duplicates = 0
    for part, indexes in seen.items():
        # target partition/queue N holds source partition/queue N (partitions preserved)
        expected_after = next_index[part]
        wanted = list(range(expected_after, ROUNDS * PER_ROUND, PARTS))
        missing = sorted(set(wanted) - set(indexes))
        assert not missing, f"partition {part}: gap, {len(missing)} record(s) after the source position missing: {missing[:5]}"
        before = [i for i in indexes if i < expected_after]
        duplicates += len(before)
        # Bound: one round (the sync spacing); a Pulsar target resumes at the start of a batched entry,
        # so one batch more (here a batch may hold a whole round).
        bound = per_partition * (2 if dst.kind == "pulsar" else 1)
        assert len(before) <= bound, f"partition {part}: {len(before)} duplicates, more than {bound}"
    print(f"{src.kind}->{dst.kind}: duplicates {duplicates} for {PARTS} partitions, 0 gaps")


@pytest.mark.parametrize("kinds", [("kafka", "kafka"), ("rocketmq", "rocketmq"), ("pulsar", "pulsar"),
                                   ("kafka", "rocketmq"), ("pulsar", "kafka")], ids=lambda k: f"{k[0]}-{k[1]}")
def test_checkpoint_translation_resumes_without_gaps(kinds, spark, tmp_path, unique, request):
    fixtures = {"kafka": "kafka_pair", "rocketmq": "rocketmq_pair", "pulsar": "pulsar_pair"}
    src_pair = request.getfixturevalue(fixtures[kinds[0]])
    dst_pair = request.getfixturevalue(fixtures[kinds[1]])
    src, dst = _cluster(kinds[0], src_pair[0]), _cluster(kinds[1], dst_pair[1])
    topic = f"cp{kinds[0][0]}{kinds[1][0]}{unique.rsplit('-', 1)[1]}"
    group = f"{topic}-g"
    src.create(topic)
    dst.create(topic)
    drivers: list = []
    try:
        _translate_and_check(spark, tmp_path, src, dst, topic, group, drivers)
    finally:
        for driver in drivers:  # their connectors hold broker clients
            driver.close()
