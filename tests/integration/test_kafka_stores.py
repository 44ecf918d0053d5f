"""worker.stores.kafkastore.KafkaStores against a real Apache Kafka broker, and one contract for both stores.

The contract tests run the same checks against :class:`worker.stores.store.SqliteStores` and
:class:`worker.stores.kafkastore.KafkaStores`; "reopening" is a worker restart (a new store on the same
data directory / the same topics). The Kafka-only tests check the documented topic layout by
reading the topics with a plain consumer, the refusal of non-compacted topics, concurrent writers,
a broker that stops acknowledging, and the fencing of a store whose topics another one opened.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor

import orjson
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType
from kafka_brokers import kafka_broker
from netproxy import TcpProxy

from connect.errors import ConnectError, RetriableError
from worker.embedded import free_port
from worker.stores.kafkastore import KafkaStores, StoreFencedError
from worker.stores.store import SqliteStores, StoredConnector, StoredStatus

OFFSET_PARTITIONS = 3


def topic_names(unique: str) -> dict[str, str]:
    return {"config_topic": f"{unique}.configs", "offset_topic": f"{unique}.offsets", "status_topic": f"{unique}.status"}


def open_kafka(bootstrap: str, unique: str, **kwargs) -> KafkaStores:
    kwargs = {"offset_partitions": OFFSET_PARTITIONS, "timeout_s": 15.0, **topic_names(unique), **kwargs}
    return KafkaStores(bootstrap, **kwargs)


def _open_when_ready(bootstrap: str, unique: str, **kwargs) -> KafkaStores:
    """Open with a short ``timeout_s`` on a broker just started: its transaction coordinator may
    still be loading (COORDINATOR_LOAD_IN_PROGRESS, a RetriableError), which is not what is tested."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return open_kafka(bootstrap, unique, **kwargs)
        except RetriableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def raw_records(bootstrap: str, topic: str, partitions: int) -> list[tuple[int, object, object]]:
    """(partition, key, value) of every record, read to the end of each partition; keys of the
    offset topic and all values JSON-decoded (None: a tombstone)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "raw-reader", "enable.auto.commit": False,
                         "enable.partition.eof": True, "fetch.wait.max.ms": 50})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out, pending, deadline = [], set(range(partitions)), time.monotonic() + 15
    try:
        while pending and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.1):
                if msg.error() is not None:
                    assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                    pending.discard(msg.partition())
                    continue
                key = msg.key().decode()
                key = orjson.loads(key) if key.startswith("[") else key
                out.append((msg.partition(), key, None if msg.value() is None else orjson.loads(msg.value())))
    finally:
        consumer.close()
    assert not pending, f"{topic}: partitions {pending} not read to the end"
    return out


def reported_policy(bootstrap: str, topic: str) -> str | None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 15
    while True:  # a topic just created is unknown to Apache Kafka's broker for a moment
        (future,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
        try:
            entry = future.result(timeout=15).get("cleanup.policy")
            return None if entry is None else entry.value
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def create_topic(bootstrap: str, topic: str, partitions: int, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1, config=config or {})]).values():
        future.result(timeout=15)


@pytest.fixture
def bootstrap(kafka_pair) -> str:
    return kafka_pair[0].bootstrap


# -- one contract, both implementations ------------------------------------------------------

@pytest.fixture(params=["sqlite", "kafka"])
def reopen(request, tmp_path, unique):
    """Opens the stores of one backing (a data directory / three topics); each call closes the
    previous instance first, as a worker restart does."""
    opened = []

    def open_stores():
        if opened:
            opened[-1].close()
        if request.param == "sqlite":
            stores = SqliteStores(tmp_path / "data")
        else:
            stores = open_kafka(request.getfixturevalue("kafka_pair")[0].bootstrap, unique)
        opened.append(stores)
        return stores

    yield open_stores
    for stores in opened:
        stores.close()


def test_offsets_contract(reopen):
    stores = reopen()
    offsets = stores.offsets
    assert offsets.load("c1") == {}
    offsets.commit("c1", {"p0": {"offset": 5, "nested": {"ts": [1, 2]}}, "p1": {"offset": 7}})
    offsets.commit("c2", {"p0": {"offset": 100}})
    offsets.commit("c1", {})  # nothing to store
    assert offsets.load("c1") == {"p0": {"offset": 5, "nested": {"ts": [1, 2]}}, "p1": {"offset": 7}}

    loaded = offsets.load("c1")
    loaded["p1"]["offset"] = -1  # callers get copies
    assert offsets.load("c1")["p1"] == {"offset": 7}

    # None removes a partition (it starts afresh), in the same commit as updates; unknown ones are no-ops
    offsets.commit("c1", {"p0": None, "p1": {"offset": 8}, "p2": {"offset": 1}, "never-stored": None})
    assert offsets.load("c1") == {"p1": {"offset": 8}, "p2": {"offset": 1}}

    stores = reopen()
    offsets = stores.offsets
    assert offsets.load("c1") == {"p1": {"offset": 8}, "p2": {"offset": 1}}
    assert offsets.load("c2") == {"p0": {"offset": 100}}

    offsets.reset("c1")
    offsets.reset("never-committed")
    assert offsets.load("c1") == {}
    assert offsets.load("c2") == {"p0": {"offset": 100}}

    stores = reopen()
    assert stores.offsets.load("c1") == {}
    assert stores.offsets.load("c2") == {"p0": {"offset": 100}}
    stores.offsets.commit("c1", {"p9": {"offset": 1}})  # a reset connector commits afresh
    assert reopen().offsets.load("c1") == {"p9": {"offset": 1}}


def test_configs_contract(reopen):
    configs = reopen().configs
    assert configs.connectors() == {}
    configs.put("b-conn", {"connector.class": "memory-source", "tasks.max": "1"})
    configs.put("a-conn", {"connector.class": "memory-sink"}, target_state="PAUSED")
    assert list(configs.connectors()) == ["a-conn", "b-conn"]
    assert configs.connectors()["b-conn"] == StoredConnector("b-conn", {"connector.class": "memory-source",
                                                                         "tasks.max": "1"}, "RUNNING")

    # a config update keeps the target state unless one is given
    configs.put("a-conn", {"connector.class": "memory-sink", "topics": "t"})
    assert configs.connectors()["a-conn"] == StoredConnector("a-conn", {"connector.class": "memory-sink", "topics": "t"},
                                                             "PAUSED")
    configs.put_target_state("b-conn", "STOPPED")
    configs.put_target_state("missing", "PAUSED")  # no such connector: nothing is created
    assert "missing" not in configs.connectors()
    configs.connectors()["b-conn"].config["tasks.max"] = "9"  # callers get copies
    assert configs.connectors()["b-conn"].config["tasks.max"] == "1"

    configs = reopen().configs
    assert configs.connectors() == {
        "a-conn": StoredConnector("a-conn", {"connector.class": "memory-sink", "topics": "t"}, "PAUSED"),
        "b-conn": StoredConnector("b-conn", {"connector.class": "memory-source", "tasks.max": "1"}, "STOPPED")}
    configs.put("b-conn", {"connector.class": "memory-source", "tasks.max": "2"}, target_state="RUNNING")
    configs.put_target_state("a-conn", "STOPPED")  # after a restart too, a config update keeps it
    configs.put("a-conn", {"connector.class": "memory-sink", "topics": "u"})
    configs.delete("b-conn")
    configs.delete("never-existed")
    assert configs.connectors() == {
        "a-conn": StoredConnector("a-conn", {"connector.class": "memory-sink", "topics": "u"}, "STOPPED")}

    configs = reopen().configs
    assert configs.connectors() == {
        "a-conn": StoredConnector("a-conn", {"connector.class": "memory-sink", "topics": "u"}, "STOPPED")}
    configs.put("b-conn", {"connector.class": "memory-source"})  # re-created: its old state is gone
    assert configs.connectors()["b-conn"].target_state == "RUNNING"
    assert reopen().configs.connectors()["b-conn"] == StoredConnector("b-conn", {"connector.class": "memory-source"})


def test_statuses_contract(reopen):
    statuses = reopen().statuses
    assert statuses.statuses("c") == []
    # "c" task 1 and "c-1" task 0: key prefixes that look alike must not mix
    statuses.put(StoredStatus("c", 1, "RUNNING", "w1"))
    statuses.put(StoredStatus("c", None, "RUNNING", "w1"))
    statuses.put(StoredStatus("c", 0, "RUNNING", "w1"))
    statuses.put(StoredStatus("c-1", 0, "PAUSED", "w2"))
    statuses.put(StoredStatus("c", 0, "FAILED", "w2", trace="Traceback ...\nValueError: boom"))
    expected_c = [StoredStatus("c", None, "RUNNING", "w1"),
                  StoredStatus("c", 0, "FAILED", "w2", "Traceback ...\nValueError: boom"),
                  StoredStatus("c", 1, "RUNNING", "w1")]
    assert statuses.statuses("c") == expected_c
    assert statuses.statuses("c-1") == [StoredStatus("c-1", 0, "PAUSED", "w2")]

    statuses = reopen().statuses
    assert statuses.statuses("c") == expected_c
    assert statuses.statuses("c-1") == [StoredStatus("c-1", 0, "PAUSED", "w2")]
    statuses.delete("c")
    statuses.delete("unknown")
    assert statuses.statuses("c") == []

    statuses = reopen().statuses
    assert statuses.statuses("c") == []
    assert statuses.statuses("c-1") == [StoredStatus("c-1", 0, "PAUSED", "w2")]


# -- Kafka only --------------------------------------------------------------------------------

def test_topics_are_created_compacted_and_records_follow_the_documented_layout(bootstrap, unique):
    names = topic_names(unique)
    stores = open_kafka(bootstrap, unique)
    try:
        metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=15)
        assert {t: len(metadata.topics[t].partitions) for t in names.values()} == {
            names["config_topic"]: 1, names["offset_topic"]: OFFSET_PARTITIONS, names["status_topic"]: 1}
        for topic in names.values():
            assert reported_policy(bootstrap, topic) == "compact"

        stores.configs.put("conn", {"k": "v"}, target_state="PAUSED")
        stores.configs.put("gone", {"k": "w"})
        stores.configs.delete("gone")
        stores.offsets.commit("conn", {"p0": {"o": 1}, "p1": {"o": 2}})
        stores.offsets.commit("conn", {"p0": None})
        stores.offsets.commit("other", {"p0": {"o": 3}})
        stores.offsets.reset("other")
        stores.statuses.put(StoredStatus("conn", None, "RUNNING", "w1"))
        stores.statuses.put(StoredStatus("conn", 2, "FAILED", "w1", "trace"))
        stores.statuses.delete("conn")
    finally:
        stores.close()

    assert raw_records(bootstrap, names["config_topic"], 1) == [
        (0, "connector-conn", {"config": {"k": "v"}}), (0, "target-state-conn", {"state": "PAUSED"}),
        (0, "connector-gone", {"config": {"k": "w"}}), (0, "target-state-gone", {"state": "RUNNING"}),
        (0, "connector-gone", None), (0, "target-state-gone", None)]

    offsets = raw_records(bootstrap, names["offset_topic"], OFFSET_PARTITIONS)
    conn_part, other_part = (zlib.crc32(c.encode()) % OFFSET_PARTITIONS for c in ("conn", "other"))
    assert [r for r in offsets if r[1][0] == "conn"] == [
        (conn_part, ["conn", "p0"], {"o": 1}), (conn_part, ["conn", "p1"], {"o": 2}), (conn_part, ["conn", "p0"], None)]
    assert [r for r in offsets if r[1][0] == "other"] == [
        (other_part, ["other", "p0"], {"o": 3}), (other_part, ["other", "p0"], None)]

    assert raw_records(bootstrap, names["status_topic"], 1) == [
        (0, "status-connector-conn", {"state": "RUNNING", "worker_id": "w1", "trace": None}),
        (0, "status-task-conn-2", {"state": "FAILED", "worker_id": "w1", "trace": "trace"}),
        (0, "status-connector-conn", None), (0, "status-task-conn-2", None)]


def test_a_second_store_sees_every_write_of_a_running_one_including_the_last_batch(bootstrap, unique):
    """Writes are durable when they return: a new store (the first one neither closed nor flushed,
    as after a crash) rebuilds the same state. The last write is one multi-record batch: tansu
    under-reports its high watermark as the batch's first offset + 1, so reading only up to the
    watermark would lose all but the first record."""
    first = open_kafka(bootstrap, unique)
    try:
        first.configs.put("conn", {"k": "v"})
        first.configs.put_target_state("conn", "PAUSED")
        first.statuses.put(StoredStatus("conn", 0, "RUNNING", "w1"))
        first.offsets.commit("conn", {f"p{i}": {"o": i} for i in range(50)})
        first.offsets.commit("conn", {f"p{i}": {"o": 1000 + i} for i in range(0, 50, 2)} | {"p1": None})
        second = open_kafka(bootstrap, unique)
        try:
            expected = {f"p{i}": {"o": 1000 + i if i % 2 == 0 else i} for i in range(50) if i != 1}
            assert first.offsets.load("conn") == expected
            assert second.offsets.load("conn") == expected
            assert second.configs.connectors() == {"conn": StoredConnector("conn", {"k": "v"}, "PAUSED")}
            assert second.statuses.statuses("conn") == [StoredStatus("conn", 0, "RUNNING", "w1")]
        finally:
            second.close()
    finally:
        first.close()


def test_concurrent_commits_are_each_visible_whole_and_all_kept(bootstrap, unique):
    stores = open_kafka(bootstrap, unique)
    rounds, torn, failures = 60, [], []

    def committer(me: str):
        try:
            for i in range(rounds):
                # own connector, and a shared one (disjoint partition keys)
                stores.offsets.commit(me, {"a": {"n": i}, "b": {"n": i}})
                stores.offsets.commit("shared", {f"{me}-a": {"n": i}, f"{me}-b": {"n": i}})
        except Exception as exc:  # reported below
            failures.append(exc)

    def reader(stop: threading.Event):
        while not stop.is_set():
            for name in ("t1", "t2"):
                seen = stores.offsets.load(name)
                if seen and seen["a"] != seen["b"]:
                    torn.append(seen)
            shared = stores.offsets.load("shared")
            for me in ("t1", "t2"):
                if f"{me}-a" in shared and shared[f"{me}-a"] != shared[f"{me}-b"]:
                    torn.append(shared)

    stop = threading.Event()
    threads = [threading.Thread(target=committer, args=(name,)) for name in ("t1", "t2")]
    watcher = threading.Thread(target=reader, args=(stop,))
    try:
        watcher.start()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        stop.set()
        watcher.join(10)
        assert not failures, failures
        assert not torn, f"a commit was seen half applied: {torn[:3]}"
        last = {"n": rounds - 1}
        expected = {"t1": {"a": last, "b": last}, "t2": {"a": last, "b": last},
                    "shared": {"t1-a": last, "t1-b": last, "t2-a": last, "t2-b": last}}
        assert {name: stores.offsets.load(name) for name in expected} == expected
    finally:
        stop.set()
        stores.close()
    restarted = open_kafka(bootstrap, unique)
    try:
        assert {name: restarted.offsets.load(name) for name in expected} == expected
    finally:
        restarted.close()


@pytest.mark.parametrize("role, policy", [("config_topic", "delete"), ("offset_topic", "compact,delete"),
                                          ("status_topic", "delete")])
def test_an_existing_topic_that_is_not_compacted_is_refused(bootstrap, unique, role, policy):
    topic = topic_names(unique)[role]
    create_topic(bootstrap, topic, 1, {"cleanup.policy": policy})
    if reported_policy(bootstrap, topic) is None:
        pytest.skip("the broker does not report topic configs (describe_configs has no cleanup.policy): "
                    "a non-compacted topic cannot be detected on it")
    with pytest.raises(ConnectError, match=rf"{topic}.*cleanup\.policy={policy}.*cleanup\.policy=compact"):
        open_kafka(bootstrap, unique)


def test_an_existing_compacted_topic_is_used_and_one_without_a_reported_policy_is_accepted(bootstrap, unique, caplog):
    names = topic_names(unique)
    create_topic(bootstrap, names["offset_topic"], 2, {"cleanup.policy": "compact"})
    create_topic(bootstrap, names["status_topic"], 1)  # tansu reports no configs for it: not checkable
    if reported_policy(bootstrap, names["status_topic"]) is not None:  # Apache Kafka reports its default, delete
        with pytest.raises(ConnectError, match=rf"{re.escape(names['status_topic'])}.* has cleanup.policy=delete"):
            open_kafka(bootstrap, unique)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        compact = ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)
        for future in admin.incremental_alter_configs([ConfigResource(
                ResourceType.TOPIC, names["status_topic"], incremental_configs=[compact])]).values():
            future.result(15)
    with caplog.at_level(logging.WARNING, logger="worker.stores.kafkastore"):
        stores = open_kafka(bootstrap, unique)
    try:
        stores.offsets.commit("conn", {"p": {"o": 1}})
        assert stores.offsets.load("conn") == {"p": {"o": 1}}
    finally:
        stores.close()
    if reported_policy(bootstrap, names["status_topic"]) is None:
        assert any(names["status_topic"] in r.getMessage() and "cannot verify" in r.getMessage() for r in caplog.records)
    # the existing offset topic's 2 partitions are used, not offset_partitions
    (record,) = raw_records(bootstrap, names["offset_topic"], 2)
    assert record[0] == zlib.crc32(b"conn") % 2


def test_a_config_topic_with_several_partitions_is_refused(bootstrap, unique):
    topic = topic_names(unique)["config_topic"]
    create_topic(bootstrap, topic, 2, {"cleanup.policy": "compact"})
    with pytest.raises(ConnectError, match=rf"{topic}.*single partition.*has 2"):
        open_kafka(bootstrap, unique)


def test_the_same_topic_for_two_stores_is_refused(bootstrap, unique):
    with pytest.raises(ConnectError, match="three different topics"):
        KafkaStores(bootstrap, config_topic=f"{unique}.x", offset_topic=f"{unique}.x")


def test_client_config_reaches_the_clients(bootstrap, unique):
    with pytest.raises(ConnectError, match="security.protocol"):
        open_kafka(bootstrap, unique, client_config={"security.protocol": "no-such-protocol"})
    stores = open_kafka(bootstrap, unique, client_config={"client.id": "store-test", "socket.keepalive.enable": "true"})
    try:
        stores.configs.put("conn", {"k": "v"})
        assert list(stores.configs.connectors()) == ["conn"]
    finally:
        stores.close()


def test_a_store_opened_on_the_same_topics_fences_the_first_one(bootstrap, unique):
    """Two workers on one set of topics cannot both write: the last one to open them owns them. The
    first one's next write raises StoreFencedError naming the topics and its transactional ids, and
    so does every write after it, on every topic; nothing it tried reaches the topics, and closing it
    does not disturb the new owner."""
    names = topic_names(unique)
    first, second = open_kafka(bootstrap, unique), None
    try:
        first.configs.put("conn", {"k": "v"})
        first.offsets.commit("conn", {"p": {"o": 1}})
        first.statuses.put(StoredStatus("conn", None, "RUNNING", "w1"))
        assert first.fenced is None

        second = open_kafka(bootstrap, unique)
        assert second.offsets.load("conn") == {"p": {"o": 1}}  # it read all the first one wrote
        fenced = (rf"another worker took over store topics {re.escape(', '.join(names.values()))}: .*"
                  rf"connect-bridge-store-{re.escape(names['offset_topic'])}.*This worker must stop")
        with pytest.raises(StoreFencedError, match=fenced):
            first.offsets.commit("conn", {"p": {"o": 99}})
        for refused in (lambda: first.configs.put_target_state("conn", "PAUSED"),
                        lambda: first.statuses.put(StoredStatus("conn", None, "FAILED", "w1")),
                        lambda: first.offsets.commit("conn", {"p": {"o": 100}})):
            with pytest.raises(StoreFencedError, match=fenced):
                refused()
        assert re.search(fenced, first.fenced) and second.fenced is None
        assert first.offsets.load("conn") == {"p": {"o": 1}}  # nothing refused is shown here either
        assert first.configs.connectors()["conn"].target_state == "RUNNING"

        second.offsets.commit("conn", {"p": {"o": 2}})
        second.configs.put_target_state("conn", "STOPPED")
        first.close()  # a fenced store's close must not end the new owner's transactions
        second.statuses.put(StoredStatus("conn", None, "STOPPED", "w2"))
        second.offsets.commit("conn", {"p": {"o": 3}})
    finally:
        first.close()
        if second is not None:
            second.close()

    # a plain reader: the first store's writes up to the takeover, then only the second one's
    assert [(key, value) for _, key, value in raw_records(bootstrap, names["offset_topic"], OFFSET_PARTITIONS)] == [
        (["conn", "p"], {"o": 1}), (["conn", "p"], {"o": 2}), (["conn", "p"], {"o": 3})]
    assert raw_records(bootstrap, names["config_topic"], 1) == [
        (0, "connector-conn", {"config": {"k": "v"}}), (0, "target-state-conn", {"state": "RUNNING"}),
        (0, "target-state-conn", {"state": "STOPPED"})]
    assert raw_records(bootstrap, names["status_topic"], 1) == [
        (0, "status-connector-conn", {"state": "RUNNING", "worker_id": "w1", "trace": None}),
        (0, "status-connector-conn", {"state": "STOPPED", "worker_id": "w2", "trace": None})]
    restarted = open_kafka(bootstrap, unique)
    try:
        assert restarted.offsets.load("conn") == {"p": {"o": 3}}
        assert restarted.configs.connectors() == {"conn": StoredConnector("conn", {"k": "v"}, "STOPPED")}
        assert restarted.statuses.statuses("conn") == [StoredStatus("conn", None, "STOPPED", "w2")]
    finally:
        restarted.close()


def test_a_store_sharing_only_the_offset_topic_fences_the_other_one_too(bootstrap, unique):
    """Each topic has its own transactional id (its prefix set here as the worker setting
    ``store.kafka.client.transactional.id`` sets it): two workers that share one topic - say both
    kept the default offset topic - cannot both write it, and the fenced one stops writing at all."""
    mine = topic_names(unique)
    theirs = {**topic_names(f"{unique}-other"), "offset_topic": mine["offset_topic"]}
    prefix = {"transactional.id": f"tx-{unique}"}
    first = open_kafka(bootstrap, unique, client_config=prefix)
    second = None
    try:
        first.offsets.commit("conn", {"p": {"o": 1}})
        second = open_kafka(bootstrap, unique, client_config=prefix, **theirs)
        fenced = rf"store topics .*{re.escape(mine['offset_topic'])}.*tx-{re.escape(unique)}-{re.escape(mine['offset_topic'])}"
        with pytest.raises(StoreFencedError, match=fenced):
            first.offsets.commit("conn", {"p": {"o": 2}})
        with pytest.raises(StoreFencedError, match=fenced):
            first.configs.put("conn", {"k": "v"})  # its own config topic: still no write
        second.offsets.commit("conn", {"p": {"o": 3}})
        second.configs.put("conn", {"k": "w"})
    finally:
        first.close()
        if second is not None:
            second.close()
    assert [value for _, _, value in raw_records(bootstrap, mine["offset_topic"], OFFSET_PARTITIONS)] == [
        {"o": 1}, {"o": 3}]
    assert raw_records(bootstrap, mine["config_topic"], 1) == []


def test_unacknowledged_writes_raise_change_nothing_here_and_land_whole_before_the_next_write(tmp_path, unique):
    """A network partition (tests/netproxy.py holds the bytes, as TCP would) makes writes time out:
    they raise naming the topic, and this store's state stays as it was. Each write is a transaction
    whose commit goes on after the call gave up; no later write to that topic begins before it has
    ended, and once the partition heals it is committed, whole: a plain reader and a restarted store
    see both writes that raised, complete (this store never saw them succeed, so its memory does not
    have them). ``reset`` removes their offsets too. A store closed during a partition does not hang."""
    broker_port = free_port()
    proxy = TcpProxy(broker_port)
    broker = kafka_broker(port=broker_port, advertised_port=proxy.port, log_path=tmp_path / "kafka.log").start()
    names, stores = topic_names(unique), None
    try:
        stores = _open_when_ready(broker.bootstrap, unique, timeout_s=1.5)
        stores.offsets.commit("conn", {"p": {"o": 1}})
        stores.configs.put("conn", {"k": "v"})

        proxy.blackhole()
        with ThreadPoolExecutor(2) as pool:  # both time out together
            commit = pool.submit(stores.offsets.commit, "conn", {"p": {"o": 2}, "new": {"o": 1}})
            pause = pool.submit(stores.configs.put_target_state, "conn", "PAUSED")
            with pytest.raises(RetriableError, match=rf"store topic '{names['offset_topic']}' partition \d+: a write "
                                                     r"of 2 record\(s\) failed.*committed or aborted, whole, before"):
                commit.result()
            with pytest.raises(RetriableError, match=rf"store topic '{names['config_topic']}'"):
                pause.result()
        assert stores.offsets.load("conn") == {"p": {"o": 1}}  # nothing of that commit: neither half nor all
        assert stores.configs.connectors()["conn"].target_state == "RUNNING"
        # the topic's next write waits for that transaction to end first, and gives up too
        with pytest.raises(RetriableError, match=rf"store topic '{names['offset_topic']}': the transaction of an "
                                                 "earlier failed write is still open"):
            stores.offsets.commit("conn", {"p": {"o": 9}})
        proxy.restore()

        stores.offsets.commit("conn", {"p": {"o": 3}})  # writes work again, after the held commit ended
        stores.configs.put("other", {"k": "w"})
        assert stores.offsets.load("conn") == {"p": {"o": 3}}
        assert stores.configs.connectors()["conn"].target_state == "RUNNING"
        stores.offsets.reset("conn")
        assert stores.offsets.load("conn") == {}
        started = time.monotonic()
        stores.close()
        assert time.monotonic() - started < 2
        with pytest.raises(ConnectError, match="closed"):
            stores.offsets.commit("conn", {"p": {"o": 4}})

        # the held transactions landed whole, before the next writes; the write tried during the
        # partition never began; the reset tombstoned "new" too
        part = zlib.crc32(b"conn") % OFFSET_PARTITIONS
        assert raw_records(broker.bootstrap, names["offset_topic"], OFFSET_PARTITIONS) == [
            (part, ["conn", "p"], {"o": 1}), (part, ["conn", "p"], {"o": 2}), (part, ["conn", "new"], {"o": 1}),
            (part, ["conn", "p"], {"o": 3}), (part, ["conn", "new"], None), (part, ["conn", "p"], None)]
        restarted = open_kafka(broker.bootstrap, unique)
        try:
            assert restarted.offsets.load("conn") == {}
            assert restarted.configs.connectors() == {"conn": StoredConnector("conn", {"k": "v"}, "PAUSED"),
                                                      "other": StoredConnector("other", {"k": "w"})}
        finally:
            restarted.close()

        stores = open_kafka(broker.bootstrap, unique, timeout_s=1.5)
        proxy.blackhole()
        with pytest.raises(RetriableError):
            stores.offsets.commit("conn", {"p": {"o": 5}})
        started = time.monotonic()
        stores.close()  # a producer's own close would wait for the held transaction without a bound
        assert time.monotonic() - started < 5
    finally:
        proxy.restore()
        if stores is not None:
            stores.close()
        proxy.close()
        broker.proc.kill()  # this test's own broker; tansu lingers 5 s on SIGTERM
        broker.proc.wait()
