"""The RocketMQ client against small scripted servers on loopback sockets.

Each test starts an asyncio TCP server that decodes requests with protocol.py and answers as the
test scripts it (out of order, late, garbage, closing the connection, sending its own requests).
Expected request fields come from the apache/rocketmq 4.9.x header classes and from the golden
frames Java produced (``/work/rmq-research/golden``), copied here.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import hashlib
import hmac
import random
import socket
import struct
import threading
import time

import pytest

from connect.errors import ConnectError, RetriableError
from connectors.rocketmq.async_client import RocketMQClient
from connectors.rocketmq.fastjson import parse_fastjson
from connectors.rocketmq.models import ConsumerData, MessageQueue, parse_consume_stats, parse_topic_configs, parse_topic_route
from connectors.rocketmq.protocol import FrameDecoder, ProtocolError, RemotingCommand, decode_batch
from connectors.rocketmq.remoting import (
    AclSigner,
    BrokerError,
    ConnectionLostError,
    RemotingConnection,
    RemotingTimeoutError,
    RetriableBrokerError,
    TopicNotFoundError,
)
from connectors.rocketmq.sync_client import SyncRocketMQClient

# -- golden data (apache/rocketmq 4.9.x classes run with fastjson 1.2.83; see SPEC.md §3, §11) -------
# TopicRouteData.encode() (fastjson default: brokerAddrs keys are bare numbers)
ROUTE_FASTJSON = (b'{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10921"},"brokerName":"broker-a",'
                  b'"cluster":"DefaultCluster"}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,'
                  b'"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}')
# the same with BrowserCompatible (what a namesrv answers to version >= V4_9_4)
ROUTE_STANDARD = ROUTE_FASTJSON.replace(b"{0:", b'{"0":').replace(b",1:", b',"1":')
# ConsumeStats.encode(): offsetTable keyed by MessageQueue objects
CONSUME_STATS = (b'{"consumeTps":0.0,"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:'
                 b'{"brokerOffset":10,"consumerOffset":7,"lastTimestamp":1700000000000}}}')
TOPIC_CONFIGS = (b'{"dataVersion":{"counter":0,"timestamp":1795372085062},"topicConfigTable":{"T":{"order":false,"perm":6,'
                 b'"readQueueNums":4,"topicFilterType":"SINGLE_TAG","topicName":"T","topicSysFlag":0,"writeQueueNums":4}}}')
# extFields of a 4.9.x Java SEND_MESSAGE_V2 request (golden/java_request_headers.txt)
JAVA_SEND_FIELDS = {"a": "PG", "b": "T", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1700000000000", "h": "0",
                    "i": "UNIQ_KEY\x01X\x02WAIT\x01true\x02TAGS\x01TagA", "j": "0", "k": "false", "m": "false"}
# extFields of a 4.9.x Java PULL_MESSAGE request (golden/java_request_headers.txt)
JAVA_PULL_FIELDS = {"queueId": "0", "maxMsgNums": "32", "sysFlag": "6", "suspendTimeoutMillis": "15000",
                    "commitOffset": "0", "topic": "T", "queueOffset": "0", "expressionType": "TAG", "subscription": "*",
                    "subVersion": "1700000000000", "consumerGroup": "G"}
# extFields of a Java broker's SEND response (golden/java_remoting_frames.txt)
JAVA_SEND_RESPONSE_FIELDS = {"queueId": "0", "TRACE_ON": "true", "MSG_REGION": "DefaultRegion",
                             "msgId": "7F00000100002A9F0000000000000000", "queueOffset": "0"}
# MessageDecoder.encode: topic T, body hello, queue 1 offset 2, commit log 300 (golden/java_message_encoding.txt)
JAVA_STORED = bytes.fromhex(
    "00000098daa320a73610a68600000001000000000000000000000002000000000000012c000000000000018bcfe568007f0000010000d431"
    "0000018bcfe5687b7f00000100002a9f0000000000000000000000000000000568656c6c6f0154003761016202554e49515f4b4559013746"
    "30303030303130303031303030303030303030303030303030303030414102544147530154616741")


def run(coro, limit: float = 5.0):
    """asyncio.run with a hard bound, so a broken client fails the test instead of hanging it."""
    return asyncio.run(asyncio.wait_for(coro, limit))


class Peer:
    """The server side of one accepted connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer

    def send(self, cmd: RemotingCommand) -> None:
        self.writer.write(cmd.encode())

    def raw(self, data: bytes) -> None:
        self.writer.write(data)

    def close(self) -> None:
        self.writer.close()


class ScriptServer:
    """A loopback server; ``script(peer, cmd)`` (sync or async) sees every frame the client sends."""

    def __init__(self, script):
        self.script = script
        self.received: list[RemotingCommand] = []
        self.peers: list[Peer] = []

    async def __aenter__(self) -> ScriptServer:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.address = f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc) -> None:
        for p in self.peers:
            p.close()
        self.server.close()

    async def _serve(self, reader, writer) -> None:
        peer = Peer(reader, writer)
        self.peers.append(peer)
        decoder = FrameDecoder()
        try:
            while data := await reader.read(65536):
                for cmd in decoder.feed(data):
                    self.received.append(cmd)
                    result = self.script(peer, cmd)
                    if asyncio.iscoroutine(result):
                        await result
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()


def echo(peer: Peer, cmd: RemotingCommand) -> None:
    if not cmd.is_response:
        peer.send(cmd.response(0, {"echo": cmd.ext_fields.get("n", "")}))


def request(n: int, code: int = 999) -> RemotingCommand:
    return RemotingCommand(code, ext_fields={"n": str(n)})


# -- RemotingConnection ---------------------------------------------------------------------------
def test_pipelined_requests_answered_out_of_order_resolve_to_their_own_responses():
    count = 200
    held: list[tuple[Peer, RemotingCommand]] = []

    def script(peer, cmd):
        held.append((peer, cmd))
        if len(held) == count:  # all 200 are in flight at once: answer them shuffled
            random.Random(7).shuffle(held)
            for p, c in held:
                p.send(c.response(0, {"echo": c.ext_fields["n"]}, body=c.ext_fields["n"].encode()))

    async def main():
        async with ScriptServer(script) as server:
            conn = RemotingConnection(server.address)
            responses = await asyncio.gather(*(conn.request(request(i), 3.0) for i in range(count)))
            assert [r.ext_fields["echo"] for r in responses] == [str(i) for i in range(count)]
            assert [r.body for r in responses] == [str(i).encode() for i in range(count)]
            assert all(r.is_response and r.code == 0 for r in responses)
            opaques = [c.opaque for c in server.received]
            assert len(set(opaques)) == count and len(server.peers) == 1
            assert conn.pending == 0
            await conn.close()

    run(main())


def test_requests_reach_the_wire_in_the_order_they_were_made_while_the_connection_is_made():
    """Requests made while the first ones wait for the connection must not overtake them: batches
    to one queue would be stored out of order (a sink's first sends after it connected)."""
    async def main():
        async with ScriptServer(echo) as server:
            conn = RemotingConnection(server.address)
            first = [asyncio.ensure_future(conn.request(request(i), 3.0)) for i in range(50)]
            while not conn.connected:  # the first request holds the connection; 1-49 wait behind it
                await asyncio.sleep(0)
            later = [asyncio.ensure_future(conn.request(request(i), 3.0)) for i in range(50, 100)]
            await asyncio.gather(*first, *later)
            assert [c.ext_fields["n"] for c in server.received] == [str(i) for i in range(100)]
            await conn.close()

    run(main())


def test_timeout_raises_retriable_and_a_late_response_is_dropped():
    async def script(peer, cmd):
        if cmd.ext_fields["n"] == "slow":
            async def late():
                await asyncio.sleep(0.3)
                peer.send(cmd.response(0, {"who": "slow"}))
            asyncio.get_running_loop().create_task(late())
        else:
            peer.send(cmd.response(0, {"who": cmd.ext_fields["n"]}))

    async def main():
        async with ScriptServer(script) as server:
            conn = RemotingConnection(server.address)
            started = time.monotonic()
            slow = RemotingCommand(310, ext_fields={"n": "slow"})
            with pytest.raises(RemotingTimeoutError) as err:
                await conn.request(slow, 0.1)
            assert 0.09 < time.monotonic() - started < 1.0  # the raise itself shows it did not wait for the answer
            assert isinstance(err.value, RetriableError)
            text = str(err.value)
            assert "SEND_MESSAGE_V2(310)" in text and server.address in text and "0.1s" in text
            # while the late answer is still on its way, another request gets its own answer
            assert (await conn.request(request(1), 1.0)).ext_fields["who"] == "1"
            await asyncio.sleep(0.35)  # the late response arrives now: dropped, nothing breaks
            assert conn.connected and conn.pending == 0
            assert (await conn.request(request(2), 1.0)).ext_fields["who"] == "2"
            assert len(server.peers) == 1
            await conn.close()

    run(main())


def test_peer_closing_fails_pending_requests_and_the_next_request_reconnects():
    async def script(peer, cmd):
        if len(server.peers) == 1:
            if len(server.received) == 3:
                peer.close()  # three requests pending, no answer
        else:
            echo(peer, cmd)

    async def main():
        nonlocal server
        async with ScriptServer(script) as server:
            conn = RemotingConnection(server.address)
            results = await asyncio.gather(*(conn.request(request(i, 11), 5.0) for i in range(3)),
                                           return_exceptions=True)
            assert all(isinstance(r, ConnectionLostError) and isinstance(r, RetriableError) for r in results), results
            assert all("EOF" in str(r) and server.address in str(r) and "PULL_MESSAGE(11)" in str(r) for r in results)
            assert not conn.connected
            assert (await conn.request(request(9), 1.0)).ext_fields["echo"] == "9"
            assert len(server.peers) == 2 and conn.connected
            await conn.close()

    server = None
    run(main())


@pytest.mark.parametrize("garbage", [
    struct.pack(">I", 2) + b"xx",  # frame length below 4
    struct.pack(">II", 4 + 5, 5) + b"{nope",  # JSON header that is not JSON
    struct.pack(">II", 4 + 3, 0x05000003) + b"abc",  # unknown serialize type
], ids=["short-length", "bad-json", "bad-type"])
def test_malformed_frame_fails_pending_requests_without_hanging(garbage):
    async def script(peer, cmd):
        if len(server.peers) == 1:
            if len(server.received) == 2:
                peer.raw(garbage)
        else:
            echo(peer, cmd)

    async def main():
        nonlocal server
        async with ScriptServer(script) as server:
            conn = RemotingConnection(server.address)
            started = time.monotonic()
            results = await asyncio.gather(conn.request(request(1), 5.0), conn.request(request(2), 5.0),
                                           return_exceptions=True)
            assert time.monotonic() - started < 1.0  # failed at once, not by the 5 s timeout
            assert all(isinstance(r, ConnectionLostError) and "malformed frame" in str(r) for r in results), results
            assert (await conn.request(request(3), 1.0)).ext_fields["echo"] == "3"  # reconnects
            await conn.close()

    server = None
    run(main())


def dead_address() -> str:
    """A loopback address nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def test_connect_failure_is_retriable_and_names_the_address():
    dead = dead_address()

    async def main():
        conn = RemotingConnection(dead, connect_timeout=1.0)
        with pytest.raises(ConnectionLostError, match=dead):
            await conn.request(request(1), 1.0)

    run(main())


def _server_requests_script(answers: list):
    def script(peer, cmd):
        if cmd.is_response:
            answers.append(cmd)
            return
        if cmd.code == 999:  # the client's trigger: the broker sends requests of its own
            peer.send(RemotingCommand(40, opaque=500, flag=2, ext_fields={"consumerGroup": "G"}))  # oneway
            peer.send(RemotingCommand(307, opaque=501, ext_fields={"consumerGroup": "G", "clientId": "c"}))
            peer.send(RemotingCommand(39, opaque=502, body=b"half"))
            peer.send(cmd.response(0))
    return script


def test_server_requests_without_handler_are_answered_not_supported():
    answers: list[RemotingCommand] = []

    async def main():
        async with ScriptServer(_server_requests_script(answers)) as server:
            conn = RemotingConnection(server.address)
            await conn.request(request(1), 1.0)
            for _ in range(100):
                if len(answers) >= 2:
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)  # and nothing more comes (the oneway one gets no answer)
            await conn.close()
        assert sorted(a.opaque for a in answers) == [501, 502]
        assert all(a.code == 3 and a.is_response and "not supported" in a.remark for a in answers)

    run(main())


def test_server_requests_go_to_the_handler():
    answers: list[RemotingCommand] = []
    seen: list[tuple[str, int, dict]] = []

    async def handler(connection, cmd):
        seen.append((connection.address, cmd.code, dict(cmd.ext_fields)))
        if cmd.code == 307:
            return cmd.response(0, {"running": "yes"}, body=b"{}")
        if cmd.code == 39:
            raise ValueError("no transaction here")
        return None

    async def main():
        async with ScriptServer(_server_requests_script(answers)) as server:
            conn = RemotingConnection(server.address, handler=handler)
            await conn.request(request(1), 1.0)
            for _ in range(100):
                if len(answers) >= 2:
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)
            await conn.close()
            address = server.address
        assert sorted(code for _, code, _ in seen) == [39, 40, 307]
        assert all(a == address for a, _, _ in seen)
        assert (address, 40, {"consumerGroup": "G"}) in seen
        by_opaque = {a.opaque: a for a in answers}
        assert set(by_opaque) == {501, 502}  # nothing for the oneway NOTIFY_CONSUMER_IDS_CHANGED
        assert by_opaque[501].code == 0 and by_opaque[501].ext_fields == {"running": "yes"} and by_opaque[501].body == b"{}"
        assert by_opaque[502].code == 1 and "no transaction here" in by_opaque[502].remark

    run(main())


def test_oneway_sets_the_flag_and_waits_for_nothing():
    async def main():
        async with ScriptServer(lambda peer, cmd: None) as server:
            conn = RemotingConnection(server.address)
            await conn.oneway(RemotingCommand(15, ext_fields={"x": "1"}))
            for _ in range(100):
                if server.received:
                    break
                await asyncio.sleep(0.01)
            assert server.received[0].is_oneway and server.received[0].code == 15
            assert conn.pending == 0
            await conn.close()

    run(main())


def test_peer_that_stops_reading_times_requests_out_instead_of_blocking():
    async def main():
        hold = asyncio.Event()

        async def serve(reader, writer):  # accepts, never reads: the client's socket buffers fill up
            await hold.wait()
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        conn = RemotingConnection(f"127.0.0.1:{server.sockets[0].getsockname()[1]}")
        started = time.monotonic()
        results = await asyncio.gather(*(conn.request(RemotingCommand(310, body=b"x" * (8 << 20)), 0.3) for _ in range(4)),
                                       return_exceptions=True)
        assert all(isinstance(r, RemotingTimeoutError) for r in results), results
        with pytest.raises(RemotingTimeoutError, match="oneway request not written"):
            await conn.oneway(RemotingCommand(15, body=b"y" * (8 << 20)), 0.3)
        assert time.monotonic() - started < 2.0 and conn.pending == 0
        hold.set()
        await conn.close()
        server.close()

    run(main())


# -- ACL ------------------------------------------------------------------------------------------
def _expected_signature(fields: dict, body: bytes, secret: str) -> str:
    # AclUtils.combineRequestContent: values of the sorted ext fields but Signature, then the body
    content = "".join(v for k, v in sorted(fields.items()) if k != "Signature").encode("utf-8") + body
    return base64.b64encode(hmac.new(secret.encode(), content, hashlib.sha1).digest()).decode()


def test_acl_signature_matches_the_known_good_value():
    # SPEC.md §9.2 / golden/cpp_get_route_request.txt: values "" + "ALIYUN" + "T", empty secret
    fields = {"topic": "T", "OnsChannel": "ALIYUN", "AccessKey": ""}
    assert AclSigner.signature(fields, b"", "") == "PdRqtbKz888fZ6WjS2ejeTOGgG0="
    assert AclSigner.signature({**fields, "Signature": "ignored"}, b"", "") == "PdRqtbKz888fZ6WjS2ejeTOGgG0="
    assert AclSigner.signature(fields, b"body", "") != "PdRqtbKz888fZ6WjS2ejeTOGgG0="


def test_acl_signed_request_as_the_server_receives_it():
    async def main():
        async with ScriptServer(lambda peer, cmd: peer.send(cmd.response(0, JAVA_SEND_RESPONSE_FIELDS))) as server:
            signer = AclSigner("rocketmq2", "12345678", security_token="tok")
            async with RocketMQClient(signer=signer) as client:
                await client.send(server.address, "T", 0, b"hello", {"TAGS": "A"}, producer_group="PG")
            cmd = server.received[0]
        fields = cmd.ext_fields
        assert fields["AccessKey"] == "rocketmq2" and fields["SecurityToken"] == "tok"
        assert fields["Signature"] == _expected_signature(fields, b"hello", "12345678")
        assert fields["Signature"] != _expected_signature(fields, b"", "12345678")  # the body is signed

    run(main())


# -- request headers as the broker receives them --------------------------------------------------
def test_send_message_v2_fields_and_result():
    async def main():
        async with ScriptServer(lambda peer, cmd: peer.send(cmd.response(0, JAVA_SEND_RESPONSE_FIELDS))) as server:
            async with RocketMQClient() as client:
                result = await client.send(server.address, "T", 0, b"hello",
                                           {"UNIQ_KEY": "X", "WAIT": "true", "TAGS": "TagA"},
                                           producer_group="PG", born_timestamp=1700000000000)
            cmd = server.received[0]
        assert cmd.code == 310 and cmd.body == b"hello" and not cmd.is_oneway
        # SendMessageRequestHeaderV2: the Java client's fields; the properties keep the trailing
        # separator (as C++ and Java 5.x write them; every decoder accepts both)
        assert cmd.ext_fields == {**JAVA_SEND_FIELDS, "i": JAVA_SEND_FIELDS["i"] + "\x02"}
        assert result.status == "SEND_OK" and result.ok
        assert result.msg_id == "7F00000100002A9F0000000000000000"
        assert (result.queue_id, result.queue_offset, result.region_id, result.trace_on) == (0, 0, "DefaultRegion", True)

    run(main())


@pytest.mark.parametrize("code,status", [(10, "FLUSH_DISK_TIMEOUT"), (12, "FLUSH_SLAVE_TIMEOUT"),
                                         (11, "SLAVE_NOT_AVAILABLE")])
def test_send_statuses(code, status):
    fields = {"msgId": "A,B", "queueId": "3", "queueOffset": "41"}

    async def main():
        async with ScriptServer(lambda peer, cmd: peer.send(cmd.response(code, fields))) as server:
            async with RocketMQClient() as client:
                return await client.send(server.address, "T", 3, b"x")

    result = run(main())
    assert (result.status, result.ok, result.queue_id, result.queue_offset, result.msg_ids) == (status, False, 3, 41,
                                                                                                ["A", "B"])


def test_send_batch_request():
    async def main():
        async with ScriptServer(lambda peer, cmd: peer.send(cmd.response(0, {"msgId": "A,B", "queueId": "1",
                                                                             "queueOffset": "5"}))) as server:
            async with RocketMQClient() as client:
                result = await client.send_batch(server.address, "T", 1, [(b"one", {"KEYS": "k1"}), (b"two", {}, 7)],
                                                 {"WAIT": "true"}, producer_group="PG")
            return server.received[0], result

    cmd, result = run(main())
    assert cmd.code == 320
    assert cmd.ext_fields["m"] == "true" and cmd.ext_fields["b"] == "T" and cmd.ext_fields["e"] == "1"
    assert cmd.ext_fields["i"] == "WAIT\x01true\x02"
    assert decode_batch(cmd.body) == [(b"one", {"KEYS": "k1"}, 0), (b"two", {}, 7)]
    assert result.msg_ids == ["A", "B"] and result.queue_offset == 5


def test_pull_message_fields_and_result():
    def script(peer, cmd):
        peer.send(cmd.response(0, {"suggestWhichBrokerId": "0", "nextBeginOffset": "3", "minOffset": "0",
                                   "maxOffset": "3"}, body=JAVA_STORED, remark="FOUND"))

    async def main():
        async with ScriptServer(script) as server:
            async with RocketMQClient() as client:
                result = await client.pull(server.address, "G", "T", 0, 0, 32, suspend_timeout=15.0,
                                           sub_version=1700000000000)
            return server.received[0], result

    cmd, result = run(main())
    assert cmd.code == 11 and cmd.ext_fields == JAVA_PULL_FIELDS  # PullMessageRequestHeader, as Java sends it
    assert (result.status, result.next_begin_offset, result.min_offset, result.max_offset) == ("FOUND", 3, 0, 3)
    [m] = result.messages
    assert (m.topic, m.body, m.queue_id, m.queue_offset, m.tags) == ("T", b"hello", 1, 2, "TagA")


@pytest.mark.parametrize("code,status", [(19, "NO_NEW_MSG"), (20, "NO_MATCHED_MSG"), (21, "OFFSET_ILLEGAL")])
def test_pull_without_messages(code, status):
    def script(peer, cmd):
        peer.send(cmd.response(code, {"suggestWhichBrokerId": "0", "nextBeginOffset": "9", "minOffset": "2",
                                      "maxOffset": "9"}))

    async def main():
        async with ScriptServer(script) as server:
            async with RocketMQClient() as client:
                result = await client.pull(server.address, "G", "T", 2, 100, 8, commit_offset=5, subscription=None)
            return server.received[0], result

    cmd, result = run(main())
    assert cmd.ext_fields["sysFlag"] == "1" and cmd.ext_fields["commitOffset"] == "5" and "subscription" not in cmd.ext_fields
    assert (result.status, result.code, result.next_begin_offset, result.min_offset, result.messages) == (status, code, 9, 2,
                                                                                                          [])


def test_query_consumer_offset_fields_found_and_not_found():
    def script(peer, cmd):
        if cmd.ext_fields["topic"] == "known":
            peer.send(cmd.response(0, {"offset": "42"}))
        else:
            peer.send(cmd.response(22, remark="Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"))

    async def main():
        async with ScriptServer(script) as server:
            async with RocketMQClient() as client:
                found = await client.query_consumer_offset(server.address, "G", "known", 3)
                missing = await client.query_consumer_offset(server.address, "G", "other", 0)
            return server.received, found, missing

    received, found, missing = run(main())
    assert (found, missing) == (42, None)
    assert received[0].code == 14
    assert received[0].ext_fields == {"consumerGroup": "G", "topic": "known", "queueId": "3"}  # QueryConsumerOffsetRequestHeader


def test_offset_requests_and_admin_requests():
    def script(peer, cmd):
        if cmd.code in (29, 30, 31):
            peer.send(cmd.response(0, {"offset": str(cmd.code * 10)}))
        elif cmd.code == 15:
            peer.send(cmd.response(0))
        elif cmd.code == 17:
            peer.send(cmd.response(0))
        elif cmd.code == 21:
            peer.send(cmd.response(0, body=TOPIC_CONFIGS))
        elif cmd.code == 208:
            peer.send(cmd.response(0, body=CONSUME_STATS))
        elif cmd.code == 34:
            peer.send(cmd.response(0))

    async def main():
        async with ScriptServer(script) as server:
            a = server.address
            async with RocketMQClient() as client:
                got = [await client.search_offset(a, "T", 1, 1700000000000), await client.max_offset(a, "T", 1),
                       await client.min_offset(a, "T", 1)]
                await client.update_consumer_offset(a, "G", "T", 1, 77)
                await client.create_topic(a, "N", 2, 3)
                configs = await client.all_topic_configs(a)
                stats = await client.consume_stats(a, "G", "T")
                await client.heartbeat(a, "127.0.0.1@1", ["PG"], ["G", ConsumerData("G2", ["T"])])
            return server.received, got, configs, stats

    received, got, configs, stats = run(main())
    assert got == [290, 300, 310]
    by_code = {c.code: c for c in received}
    assert by_code[29].ext_fields == {"topic": "T", "queueId": "1", "timestamp": "1700000000000"}  # SearchOffsetRequestHeader
    assert by_code[30].ext_fields == {"topic": "T", "queueId": "1"}  # GetMaxOffsetRequestHeader
    assert by_code[31].ext_fields == {"topic": "T", "queueId": "1"}  # GetMinOffsetRequestHeader
    assert by_code[15].ext_fields == {"consumerGroup": "G", "topic": "T", "queueId": "1", "commitOffset": "77"}
    assert not by_code[15].is_oneway
    assert by_code[17].ext_fields == {"topic": "N", "defaultTopic": "TBW102", "readQueueNums": "2", "writeQueueNums": "3",
                                      "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}
    assert by_code[208].ext_fields == {"consumerGroup": "G", "topic": "T"}
    assert by_code[21].ext_fields == {}
    heartbeat = parse_fastjson(by_code[34].body)
    assert heartbeat["clientID"] == "127.0.0.1@1" and heartbeat["producerDataSet"] == [{"groupName": "PG"}]
    consumers = {c["groupName"]: c for c in heartbeat["consumerDataSet"]}
    assert consumers["G"]["consumeType"] == "CONSUME_ACTIVELY" and consumers["G"]["subscriptionDataSet"] == []
    [sub] = consumers["G2"]["subscriptionDataSet"]
    assert (sub["topic"], sub["subString"], sub["expressionType"]) == ("T", "*", "TAG")
    assert configs["T"].read_queue_nums == 4 and configs["T"].perm == 6
    assert stats.offset_table[MessageQueue("T", "broker-a", 0)].consumer_offset == 7


# -- name server ----------------------------------------------------------------------------------
def test_topic_route_over_the_wire_with_namesrv_failover():
    dead = dead_address()

    def script(peer, cmd):
        if cmd.ext_fields["topic"] == "T":
            peer.send(cmd.response(0, body=ROUTE_FASTJSON))
        else:
            peer.send(cmd.response(17, remark="No topic route info in name server for the topic: X\nSee "
                                              "http://rocketmq.apache.org/docs/faq/ for further details."))

    async def main():
        async with ScriptServer(script) as server:
            async with RocketMQClient([dead, server.address], connect_timeout=1.0) as client:
                route = await client.topic_route("T")
                with pytest.raises(TopicNotFoundError) as err:
                    await client.topic_route("X")
            assert server.received[0].code == 105 and server.received[0].ext_fields == {"topic": "T"}
            return route, err.value, server.address

    route, err, address = run(main())
    assert route.master_addr("broker-a") == "127.0.0.1:10911"
    assert [(q.broker_name, q.queue_id) for q in route.write_queues()] == [("broker-a", i) for i in range(4)]
    assert isinstance(err, ConnectError) and not isinstance(err, RetriableError)
    assert err.code == 17 and address in str(err) and "'X'" in str(err) and "No topic route info" in str(err)


def test_all_name_servers_down_is_retriable():
    dead = dead_address()

    async def main():
        async with RocketMQClient(f"{dead};{dead}", connect_timeout=1.0) as client:
            with pytest.raises(RetriableError, match="no name server answered"):
                await client.topic_route("T")

    run(main())


def test_topic_list():
    async def main():
        async with ScriptServer(lambda peer, cmd: peer.send(cmd.response(0, body=b'{"topicList":["b","a"]}'))) as server:
            async with RocketMQClient(server.address) as client:
                return await client.topic_list(), server.received[0].code

    assert run(main()) == (["a", "b"], 206)


# -- broker errors --------------------------------------------------------------------------------
@pytest.mark.parametrize("code,cls,retriable", [
    (2, RetriableBrokerError, True), (1, RetriableBrokerError, True), (14, RetriableBrokerError, True),
    (16, BrokerError, False), (13, BrokerError, False), (17, TopicNotFoundError, False),
])
def test_broker_error_codes_map_to_exceptions(code, cls, retriable):
    remark = "[REJECTREQUEST]system busy, start flow control for a while"

    async def main():
        async with ScriptServer(lambda peer, cmd: peer.send(cmd.response(code, {}, remark=remark))) as server:
            async with RocketMQClient() as client:
                with pytest.raises(BrokerError) as err:
                    await client.send(server.address, "T", 0, b"x")
                return err.value, server.address

    err, address = run(main())
    assert type(err) is cls and isinstance(err, RetriableError) == retriable and err.code == code
    assert "send to T[0]" in str(err) and address in str(err) and remark in str(err)


# -- bodies ---------------------------------------------------------------------------------------
def test_route_body_fastjson_and_standard_forms_parse_alike():
    a, b = parse_topic_route(ROUTE_FASTJSON, "T"), parse_topic_route(ROUTE_STANDARD, "T")
    assert a == b
    [broker] = a.broker_datas
    assert broker.broker_addrs == {0: "127.0.0.1:10911", 1: "127.0.0.1:10921"}
    assert (broker.cluster, broker.broker_name, broker.master_addr) == ("DefaultCluster", "broker-a", "127.0.0.1:10911")
    [q] = a.queue_datas
    assert (q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm, q.readable, q.writable) == (
        "broker-a", 4, 4, 6, True, True)
    assert len(a.read_queues()) == 4


def test_consume_stats_body_with_object_keys():
    stats = parse_consume_stats(CONSUME_STATS)
    mq = MessageQueue("T", "broker-a", 0)
    assert list(stats.offset_table) == [mq]
    w = stats.offset_table[mq]
    assert (w.broker_offset, w.consumer_offset, w.last_timestamp, w.lag) == (10, 7, 1700000000000, 3)
    assert stats.total_lag == 3 and stats.consume_tps == 0.0


def test_topic_config_body():
    [(name, cfg)] = parse_topic_configs(TOPIC_CONFIGS).items()
    assert (name, cfg.topic_name, cfg.write_queue_nums, cfg.topic_filter_type, cfg.order) == ("T", "T", 4, "SINGLE_TAG",
                                                                                            False)


def test_fastjson_parser_edges():
    assert parse_fastjson(b'{0:"a",-1:"b",x:[1,2.5,true,null],"s":"\\u0001\xc3\xa9"}') == {
        "0": "a", "-1": "b", "x": [1, 2.5, True, None], "s": "\x01\u00e9"}
    for bad in (b'{"a":1', b'{"a" 1}', b"[1,]", b'{"a":1} x', b"\xff"):
        with pytest.raises(ProtocolError):
            parse_fastjson(bad)


# -- sync facade ----------------------------------------------------------------------------------
def test_sync_facade_send_returns_futures_and_close_stops_the_thread():
    ready = threading.Event()
    box: dict = {}

    def serve():
        async def main():
            def script(peer, cmd):
                if cmd.code == 310:
                    n = cmd.body.decode()
                    peer.send(cmd.response(0, {"msgId": f"id-{n}", "queueId": cmd.ext_fields["e"], "queueOffset": n}))
                else:
                    peer.send(cmd.response(0, {"offset": "5"}))

            async with ScriptServer(script) as server:
                box["address"], box["stop"] = server.address, asyncio.Event()
                box["loop"] = asyncio.get_running_loop()
                ready.set()
                await box["stop"].wait()

        asyncio.run(main())

    server_thread = threading.Thread(target=serve, daemon=True)
    server_thread.start()
    assert ready.wait(5)
    try:
        client = SyncRocketMQClient(timeout=2.0)
        futures = [client.send(box["address"], "T", 2, str(i).encode()) for i in range(50)]
        assert all(isinstance(f, concurrent.futures.Future) for f in futures)
        results = [f.result(timeout=5) for f in futures]
        assert [(r.msg_id, r.queue_id, r.queue_offset) for r in results] == [(f"id-{i}", 2, i) for i in range(50)]
        assert client.max_offset(box["address"], "T", 2) == 5
        loop_thread = client._thread
        client.close()
        assert not loop_thread.is_alive()
        with pytest.raises(ConnectError):
            client.send(box["address"], "T", 2, b"x")
    finally:
        box["loop"].call_soon_threadsafe(box["stop"].set)
        server_thread.join(5)


def test_sync_client_methods_have_the_async_clients_signatures_and_docstrings():
    """Every request of the async client has a blocking twin whose parameters (names, kinds,
    defaults) are spelled out, not passed through ``*args, **kwargs``, and documented."""
    import inspect

    internal = {"invoke", "invoke_namesrv", "close"}  # transport and lifecycle, not requests
    requests = [name for name, fn in inspect.getmembers(RocketMQClient, inspect.iscoroutinefunction)
                if not name.startswith("_") and name not in internal]
    assert len(requests) >= 20
    for name in requests:
        sync = getattr(SyncRocketMQClient, name, None)
        assert sync is not None, f"SyncRocketMQClient has no {name}"
        want = list(inspect.signature(getattr(RocketMQClient, name)).parameters.values())
        got = list(inspect.signature(sync).parameters.values())
        assert all(p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in got), name
        assert [(p.name, p.kind, p.default) for p in got] == [(p.name, p.kind, p.default) for p in want], name
        assert (sync.__doc__ or "").strip(), f"SyncRocketMQClient.{name} has no docstring"
    init = inspect.signature(SyncRocketMQClient.__init__).parameters
    assert list(init) == list(inspect.signature(RocketMQClient.__init__).parameters)
