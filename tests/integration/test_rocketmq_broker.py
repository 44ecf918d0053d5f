"""The embedded RocketMQ broker over the wire, driven by this project's client
(connectors.rocketmq.sync_client and the modules under it): sends, pulls, filters, long polling, offsets, admin requests,
durability across restarts and ``kill -9``, ACL, and what malformed frames do to it."""

from __future__ import annotations

import concurrent.futures
import socket
import struct
import time

import pytest

from connect.errors import ConnectError, RetriableError
from connectors.rocketmq.protocol import FrameDecoder, RemotingCommand, RequestCode
from connectors.rocketmq.remoting import AclSigner, BrokerError, TopicNotFoundError
from connectors.rocketmq.sync_client import SyncRocketMQClient
from worker.embedded import EmbeddedRocketMQ


@pytest.fixture
def broker(tmp_path):
    b = EmbeddedRocketMQ(tmp_path / "rmq", log_path=tmp_path / "rmq.log").start()
    yield b
    b.stop()


@pytest.fixture
def client(broker):
    c = SyncRocketMQClient(broker.namesrv)
    yield c
    c.close()


def _addr(client, topic: str) -> str:
    route = client.topic_route(topic)
    return route.master_addr(route.queue_datas[0].broker_name)


def test_send_single_and_batch_then_pull_everything_back_identical(broker, client):
    client.create_topic(broker.namesrv, "orders", 4, 4)
    addr = _addr(client, "orders")
    assert addr == broker.namesrv
    futures = [client.send(addr, "orders", i % 4, f"body-{i}".encode(),
                           {"TAGS": "TagA" if i % 2 else "TagB", "KEYS": f"k-{i} other-{i}", "UNIQ_KEY": f"U{i:04}",
                            "color": "red"}, born_timestamp=1_700_000_000_000 + i) for i in range(200)]
    results = [f.result(10) for f in futures]
    assert all(r.ok for r in results) and sorted(r.queue_offset for r in results if r.queue_id == 1) == list(range(50))
    batch = client.send_batch(addr, "orders", 2, [(f"batch-{i}".encode(), {"UNIQ_KEY": f"B{i}", "n": str(i)})
                                                  for i in range(100)]).result(10)
    assert batch.queue_offset == 50 and len(batch.msg_ids) == 100
    pulled = client.pull(addr, "g1", "orders", 2, 0, 1000)
    assert pulled.status == "FOUND" and pulled.next_begin_offset == pulled.max_offset == 150
    msgs = pulled.messages
    assert [m.queue_offset for m in msgs] == list(range(150))
    assert [m.body for m in msgs[:50]] == [f"body-{i}".encode() for i in range(2, 200, 4)]
    first = msgs[0]
    assert first.properties == {"TAGS": "TagB", "KEYS": "k-2 other-2", "UNIQ_KEY": "U0002", "color": "red"}
    assert first.keys == ["k-2", "other-2"] and first.born_timestamp == 1_700_000_000_002
    assert first.store_host == ("127.0.0.1", broker.port) and first.offset_msg_id == results[2].msg_id
    assert [m.properties["n"] for m in msgs[50:]] == [str(i) for i in range(100)]
    assert [m.offset_msg_id for m in msgs[50:]] == batch.msg_ids


def test_tag_filters_offsets_moved_and_long_polling(broker, client):
    client.create_topic(broker.namesrv, "tagged", 1, 1)
    addr = _addr(client, "tagged")
    for i in range(30):
        client.send(addr, "tagged", 0, b"x", {"TAGS": ["TagA", "TagB", "TagC"][i % 3]}).result(5)
    only = client.pull(addr, "g", "tagged", 0, 0, 100, subscription="TagA || TagC")
    assert {m.tags for m in only.messages} == {"TagA", "TagC"} and len(only.messages) == 20
    none = client.pull(addr, "g", "tagged", 0, 0, 100, subscription="TagZ")
    assert none.status == "NO_MATCHED_MSG" and none.next_begin_offset == 30
    moved = client.pull(addr, "g", "tagged", 0, 99, 10)
    assert moved.status == "OFFSET_ILLEGAL" and moved.next_begin_offset == 30
    started = time.monotonic()
    assert client.pull(addr, "g", "tagged", 0, 30, 10, suspend_timeout=0.3).status == "NO_NEW_MSG"
    assert time.monotonic() - started >= 0.25  # held by the broker, not answered at once
    waiting = client.submit(client.client.pull(addr, "g", "tagged", 0, 30, 10, suspend_timeout=20))
    time.sleep(0.3)
    assert not waiting.done()
    client.send(addr, "tagged", 0, b"late", {"TAGS": "TagA"}).result(5)
    woke = waiting.result(5)  # answered when the message arrived, long before the 20 s
    assert woke.status == "FOUND" and [m.body for m in woke.messages] == [b"late"]


def test_offsets_search_consume_stats_and_topic_configs(broker, client):
    client.create_topic(broker.namesrv, "stats", 2, 2)
    addr = _addr(client, "stats")
    for _ in range(10):
        client.send(addr, "stats", 0, b"a").result(5)
    time.sleep(0.02)
    middle = int(time.time() * 1000)
    time.sleep(0.02)
    for _ in range(5):
        client.send(addr, "stats", 0, b"b").result(5)
    assert (client.min_offset(addr, "stats", 0), client.max_offset(addr, "stats", 0)) == (0, 15)
    assert client.search_offset(addr, "stats", 0, middle) == 10
    assert client.search_offset(addr, "stats", 0, 0) == 0
    assert client.search_offset(addr, "stats", 0, middle + 60_000) == 15
    assert client.query_consumer_offset(addr, "grp", "stats", 0) in (None, 0)  # no offset committed yet
    client.create_subscription_group(addr, {"groupName": "grp"})  # offsets only for an existing group, as 5.x
    client.update_consumer_offset(addr, "grp", "stats", 0, 12)
    assert client.query_consumer_offset(addr, "grp", "stats", 0) == 12
    stats = client.consume_stats(addr, "grp", "stats")
    assert stats.total_lag == 3
    configs = client.all_topic_configs(addr)
    assert (configs["stats"].read_queue_nums, configs["stats"].write_queue_nums) == (2, 2)
    assert "stats" in client.topic_list()
    with pytest.raises(TopicNotFoundError, match="nothere"):
        client.topic_route("nothere")
    with pytest.raises(BrokerError, match="queueId"):
        client.send(addr, "stats", 7, b"x").result(5)


def test_acknowledged_messages_and_flushed_offsets_survive_kill_9(tmp_path):
    """Sends are written to the OS before they are answered: a broker killed with SIGKILL right
    after loses none of them. Consumer offsets are written at the flush tick."""
    b = EmbeddedRocketMQ(tmp_path / "rmq").start()
    try:
        with SyncRocketMQClient(b.namesrv) as c:
            c.create_topic(b.namesrv, "durable", 2, 2)
            sent = [c.send(b.namesrv, "durable", i % 2, f"m{i}".encode(), {"KEYS": str(i)}) for i in range(3000)]
            assert all(f.result(10).ok for f in sent)
            c.create_subscription_group(b.namesrv, {"groupName": "grp"})
            c.update_consumer_offset(b.namesrv, "grp", "durable", 1, 77)
            time.sleep(1.0)  # a flush tick passes
        b.kill()
        b.start()
        with SyncRocketMQClient(b.namesrv) as c:
            bodies = []
            for q in (0, 1):
                offset = 0
                while True:
                    r = c.pull(b.namesrv, "g", "durable", q, offset, 500)
                    if r.status != "FOUND":
                        break
                    bodies += [m.body for m in r.messages]
                    offset = r.next_begin_offset
            assert sorted(bodies) == sorted(f"m{i}".encode() for i in range(3000))
            assert c.query_consumer_offset(b.namesrv, "grp", "durable", 1) == 77
            assert c.send(b.namesrv, "durable", 0, b"after").result(5).queue_offset == 1500
    finally:
        b.stop()


def test_a_torn_commit_log_tail_is_cut_and_unindexed_records_are_indexed_again(tmp_path):
    """What a crash in the middle of a write leaves: half a record at the end of the commit log,
    and records the consume queue did not get. The broker comes back with every whole record."""
    b = EmbeddedRocketMQ(tmp_path / "rmq").start()
    with SyncRocketMQClient(b.namesrv) as c:
        c.create_topic(b.namesrv, "torn", 1, 1)
        for i in range(10):
            c.send(b.namesrv, "torn", 0, f"m{i}".encode()).result(5)
    b.stop()
    data = tmp_path / "rmq"
    cq = data / "consumequeue" / "torn" / "0"
    cq.write_bytes(cq.read_bytes()[:20 * 6])  # the last 4 entries lost
    log_file = data / "commitlog"
    whole = log_file.read_bytes()
    log_file.write_bytes(whole + whole[-60:-10])  # a record cut short after the last one
    b.start()
    try:
        with SyncRocketMQClient(b.namesrv) as c:
            r = c.pull(b.namesrv, "g", "torn", 0, 0, 100)
            assert [m.body for m in r.messages] == [f"m{i}".encode() for i in range(10)]
            assert c.send(b.namesrv, "torn", 0, b"next").result(5).queue_offset == 10
        assert log_file.stat().st_size > len(whole)  # the cut tail was replaced by the new record
    finally:
        b.stop()


@pytest.mark.parametrize("source", ["env", "file"])
def test_acl_accepts_signed_requests_and_refuses_wrong_secrets(tmp_path, source):
    """The secret comes from CONNECT_ROCKETMQ_ACL or --acl-file, never the command line (ps)."""
    if source == "env":
        b = EmbeddedRocketMQ(tmp_path / "rmq", env={"CONNECT_ROCKETMQ_ACL": "other:x,rocket:s3cret"})
    else:
        secrets = tmp_path / "acl"
        secrets.write_text("# access:secret\nrocket:s3cret\n")
        secrets.chmod(0o600)
        b = EmbeddedRocketMQ(tmp_path / "rmq", extra_args=["--acl-file", str(secrets)])
    b.start()
    try:
        assert "s3cret" not in " ".join(b.proc.args)
        with SyncRocketMQClient(b.namesrv, signer=AclSigner("rocket", "s3cret")) as good:
            good.create_topic(b.namesrv, "secured", 1, 1)
            assert good.send(b.namesrv, "secured", 0, b"ok", {"a": "b"}).result(5).ok
        with SyncRocketMQClient(b.namesrv, signer=AclSigner("rocket", "wrong")) as bad:
            with pytest.raises(BrokerError, match="signature"):
                bad.send(b.namesrv, "secured", 0, b"no").result(5)
        with SyncRocketMQClient(b.namesrv) as anonymous:
            with pytest.raises(BrokerError, match="No acl config"):
                anonymous.topic_route("secured")
    finally:
        b.stop()


def test_malformed_frames_close_only_their_connection(broker, client):
    """A bounded fuzz at the broker: truncated, oversized and garbage frames. Each connection is
    closed (or the frame answered with an error), nothing hangs, and the broker keeps serving."""
    import random

    rnd = random.Random(7)
    good = RemotingCommand(RequestCode.SEND_MESSAGE_V2, 1, 0, {"a": "g", "b": "fuzz", "c": "TBW102", "d": "4", "e": "0",
                                                               "f": "0", "g": "0", "h": "0", "i": ""}, b"body").encode()
    frames = [struct.pack(">I", 0xFFFFFFF0) + b"x" * 8, struct.pack(">II", 8, 0xFF000010) + b"x" * 4,
              struct.pack(">II", 12, 100) + b"{}" + b"x" * 6, struct.pack(">II", 12, 8) + b"not json",
              struct.pack(">II", 10, 6) + b"[1,2]", struct.pack(">II", 20, 16) + b'{"code":"ten"}xx']
    for _ in range(60):
        mutated = bytearray(good)
        for _ in range(rnd.randint(1, 6)):
            mutated[rnd.randrange(8, len(mutated))] = rnd.randrange(256)
        frames.append(bytes(mutated[:rnd.randint(8, len(mutated))]) if rnd.random() < 0.3 else bytes(mutated))
    for frame in frames:
        with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as s:
            s.sendall(frame)
            s.shutdown(socket.SHUT_WR)
            decoder = FrameDecoder()
            deadline = time.monotonic() + 5
            answers = []
            while time.monotonic() < deadline:
                data = s.recv(65536)
                if not data:
                    break
                answers += decoder.feed(data)
            assert time.monotonic() < deadline, f"the broker neither answered nor closed: {frame[:40]!r}"
            for a in answers:
                assert a.is_response
    client.create_topic(broker.namesrv, "alive", 1, 1)
    assert client.send(broker.namesrv, "alive", 0, b"still serving").result(5).ok


def test_client_reports_a_broker_that_went_away_as_transient(tmp_path):
    b = EmbeddedRocketMQ(tmp_path / "rmq").start()
    c = SyncRocketMQClient(b.namesrv, timeout=1.0, connect_timeout=1.0)
    try:
        c.create_topic(b.namesrv, "gone", 1, 1)
        b.stop()
        with pytest.raises(RetriableError):
            c.send(b.namesrv, "gone", 0, b"x").result(5)
        b.start()
        deadline = time.monotonic() + 10
        while True:  # the client reconnects by itself on the next request
            try:
                assert c.send(b.namesrv, "gone", 0, b"y").result(5).ok
                break
            except (RetriableError, concurrent.futures.TimeoutError, ConnectError):
                assert time.monotonic() < deadline
                time.sleep(0.2)
    finally:
        c.close()
        b.stop()
