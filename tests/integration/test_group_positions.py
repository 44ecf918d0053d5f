"""Consumer-group positions of RocketMQ groups and Pulsar subscriptions (connectors.rocketmq.groups,
connectors.pulsar.groups) read and moved over the wire against the embedded RocketMQ broker and
pulsar-lite; Kafka groups' handling of per-partition errors with a scripted admin client."""

from __future__ import annotations

import concurrent.futures
import hashlib
import time
from types import SimpleNamespace

import pulsar
import pytest
from confluent_kafka import ConsumerGroupState, KafkaError
from pulsar_util import QUIET
from rocketmq_util import produce

from connect.errors import RetriableError
from connect.records import partition_key
from connectors.kafka.groups import KafkaGroups
from connectors.pulsar.groups import PulsarGroups
from connectors.rocketmq.groups import RocketMQGroups, is_system_group
from connectors.rocketmq.models import ConsumerData
from connectors.rocketmq.sync_client import SyncRocketMQClient


def _name(prefix: str, unique: str) -> str:
    return prefix + hashlib.sha1(unique.encode()).hexdigest()[:10]


# -- RocketMQ -------------------------------------------------------------------------------------------
def _rmq_expected(topic: str, broker: str, offsets: dict[int, int]) -> dict:
    out = {}
    for queue, offset in offsets.items():
        sp = {"topic": topic, "broker": broker, "queue": queue}
        out[partition_key(sp)] = (sp, offset)
    return out


def test_rocketmq_positions_and_forward_only_moves(rocketmq_pair, unique):
    src, _ = rocketmq_pair
    topic, group = _name("GroupPos", unique), _name("GID_pos_", unique)
    produce(src, topic, 40, 4)  # 10 per queue
    groups = RocketMQGroups({"namesrv.addr": src.namesrv, "groups": "ignored"})
    try:
        with SyncRocketMQClient(src.namesrv) as client:
            route = client.topic_route(topic)
            broker = route.queue_datas[0].broker_name
            assert groups.positions(group, [topic, _name("Missing", unique)]) == {}  # no offsets, no such topic

            # the group does not exist on the broker yet (offsets are refused for it, as Apache 5.x
            # does): moving it creates its subscription group
            assert group not in client.subscription_groups(route.master_addr(broker))
            moved = groups.apply(group, {(topic, (broker, 0)): (3, True), (topic, (broker, 1)): (3, False)})
            assert sorted(moved) == [(topic, (broker, 0)), (topic, (broker, 1))]
            assert group in client.subscription_groups(route.master_addr(broker))
            assert groups.positions(group, [topic]) == _rmq_expected(topic, broker, {0: 3, 1: 4})
            assert client.query_consumer_offset(route.master_addr(broker), group, topic, 1) == 4

            # offsets written by someone else are read back exactly; queues without one are left out
            client.update_consumer_offset(route.master_addr(broker), group, topic, 2, 7)
            assert groups.positions(group, [topic]) == _rmq_expected(topic, broker, {0: 3, 1: 4, 2: 7})

            # forward only: queue 0 back to 1 and queue 2 to its own position stay; queue 1 moves to 6
            moved = groups.apply(group, {(topic, (broker, 0)): (1, True), (topic, (broker, 1)): (6, True),
                                         (topic, (broker, 2)): (6, False)})
            assert moved == [(topic, (broker, 1))]
            positions = groups.positions(group, [topic])
            assert positions == _rmq_expected(topic, broker, {0: 3, 1: 6, 2: 7})

            # a record's order key compares with the position: offsets 0..2 of queue 0 were consumed, 3 not
            sp, position = positions[partition_key({"topic": topic, "broker": broker, "queue": 0})]
            assert [groups.order_key({"offset": n}) < position for n in range(5)] == [True] * 3 + [False] * 2
    finally:
        groups.close()
    groups.close()  # twice: no second release


def test_rocketmq_group_with_live_consumers_is_not_moved_and_is_listed(rocketmq_pair, unique):
    src, _ = rocketmq_pair
    topic, group = _name("GroupLive", unique), _name("GID_live_", unique)
    produce(src, topic, 8, 2)
    groups = RocketMQGroups({"namesrv.addr": src.namesrv})
    try:
        with SyncRocketMQClient(src.namesrv) as client:
            route = client.topic_route(topic)
            broker = route.queue_datas[0].broker_name
            client.heartbeat(route.master_addr(broker), "live-client@1", consumer_groups=[ConsumerData(group, (topic,))])
            assert client.consumer_ids(route.master_addr(broker), group) == ["live-client@1"]
            assert groups.apply(group, {(topic, (broker, 0)): (2, True)}) == []
            assert groups.positions(group, [topic]) == {}  # reading needs no idle group
            listed = groups.list_groups()
            assert group in listed and not any(is_system_group(g) for g in listed)
        # the consumer's connection closed: the broker forgets it and the group can be moved
        deadline = time.monotonic() + 5
        while not (moved := groups.apply(group, {(topic, (broker, 0)): (2, True)})) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert moved == [(topic, (broker, 0))]
        assert groups.positions(group, [topic]) == _rmq_expected(topic, broker, {0: 2})
    finally:
        groups.close()


def test_rocketmq_system_groups():
    assert is_system_group("CID_RMQ_SYS_TRANS") and is_system_group("TOOLS_CONSUMER")
    assert not is_system_group("orders-readers") and not is_system_group("TOOLS_CONSUMER_2")


# -- Pulsar ---------------------------------------------------------------------------------------------
def _send(client: pulsar.Client, topic: str, n: int) -> list[tuple[int, int, int]]:
    """``n`` unbatched messages ``m0..``; their ids."""
    producer = client.create_producer(topic, batching_enabled=False)
    try:
        ids = [producer.send(f"m{i}".encode()) for i in range(n)]
    finally:
        producer.close()
    return [(m.ledger_id(), m.entry_id(), m.batch_index()) for m in ids]


def _offset(mid: tuple[int, int, int]) -> dict:
    """A message id as the Pulsar source writes it in a record's source offset."""
    return {"ledger": mid[0], "entry": mid[1], "batch": mid[2]}


def _first(client: pulsar.Client, topic: str, subscription: str) -> bytes | None:
    """The payload the subscription's next consumer receives first (not acknowledged); None: nothing."""
    consumer = client.subscribe(topic, subscription, receiver_queue_size=1)
    try:
        return consumer.receive(timeout_millis=1000).data()
    except pulsar.Timeout:
        return None
    finally:
        consumer.close()


def _consume(client: pulsar.Client, topic: str, subscription: str, count: int, ack_through: int) -> None:
    """Receives ``count`` messages from the earliest, acknowledges cumulatively through index ``ack_through``."""
    consumer = client.subscribe(topic, subscription, initial_position=pulsar.InitialPosition.Earliest)
    try:
        messages = [consumer.receive(timeout_millis=5000) for _ in range(count)]
        consumer.acknowledge_cumulative(messages[ack_through])
        time.sleep(1.0)  # acknowledgements are flushed asynchronously
    finally:
        consumer.close()


def _pulsar_groups(broker, **extra) -> PulsarGroups:
    return PulsarGroups({"service.url": broker.service_url, "peek.timeout.ms": 500, "groups": "ignored", **extra})


def test_pulsar_positions_are_the_first_unacknowledged_message(pulsar_pair, unique):
    src, _ = pulsar_pair
    topic = f"persistent://public/default/pos-{unique}"
    client = pulsar.Client(src.service_url, logger=QUIET, operation_timeout_seconds=10)
    groups = _pulsar_groups(src)
    try:
        ids = _send(client, topic, 10)
        _consume(client, topic, "g", 10, 3)
        sp = {"topic": topic, "partition": -1}
        assert groups.positions("g", [topic]) == {partition_key(sp): (sp, ids[4])}
        assert groups.positions("g", [topic.rsplit("/", 1)[1]]) == {partition_key(sp): (sp, ids[4])}  # short name
        assert _first(client, topic, "g") == b"m4"  # peeking acknowledged nothing
        position = groups.positions("g", [topic])[partition_key(sp)][1]
        keys = [groups.order_key(_offset(mid)) for mid in ids]
        assert [k < position for k in keys] == [True] * 4 + [False] * 6

        _consume(client, topic, "g", 6, 5)  # everything acknowledged: just after the last message
        [(_, end)] = groups.positions("g", [topic]).values()
        assert all(k < end for k in keys)
        assert end <= (ids[-1][0], ids[-1][1] + 1, -1)
    finally:
        groups.close()
        client.close()


def test_pulsar_busy_subscription_is_neither_read_nor_moved(pulsar_pair, unique):
    src, _ = pulsar_pair
    topic = f"persistent://public/default/busy-{unique}"
    client = pulsar.Client(src.service_url, logger=QUIET, operation_timeout_seconds=10)
    groups = _pulsar_groups(src, **{"operation.timeout.ms": 1000})
    try:
        ids = _send(client, topic, 3)
        consumer = client.subscribe(topic, "g", initial_position=pulsar.InitialPosition.Earliest)
        try:
            assert groups.positions("g", [topic]) is None
            assert groups.apply("g", {(topic, -1): (ids[2], True)}) == []
        finally:
            consumer.close()
        assert _first(client, topic, "g") == b"m0"
    finally:
        groups.close()
        client.close()


def test_pulsar_apply_moves_forward_only(pulsar_pair, unique):
    src, _ = pulsar_pair
    topic = f"persistent://public/default/apply-{unique}"
    client = pulsar.Client(src.service_url, logger=QUIET, operation_timeout_seconds=10)
    groups = _pulsar_groups(src)
    try:
        ids = _send(client, topic, 10)
        # new subscriptions: inclusive starts at the message, exclusive after it
        assert groups.apply("inc", {(topic, -1): (ids[5], True)}) == [(topic, -1)]
        assert groups.apply("exc", {(topic, -1): (ids[5], False)}) == [(topic, -1)]
        assert _first(client, topic, "inc") == b"m5"
        assert _first(client, topic, "exc") == b"m6"
        sp = {"topic": topic, "partition": -1}
        assert groups.positions("exc", [topic]) == {partition_key(sp): (sp, ids[6])}

        # never backwards (nor to where it is); forwards again
        assert groups.apply("inc", {(topic, -1): (ids[2], True)}) == []
        assert groups.apply("exc", {(topic, -1): (ids[5], False)}) == []
        assert _first(client, topic, "inc") == b"m5"
        assert _first(client, topic, "exc") == b"m6"
        assert groups.apply("inc", {(topic, -1): (ids[8], False)}) == [(topic, -1)]
        assert _first(client, topic, "inc") == b"m9"

        # at the end: nothing to move to
        assert groups.apply("inc", {(topic, -1): (ids[9], False)}) == [(topic, -1)]
        assert groups.apply("inc", {(topic, -1): (ids[9], True)}) == []
        assert _first(client, topic, "inc") is None
    finally:
        groups.close()
        client.close()


def test_pulsar_batched_messages_are_never_skipped(pulsar_pair, unique):
    src, _ = pulsar_pair
    topic = f"persistent://public/default/batch-{unique}"
    client = pulsar.Client(src.service_url, logger=QUIET, operation_timeout_seconds=10)
    groups = _pulsar_groups(src)
    try:
        first = _send(client, topic, 1)[0]  # an unbatched message before the batch
        producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=50)
        ids: list = []
        for i in range(5):
            producer.send_async(f"b{i}".encode(), lambda _res, mid: ids.append(mid))
        producer.flush()
        producer.close()
        ids = sorted((m.ledger_id(), m.entry_id(), m.batch_index()) for m in ids)
        assert len({mid[:2] for mid in ids}) == 1 and ids[0][2] == 0 and ids[0] > first  # one batch, after m0

        # just after a message inside a batch: the start of its entry (the batch again), never past it
        assert groups.apply("g", {(topic, -1): (ids[2], False)}) == [(topic, -1)]
        assert _first(client, topic, "g") == b"b0"

        # a subscription that acknowledged the whole batch is after every message of it
        _consume(client, topic, "g", 5, 4)
        [(_, end)] = groups.positions("g", [topic]).values()
        assert all(groups.order_key(_offset(mid)) < end for mid in ids)
    finally:
        groups.close()
        client.close()


def test_pulsar_each_partition_of_a_partitioned_topic_is_read_and_moved(pulsar_pair, unique):
    src, _ = pulsar_pair
    topic = f"persistent://public/default/parts-{unique}"
    src.create_partitioned_topics({topic: 2})
    client = pulsar.Client(src.service_url, logger=QUIET, operation_timeout_seconds=10)
    groups = _pulsar_groups(src)
    try:
        ids = {p: _send(client, f"{topic}-partition-{p}", 4) for p in (0, 1)}
        _consume(client, f"{topic}-partition-0", "g", 4, 1)
        _consume(client, f"{topic}-partition-1", "g", 4, 2)
        sps = {p: {"topic": topic, "partition": p} for p in (0, 1)}
        assert groups.positions("g", [topic]) == {partition_key(sps[0]): (sps[0], ids[0][2]),
                                                  partition_key(sps[1]): (sps[1], ids[1][3])}
        assert groups.apply("g", {(topic, 0): (ids[0][3], True), (topic, 1): (ids[1][0], True)}) == [(topic, 0)]
        assert _first(client, f"{topic}-partition-0", "g") == b"m3"
        assert _first(client, f"{topic}-partition-1", "g") == b"m3"
    finally:
        groups.close()
        client.close()


def _done(value) -> dict:
    future = concurrent.futures.Future()
    future.set_result(value)
    return {"request": future}


class _Admin:
    """An admin client whose OffsetFetch answers partition 0 with an error, partition 1 with offset 7."""

    def __init__(self):
        self.altered = []

    def describe_consumer_groups(self, groups, **kw):
        return _done(SimpleNamespace(state=ConsumerGroupState.EMPTY))

    def list_consumer_group_offsets(self, requests, **kw):
        return _done(SimpleNamespace(topic_partitions=[
            SimpleNamespace(topic="orders", partition=0, offset=-1, error=KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS)),
            SimpleNamespace(topic="orders", partition=1, offset=7, error=None)]))

    def list_offsets(self, request, **kw):
        return {tp: concurrent.futures.Future() for tp in request}  # never answered: must not be asked

    def alter_consumer_group_offsets(self, requests, **kw):
        self.altered.append(requests)
        return _done(None)


def test_kafka_apply_never_parks_or_moves_a_partition_whose_committed_offset_was_not_read():
    """A partition OffsetFetch answered with an error is not a partition without a committed
    offset: parking it would overwrite that offset with the earliest one."""
    groups = KafkaGroups.__new__(KafkaGroups)
    groups._admin, groups._timeout = _Admin(), 1.0
    with pytest.raises(RetriableError, match=r"orders\[0\]"):
        groups.apply("g", {("orders", 0): (None, True)})
    with pytest.raises(RetriableError):
        groups.apply("g", {("orders", 0): (3, False), ("orders", 1): (9, False)})
    assert groups._admin.altered == []
    assert groups.apply("g", {("orders", 1): (9, False)}) == [("orders", 1)]  # a partition read is moved
    assert groups.positions("g", ["orders"]) == {partition_key({"topic": "orders", "partition": 1}): (
        {"topic": "orders", "partition": 1}, 7)}
