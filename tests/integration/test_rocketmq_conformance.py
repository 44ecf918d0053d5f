"""The project's RocketMQ remoting client against Apache RocketMQ 5.x, and the embedded broker held
to the same answers: every request the client makes (the connectors', the metadata and checkpoint
connectors' included) is sent in the same sequence to both brokers, and what comes back is compared
(a differential test), after taking out what legitimately differs between two brokers:

- addresses (the Apache broker's port is not its name server's), store and born hosts, store
  timestamps, commit log offsets and the offset message ids made of them;
- the properties Apache's broker adds to every stored message (``MSG_REGION``, ``CLUSTER``,
  ``TRACE_ON``: system properties the source does not copy);
- error remarks (the codes are compared);
- what the embedded broker does not keep: Apache's own subscription groups (``CID_ONSAPI_*``,
  ``TOOLS_CONSUMER``...: system groups the connectors skip), the defaults Apache adds to a
  subscription group's config (``groupRetryPolicy``, ``attributes``...), pull offsets in consume stats.

ACL: 5.3 dropped 4.x's plain ACL; its authentication (ACL 2.0) checks the same signature
(``AclClientRPCHook``'s, the client's ``AclSigner``), so signed requests pass and wrong secrets,
unknown users and unsigned requests are NO_PERMISSION on both brokers. Apache's name server checks
nothing, the embedded one (the same process as its broker) refuses unsigned route lookups too.

Other differences, documented and not held against the embedded broker: Apache answers a pull with
at most 32 messages (``maxTransferCountOnMessageInMemory``), the embedded broker with up to the
``maxMsgNums`` asked (4 MiB at most); GET_MIN/MAX_OFFSET and
SEARCH_OFFSET_BY_TIMESTAMP of a topic that does not exist answer 0 on Apache and TOPIC_NOT_EXIST on
the embedded broker; Apache 5.3.3 stores a message sent to a topic without write permission (only
clients honour ``perm``, through the route) where the embedded broker answers NO_PERMISSION; Apache
creates a subscription group of any name, the embedded broker only of RocketMQ's legal characters.
"""

from __future__ import annotations

import time

import pytest

from connect.errors import ConnectError, RetriableError
from connectors.rocketmq.models import PERM_INHERIT, PERM_READ, PERM_WRITE, ConsumerData, TopicConfig
from connectors.rocketmq.protocol import ResponseCode
from connectors.rocketmq.remoting import AclSigner, BrokerError
from connectors.rocketmq.sync_client import SyncRocketMQClient
from worker.embedded import EmbeddedRocketMQ

pytestmark = pytest.mark.timeout(900)

KINDS = ("apache", "embedded")
ADDED_BY_APACHE = frozenset({"MSG_REGION", "CLUSTER", "TRACE_ON"})
SUBSCRIPTION_GROUP_NOT_EXIST = 26


@pytest.fixture(scope="module")
def embedded_rocketmq(tmp_path_factory):
    root = tmp_path_factory.mktemp("conformance-embedded")
    broker = EmbeddedRocketMQ(root / "data", log_path=root / "broker.log").start()
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def brokers(apache_rocketmq_pair, embedded_rocketmq) -> dict:
    return {"apache": apache_rocketmq_pair[0], "embedded": embedded_rocketmq}


@pytest.fixture(params=KINDS)
def broker(request, brokers):
    return brokers[request.param]


def _name(prefix: str, unique: str) -> str:
    """A topic or group name of RocketMQ's legal characters, unique per test and process."""
    return prefix + "".join(c if c.isalnum() else "_" for c in unique)[-60:]


def _outcome(call):
    """What a call answered: its result, or the error's kind and broker code (remarks differ)."""
    try:
        return call()
    except BrokerError as exc:
        return ("refused", type(exc).__name__, exc.code, isinstance(exc, RetriableError))
    except ConnectError as exc:
        return ("client error", type(exc).__name__, isinstance(exc, RetriableError))


def _message(m) -> tuple:
    props = {k: v for k, v in m.properties.items() if k not in ADDED_BY_APACHE}
    return (m.topic, m.queue_id, m.queue_offset, m.body, m.flag, m.born_timestamp, m.reconsume_times, props)


def _pull(result) -> tuple:
    return (result.status, result.next_begin_offset, result.min_offset, result.max_offset,
            [_message(m) for m in result.messages])


def _both(brokers: dict, scenario, *args) -> dict:
    return {kind: scenario(b, *args) for kind, b in brokers.items()}


def _same(observed: dict) -> dict:
    """The observation both brokers share; fails naming each step where they differ."""
    apache, embedded = observed["apache"], observed["embedded"]
    differing = {k: (apache.get(k), embedded.get(k)) for k in apache.keys() | embedded.keys()
                 if apache.get(k) != embedded.get(k)}
    assert not differing, "\n".join(f"{k}: apache {a!r} / embedded {e!r}" for k, (a, e) in sorted(differing.items()))
    return apache


# -- route lookup, topic creation and deletion ------------------------------------------------------
def _topics_scenario(b, topic: str) -> dict:
    out = {}
    with SyncRocketMQClient(b.namesrv, timeout=10) as c:
        out["missing route"] = _outcome(lambda: c.topic_route(topic))
        out["create"] = _outcome(lambda: c.create_topic(b.broker_addr, topic, 4, 4))
        route = c.topic_route(topic)
        out["route queues"] = [(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm, q.topic_sys_flag)
                               for q in route.queue_datas]
        out["route master is the broker"] = route.master_addr("broker-a") == b.broker_addr
        out["listed"] = topic in c.topic_list()
        out["config"] = c.all_topic_configs(b.broker_addr).get(topic)
        out["cluster"] = {name: (d.cluster, d.master_addr == b.broker_addr) for name, d in c.cluster_info().items()}
        # update in place: more read than write queues, read-only, ordered
        out["update"] = _outcome(lambda: c.create_topic(b.broker_addr, topic, 6, 3, PERM_READ, order=True))
        out["updated config"] = c.all_topic_configs(b.broker_addr).get(topic)
        tbw = c.topic_route("TBW102")
        out["TBW102 inherits"] = all(q.perm & PERM_INHERIT for q in tbw.queue_datas)
        # names Apache refuses to create: not retriable either
        out["create TBW102"] = _outcome(lambda: c.create_topic(b.broker_addr, "TBW102", 8, 8))
        out["create rmq_sys_"] = _outcome(lambda: c.create_topic(b.broker_addr, "rmq_sys_" + topic, 1, 1))
        out["create cluster name"] = _outcome(lambda: c.create_topic(b.broker_addr, "DefaultCluster", 1, 1))
        out["create bad name"] = _outcome(lambda: c.create_topic(b.broker_addr, topic + " x", 1, 1))
        # deletion, as the metadata connector does it: broker then name servers
        out["delete in broker"] = _outcome(lambda: c.delete_topic_in_broker(b.broker_addr, topic))
        out["delete in namesrv"] = _outcome(lambda: c.delete_topic_in_namesrv(topic))
        out["deleted route"] = _outcome(lambda: c.topic_route(topic))
        out["deleted config"] = c.all_topic_configs(b.broker_addr).get(topic)
    return out


def test_route_lookup_topic_creation_and_deletion(brokers, unique):
    seen = _same(_both(brokers, _topics_scenario, _name("Routes", unique)))
    not_found = ("refused", "TopicNotFoundError", ResponseCode.TOPIC_NOT_EXIST, False)
    assert seen["missing route"] == not_found and seen["deleted route"] == not_found
    assert seen["route queues"] == [("broker-a", 4, 4, PERM_READ | PERM_WRITE, 0)] and seen["route master is the broker"]
    assert seen["listed"] and seen["cluster"] == {"broker-a": ("DefaultCluster", True)}
    assert seen["config"] == TopicConfig(seen["config"].topic_name, 4, 4, 6, "SINGLE_TAG", 0, False)
    assert (seen["updated config"].read_queue_nums, seen["updated config"].write_queue_nums,
            seen["updated config"].perm, seen["updated config"].order) == (6, 3, PERM_READ, True)
    assert seen["TBW102 inherits"]
    refused = ("refused", "BrokerError", ResponseCode.INVALID_PARAMETER, False)
    assert [seen[k] for k in ("create TBW102", "create rmq_sys_", "create cluster name", "create bad name")] == [refused] * 4
    assert seen["deleted config"] is None


def _auto_create_scenario(b, topic: str) -> dict:
    out = {}
    with SyncRocketMQClient(b.namesrv, timeout=10) as c:
        out["send"] = _outcome(lambda: c.send(b.broker_addr, topic, 3, b"first", {"TAGS": "a"}).result(30).queue_offset)
        out["config"] = c.all_topic_configs(b.broker_addr).get(topic)
        deadline = time.monotonic() + 60  # Apache registers the new topic with the name server at once
        while (route := _outcome(lambda: c.topic_route(topic))).__class__ is tuple and time.monotonic() < deadline:
            time.sleep(0.2)
        out["route"] = [(q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queue_datas]
        out["queue out of range"] = _outcome(lambda: c.send(b.broker_addr, topic, 9, b"x").result(30))
        out["rmq_sys_ auto-created"] = _outcome(lambda: c.send(b.broker_addr, "rmq_sys_" + topic, 0, b"x").result(30).ok)
    return out


def test_a_send_creates_the_topic_from_TBW102(brokers, unique):
    seen = _same(_both(brokers, _auto_create_scenario, _name("Auto", unique)))
    assert seen["send"] == 0 and seen["route"] == [(4, 4, PERM_READ | PERM_WRITE)]  # min(4 asked, TBW102's 8)
    assert (seen["config"].read_queue_nums, seen["config"].write_queue_nums) == (4, 4)
    assert seen["queue out of range"] == ("refused", "BrokerError", ResponseCode.INVALID_PARAMETER, False)
    assert seen["rmq_sys_ auto-created"] is True  # refused by UPDATE_AND_CREATE_TOPIC, created by a send


# -- produce and consume ----------------------------------------------------------------------------
def _messages_scenario(b, topic: str) -> dict:
    out = {}
    with SyncRocketMQClient(b.namesrv, timeout=10) as c:
        c.create_topic(b.broker_addr, topic, 2, 2)
        one = c.send(b.broker_addr, topic, 1, b"single", {"TAGS": "TagA", "KEYS": "k1 k2", "color": "red",
                                                           "UNIQ_KEY": "0A0B0C0D0E0F00112233445566778899"},
                     born_timestamp=1_700_000_000_000, flag=7).result(30)
        out["send"] = (one.status, one.queue_id, one.queue_offset, one.msg_ids != [])
        batch = c.send_batch(b.broker_addr, topic, 1, [
            (b"b0", {"TAGS": "TagB", "KEYS": "kb0", "n": "0"}),
            (b"b1", {"TAGS": "TagC", "KEYS": "kb1", "n": "1", "UNIQ_KEY": "0A0B0C0D0E0F00112233445566778800"}, 3),
            (b"b2", {"TAGS": "TagB", "KEYS": "kb2", "n": "2"}),
        ], born_timestamp=1_700_000_000_001).result(30)
        out["batch"] = (batch.status, batch.queue_id, batch.queue_offset, len(batch.msg_ids))
        out["pull all"] = _pull(c.pull(b.broker_addr, "readers", topic, 1, 0, 32))
        out["msg id"] = c.pull(b.broker_addr, "readers", topic, 1, 0, 32).messages[0].msg_id
        out["pull from 2"] = _pull(c.pull(b.broker_addr, "readers", topic, 1, 2, 32))
        out["pull TagB"] = _pull(c.pull(b.broker_addr, "readers", topic, 1, 0, 32, subscription="TagB"))
        out["pull TagA || TagC"] = _pull(c.pull(b.broker_addr, "readers", topic, 1, 0, 32, subscription="TagA || TagC"))
        out["pull at the end"] = _pull(c.pull(b.broker_addr, "readers", topic, 1, 4, 32))
        out["pull beyond"] = _pull(c.pull(b.broker_addr, "readers", topic, 1, 9, 32))
        out["pull empty queue"] = _pull(c.pull(b.broker_addr, "readers", topic, 0, 0, 32))
        out["pull bad queue"] = _outcome(lambda: c.pull(b.broker_addr, "readers", topic, 5, 0, 32))
        out["pull unknown topic"] = _outcome(lambda: c.pull(b.broker_addr, "readers", topic + "Nope", 0, 0, 32))
        out["empty body"] = _outcome(lambda: c.send(b.broker_addr, topic, 0, b"").result(30))
        out["empty body in a batch"] = _outcome(lambda: c.send_batch(b.broker_addr, topic, 0, [(b"x", {}), (b"", {})])
                                                .result(30))
        out["properties too long"] = _outcome(lambda: c.send(b.broker_addr, topic, 0, b"x", {"p": "v" * 40_000})
                                              .result(30))
        out["body too long"] = _outcome(lambda: c.send(b.broker_addr, topic, 0, b"x" * (4 * 1024 * 1024 + 1))
                                        .result(60))
        out["min"] = [c.min_offset(b.broker_addr, topic, q) for q in (0, 1)]
        out["max"] = [c.max_offset(b.broker_addr, topic, q) for q in (0, 1)]
    return out


def test_send_batch_send_and_pull_by_offset(brokers, unique):
    seen = _same(_both(brokers, _messages_scenario, _name("Msgs", unique)))
    topic = _name("Msgs", unique)
    assert seen["send"] == ("SEND_OK", 1, 0, True) and seen["batch"] == ("SEND_OK", 1, 1, 3)
    single = (topic, 1, 0, b"single", 7, 1_700_000_000_000, 0,
              {"TAGS": "TagA", "KEYS": "k1 k2", "color": "red", "UNIQ_KEY": "0A0B0C0D0E0F00112233445566778899"})
    b0 = (topic, 1, 1, b"b0", 0, 1_700_000_000_001, 0, {"TAGS": "TagB", "KEYS": "kb0", "n": "0"})
    b1 = (topic, 1, 2, b"b1", 3, 1_700_000_000_001, 0,
          {"TAGS": "TagC", "KEYS": "kb1", "n": "1", "UNIQ_KEY": "0A0B0C0D0E0F00112233445566778800"})
    b2 = (topic, 1, 3, b"b2", 0, 1_700_000_000_001, 0, {"TAGS": "TagB", "KEYS": "kb2", "n": "2"})
    assert seen["pull all"] == ("FOUND", 4, 0, 4, [single, b0, b1, b2])
    assert seen["msg id"] == "0A0B0C0D0E0F00112233445566778899"  # the producer's id, not the offset id
    assert seen["pull from 2"] == ("FOUND", 4, 0, 4, [b1, b2])
    assert seen["pull TagB"] == ("FOUND", 4, 0, 4, [b0, b2])
    assert seen["pull TagA || TagC"] == ("FOUND", 4, 0, 4, [single, b1])
    assert seen["pull at the end"] == ("NO_NEW_MSG", 4, 0, 4, [])
    assert seen["pull beyond"] == ("OFFSET_ILLEGAL", 4, 0, 4, [])
    assert seen["pull empty queue"] == ("NO_NEW_MSG", 0, 0, 0, [])
    assert seen["pull bad queue"] == ("refused", "BrokerError", ResponseCode.INVALID_PARAMETER, False)
    assert seen["pull unknown topic"] == ("refused", "TopicNotFoundError", ResponseCode.TOPIC_NOT_EXIST, False)
    # Java's client refuses an empty body before sending (Validators.checkMessage); Apache's broker
    # fails on one with a NullPointerException answered as the retriable SYSTEM_ERROR
    assert seen["empty body"] == seen["empty body in a batch"] == ("client error", "ConnectError", False)
    illegal = ("refused", "BrokerError", ResponseCode.MESSAGE_ILLEGAL, False)
    assert seen["properties too long"] == seen["body too long"] == illegal
    assert seen["min"] == [0, 0] and seen["max"] == [0, 4]


def _search_scenario(b, topic: str) -> dict:
    with SyncRocketMQClient(b.namesrv, timeout=10) as c:
        c.create_topic(b.broker_addr, topic, 1, 1)
        for i in range(3):
            c.send(b.broker_addr, topic, 0, f"m{i}".encode()).result(30)
            time.sleep(0.3)
        stored = [m.store_timestamp for m in c.pull(b.broker_addr, "readers", topic, 0, 0, 32).messages]
        return {"search": [c.search_offset(b.broker_addr, topic, 0, t) for t in [0, *stored, stored[-1] + 60_000]]}


def test_search_offset_by_timestamp(brokers, unique):
    assert _same(_both(brokers, _search_scenario, _name("Search", unique))) == {"search": [0, 0, 1, 2, 3]}


# -- consumer offsets, groups, consumers -------------------------------------------------------------
def _offsets_scenario(b, topic: str, group: str) -> dict:
    out = {}
    with SyncRocketMQClient(b.namesrv, timeout=10) as c:
        c.create_topic(b.broker_addr, topic, 2, 2)
        for i in range(6):
            c.send(b.broker_addr, topic, i % 2, f"m{i}".encode()).result(30)
        out["query, none"] = c.query_consumer_offset(b.broker_addr, group, topic, 0, set_zero_if_not_found=False)
        out["query, none, zero"] = c.query_consumer_offset(b.broker_addr, group, topic, 0)
        # a group that neither pulled nor was created: Apache refuses its offsets (autoCreateSubscriptionGroup
        # creates groups on pulls and heartbeats only)
        out["update, no group"] = _outcome(lambda: c.update_consumer_offset(b.broker_addr, group, topic, 0, 2))
        c.create_subscription_group(b.broker_addr, {"groupName": group})
        out["update"] = _outcome(lambda: c.update_consumer_offset(b.broker_addr, group, topic, 0, 2))
        out["query"] = c.query_consumer_offset(b.broker_addr, group, topic, 0, set_zero_if_not_found=False)
        out["update back"] = _outcome(lambda: c.update_consumer_offset(b.broker_addr, group, topic, 0, 1))
        out["query back"] = c.query_consumer_offset(b.broker_addr, group, topic, 0)
        out["update unknown topic"] = _outcome(lambda: c.update_consumer_offset(b.broker_addr, group, topic + "N", 0, 1))
        out["query unknown topic"] = c.query_consumer_offset(b.broker_addr, group, topic + "N", 0,
                                                             set_zero_if_not_found=False)
        # a pull creates its group, and commits its offset when asked to
        puller = group + "_p"
        out["pull, commit"] = c.pull(b.broker_addr, puller, topic, 1, 1, 32, commit_offset=2).status
        out["pulled group listed"] = puller in c.subscription_groups(b.broker_addr)
        out["committed by the pull"] = c.query_consumer_offset(b.broker_addr, puller, topic, 1)
        out["update, pulled group"] = _outcome(lambda: c.update_consumer_offset(b.broker_addr, puller, topic, 0, 3))
        stats = c.consume_stats(b.broker_addr, group, topic)
        out["stats"] = sorted((mq.queue_id, w.broker_offset, w.consumer_offset) for mq, w in stats.offset_table.items())
        stats = c.consume_stats(b.broker_addr, puller)
        out["stats, all topics"] = sorted((mq.topic, mq.queue_id, w.broker_offset, w.consumer_offset)
                                          for mq, w in stats.offset_table.items())
    return out


def test_consumer_offsets_query_update_and_consume_stats(brokers, unique):
    topic, group = _name("Offsets", unique), _name("GID_off_", unique)
    seen = _same(_both(brokers, _offsets_scenario, topic, group))
    assert seen["query, none"] is None and seen["query, none, zero"] == 0
    assert seen["update, no group"] == ("refused", "BrokerError", SUBSCRIPTION_GROUP_NOT_EXIST, False)
    assert seen["update"] is None and seen["query"] == 2
    assert seen["update back"] is None and seen["query back"] == 1  # not forward-only: the broker stores what it gets
    assert seen["update unknown topic"] == ("refused", "TopicNotFoundError", ResponseCode.TOPIC_NOT_EXIST, False)
    assert seen["query unknown topic"] is None
    assert seen["pull, commit"] == "FOUND" and seen["pulled group listed"] and seen["committed by the pull"] == 2
    assert seen["update, pulled group"] is None
    assert seen["stats"] == [(0, 3, 1), (1, 3, 0)]
    assert seen["stats, all topics"] == [(topic, 0, 3, 3), (topic, 1, 3, 2)]


GROUP_FIELDS = {"consumeEnable": False, "consumeFromMinEnable": True, "consumeBroadcastEnable": False,
                "retryQueueNums": 2, "retryMaxTimes": 7, "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1,
                "notifyConsumerIdsChangedEnable": False}


def _groups_scenario(b, group: str, topic: str) -> dict:
    out = {}
    with SyncRocketMQClient(b.namesrv, timeout=10) as c:
        c.create_topic(b.broker_addr, topic, 1, 1)
        out["create"] = _outcome(lambda: c.create_subscription_group(b.broker_addr, {"groupName": group, **GROUP_FIELDS}))
        config = c.subscription_group_configs(b.broker_addr).get(group) or {}
        out["config"] = {k: config.get(k) for k in ("groupName", *GROUP_FIELDS)}
        out["listed"] = group in c.subscription_groups(b.broker_addr)
        out["replace"] = _outcome(lambda: c.create_subscription_group(b.broker_addr, {"groupName": group,
                                                                                      "retryMaxTimes": 3}))
        out["replaced retryMaxTimes"] = (c.subscription_group_configs(b.broker_addr).get(group) or {}).get("retryMaxTimes")
        out["no consumers"] = c.consumer_ids(b.broker_addr, group)
        c.heartbeat(b.broker_addr, "client@1", ["producers"], [ConsumerData(group, (topic,))])
        out["consumers"] = c.consumer_ids(b.broker_addr, group)
        out["delete"] = _outcome(lambda: c.delete_subscription_group(b.broker_addr, group))
        out["deleted"] = group in c.subscription_groups(b.broker_addr)
    return out


def test_subscription_groups_and_consumers(brokers, unique):
    group = _name("GID_cfg_", unique)
    seen = _same(_both(brokers, _groups_scenario, group, _name("Groups", unique)))
    assert seen["create"] is None and seen["config"] == {"groupName": group, **GROUP_FIELDS} and seen["listed"]
    assert seen["replace"] is None and seen["replaced retryMaxTimes"] == 3
    assert seen["no consumers"] == [] and seen["consumers"] == ["client@1"]
    assert seen["delete"] is None and seen["deleted"] is False


# -- the must-show: 10,000 messages and their consumer offsets ---------------------------------------
N, QUEUES = 10_000, 4


def _props(i: int) -> dict[str, str]:
    return {"TAGS": f"Tag{i % 3}", "KEYS": f"key-{i} alt-{i % 7}", "idx": str(i), "src": "conformance",
            "payload.kind": ("even", "odd")[i % 2], "UNIQ_KEY": f"{i:032X}"}


def test_ten_thousand_messages_with_tags_keys_and_properties_round_trip(broker, unique):
    """Half sent one by one, half in batches of 50; pulled back by offset identical (body, tags,
    keys, properties, flag, born timestamp, queue offset); then each queue's consumer offset is
    written and read back, and consume stats agree."""
    topic, group = _name("TenK", unique), _name("GID_tenk_", unique)
    sent: dict[int, list[tuple]] = {q: [] for q in range(QUEUES)}
    with SyncRocketMQClient(broker.namesrv, timeout=30) as c:
        c.create_topic(broker.broker_addr, topic, QUEUES, QUEUES)
        futures = []
        for i in range(N // 2):
            q = i % QUEUES
            futures.append(c.send(broker.broker_addr, topic, q, f"value-{i}".encode() * (1 + i % 5), _props(i),
                                  born_timestamp=1_700_000_000_000 + i, flag=i % 4))
            sent[q].append((f"value-{i}".encode() * (1 + i % 5), _props(i), i % 4, 1_700_000_000_000 + i))
            if len(futures) >= 200:
                assert all(f.result(60).ok for f in futures)
                futures = []
        for start in range(N // 2, N, 50):
            q = (start // 50) % QUEUES
            batch = [(f"batch-{i}".encode(), _props(i), i % 4) for i in range(start, start + 50)]
            futures.append(c.send_batch(broker.broker_addr, topic, q, batch, born_timestamp=1_700_000_000_000 + start))
            sent[q] += [(body, props, flag, 1_700_000_000_000 + start) for body, props, flag in batch]
        assert all(f.result(60).ok for f in futures)

        route = c.topic_route(topic)
        addr = route.master_addr("broker-a")
        assert addr == broker.broker_addr and len(route.read_queues()) == QUEUES
        total = 0
        for q in range(QUEUES):
            got, offset = [], 0
            while True:
                r = c.pull(addr, group, topic, q, offset, 32)
                if r.status != "FOUND":
                    assert r.status == "NO_NEW_MSG", r
                    break
                assert [m.queue_offset for m in r.messages] == list(range(offset, offset + len(r.messages)))
                got += [(m.body, {k: v for k, v in m.properties.items() if k not in ADDED_BY_APACHE}, m.flag,
                         m.born_timestamp) for m in r.messages]
                offset = r.next_begin_offset
            assert got == sent[q], f"queue {q}: what was pulled differs from what was sent"
            assert (c.min_offset(addr, topic, q), c.max_offset(addr, topic, q)) == (0, len(sent[q]))
            total += len(got)
        assert total == N

        # consumer offsets round trip (the pulls above created the group on Apache, as they do)
        c.create_subscription_group(addr, {"groupName": group})
        wanted = {q: len(sent[q]) - 17 * (q + 1) for q in range(QUEUES)}
        for q, n in wanted.items():
            c.update_consumer_offset(addr, group, topic, q, n)
        assert {q: c.query_consumer_offset(addr, group, topic, q) for q in range(QUEUES)} == wanted
        stats = c.consume_stats(addr, group, topic)
        assert {mq.queue_id: (w.broker_offset, w.consumer_offset) for mq, w in stats.offset_table.items()} == \
               {q: (len(sent[q]), wanted[q]) for q in range(QUEUES)}
        assert stats.total_lag == sum(17 * (q + 1) for q in range(QUEUES))


# -- ACL ----------------------------------------------------------------------------------------------
ACCESS, SECRET = "rocket", "s3cret-conformance"


@pytest.fixture(scope="module")
def secured(tmp_path_factory) -> dict:
    """An Apache RocketMQ with 5.x authentication and an embedded broker with its ACL, one account each."""
    from worker.brokers.rocketmq import authentication
    from worker.embedded import ApacheRocketMQ

    root = tmp_path_factory.mktemp("conformance-acl")
    apache = ApacheRocketMQ(root / "apache", log_path=root / "apache.log", broker_extra=authentication(ACCESS, SECRET))
    embedded = EmbeddedRocketMQ(root / "embedded", log_path=root / "embedded.log",
                                env={"CONNECT_ROCKETMQ_ACL": f"{ACCESS}:{SECRET}"})
    embedded.start()
    try:
        apache.start(timeout=240)
    except BaseException:
        embedded.stop()
        raise
    yield {"apache": apache, "embedded": embedded}
    apache.stop()
    embedded.stop()


def _acl_scenario(b, topic: str) -> dict:
    out = {}
    signers = {"signed": AclSigner(ACCESS, SECRET), "wrong secret": AclSigner(ACCESS, "wrong"),
               "unknown user": AclSigner("nobody", SECRET), "unsigned": None}
    with SyncRocketMQClient(b.namesrv, signer=signers["signed"], timeout=10) as c:
        c.create_topic(b.broker_addr, topic, 1, 1)
    for who, signer in signers.items():
        with SyncRocketMQClient(b.namesrv, signer=signer, timeout=10) as c:
            out[f"{who}: create"] = _outcome(lambda: c.create_topic(b.broker_addr, topic, 1, 1))
            out[f"{who}: send"] = _outcome(lambda: c.send(b.broker_addr, topic, 0, b"x", {"n": "1"}).result(30).ok)
            out[f"{who}: pull"] = _outcome(lambda: c.pull(b.broker_addr, "acl_readers", topic, 0, 0, 32).status)
            out[f"{who}: offset"] = _outcome(lambda: c.query_consumer_offset(b.broker_addr, "acl_readers", topic, 0))
    return out


def test_acl_signed_requests_pass_and_the_rest_are_refused(secured, unique):
    seen = _same(_both(secured, _acl_scenario, _name("Acl", unique)))
    assert [seen[f"signed: {op}"] for op in ("create", "send", "pull", "offset")] == [None, True, "FOUND", 0]
    refused = ("refused", "BrokerError", ResponseCode.NO_PERMISSION, False)
    for who in ("wrong secret", "unknown user", "unsigned"):
        assert [seen[f"{who}: {op}"] for op in ("create", "send", "pull", "offset")] == [refused] * 4, who
    with SyncRocketMQClient(secured["apache"].namesrv, timeout=10) as anonymous:  # Apache's name server checks nothing
        assert anonymous.topic_route(_name("Acl", unique)).queue_datas
