"""The embedded RocketMQ broker against hostile clients, over loopback (issue 20).

Each test runs the broker as a subprocess (``connect rocketmq-broker``, as the other fixtures do),
so its memory (VmRSS) and open descriptors are read from ``/proc``, abuses it one way, and then
checks three things: what it holds stays under the caps stated below, it still answers a normal
send and pull, and every message it acknowledged is there after a ``kill -9`` and a restart.

The brokers run with the defaults but short timeouts, so the tests are quick; the caps are:

- RSS growth over the warmed-up broker: ``RSS_CAP_MB`` while an abuse goes on, ``RSS_AFTER_MB`` once
  it is over (what the broker frees, allocator slack aside);
- open descriptors: ``FD_SLACK`` over the warmed-up broker once an abuse is over; under
  ``ulimit -n 128`` every descriptor of the process stays below 128;
- the broker-wide buffer budget here is ``BUDGET`` (``--max-buffered-bytes``); offsets.json under
  ``OFFSETS_CAP`` with the default ``--max-groups`` 1000.
"""

from __future__ import annotations

import os
import random
import resource
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest

from connectors.rocketmq.protocol import FrameDecoder, RemotingCommand, RequestCode, ResponseCode
from connectors.rocketmq.sync_client import SyncRocketMQClient
from worker.embedded import EmbeddedRocketMQ, free_port

pytestmark = pytest.mark.timeout(120)

MiB = 1 << 20
BUDGET = 16 * MiB
FRAME_TIMEOUT_MS, IDLE_TIMEOUT_MS = 3000, 3000
ARGS = ["--max-buffered-bytes", str(BUDGET), "--frame-timeout-ms", str(FRAME_TIMEOUT_MS),
        "--idle-timeout-ms", str(IDLE_TIMEOUT_MS)]
RSS_CAP_MB, RSS_AFTER_MB, FD_SLACK = 40, 28, 4
OFFSETS_CAP = 512 * 1024
RUNTIME_INFO = 28  # GET_BROKER_RUNTIME_INFO


# -- measuring the broker process -------------------------------------------------------------------
def rss_mb(broker: EmbeddedRocketMQ) -> float:
    for line in Path(f"/proc/{broker.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def open_fds(broker: EmbeddedRocketMQ) -> int:
    return len(os.listdir(f"/proc/{broker.proc.pid}/fd"))


class Wire:
    """A raw connection: frames written as given, answers read by opaque; a sender thread
    pipelines while the caller reads, so neither side waits for the other."""

    def __init__(self, port: int, rcvbuf: int | None = None) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.connect(("127.0.0.1", port))
        self.decoder = FrameDecoder(64 * MiB)

    def pipeline(self, cmds: list[RemotingCommand], *, read: bool = True, timeout: float = 30) -> dict[int, RemotingCommand]:
        for i, cmd in enumerate(cmds):
            cmd.opaque = i + 1
        data = b"".join(c.encode() for c in cmds)
        sender = threading.Thread(target=self._send_quietly, args=(data,), daemon=True)
        sender.start()
        if not read:
            return {}
        return self.answers(len(cmds), timeout)

    def _send_quietly(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError:
            pass  # closed by the broker: what the test checks

    def answers(self, count: int, timeout: float) -> dict[int, RemotingCommand]:
        out: dict[int, RemotingCommand] = {}
        self.sock.settimeout(timeout)
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline:
            data = self.sock.recv(1 << 20)
            if not data:
                break
            for cmd in self.decoder.feed(data):
                out[cmd.opaque] = cmd
        return out

    def closed_by_peer(self, timeout: float) -> bool:
        """True once the broker closed this connection (EOF or reset), reading what it sent."""
        self.sock.settimeout(0.2)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if not self.sock.recv(1 << 20):
                    return True
            except TimeoutError:
                continue
            except OSError:
                return True
        return False

    def close(self) -> None:
        self.sock.close()


def runtime_info(broker: EmbeddedRocketMQ) -> dict[str, int]:
    w = Wire(broker.port)
    try:
        (answer,) = w.pipeline([RemotingCommand(RUNTIME_INFO)], timeout=10).values()
    finally:
        w.close()
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    return {k: int(float(v)) for k, v in orjson.loads(answer.body)["table"].items()}


def pull_cmd(topic: str, queue: int, offset: int, most: int = 32, *, suspend_ms: int = 0,
             group: str = "abuse") -> RemotingCommand:
    return RemotingCommand(RequestCode.PULL_MESSAGE, ext_fields={
        "consumerGroup": group, "topic": topic, "queueId": str(queue), "queueOffset": str(offset),
        "maxMsgNums": str(most), "sysFlag": str(2 if suspend_ms else 0), "commitOffset": "0",
        "suspendTimeoutMillis": str(suspend_ms), "subVersion": "0"})


# -- the broker under test ------------------------------------------------------------------------
class Subject:
    """A broker subprocess with what it acknowledged (topic ``health``: queue, offset, body)."""

    def __init__(self, tmp_path: Path, *, args: list[str] = (), preexec_fn=None) -> None:
        self.log = tmp_path / "broker.log"
        self.broker = EmbeddedRocketMQ(tmp_path / "data", log_path=self.log, extra_args=[*ARGS, *args],
                                       preexec_fn=preexec_fn).start()
        self.acked: list[tuple[int, int, bytes]] = []
        self.healthy("warm-up")
        self.rss0, self.fds0 = rss_mb(self.broker), open_fds(self.broker)

    @property
    def port(self) -> int:
        return self.broker.port

    def healthy(self, tag: str) -> None:
        """A normal send and pull: the message sent is pulled back."""
        with SyncRocketMQClient(self.broker.namesrv, timeout=10) as c:
            if tag == "warm-up":
                c.create_topic(self.broker.namesrv, "health", 2, 2)
            queue = len(self.acked) % 2
            body = f"health-{tag}-{len(self.acked)}".encode()
            sent = c.send(self.broker.namesrv, "health", queue, body).result(10)
            assert sent.ok
            pulled = c.pull(self.broker.namesrv, "check", "health", queue, sent.queue_offset, 1)
            assert [m.body for m in pulled.messages] == [body]
            self.acked.append((queue, sent.queue_offset, body))

    def check_caps(self, what: str, rss_cap: float = RSS_AFTER_MB, conns: int = 0) -> None:
        """RSS growth at most ``rss_cap`` MB; open files at most ``FD_SLACK`` more than when
        warmed up, plus ``conns`` connections the test holds open."""
        rss, fds = rss_mb(self.broker), open_fds(self.broker)
        print(f"{what}: RSS {self.rss0:.1f} -> {rss:.1f} MB, open files {self.fds0} -> {fds}")
        assert rss - self.rss0 <= rss_cap, f"{what}: RSS grew {rss - self.rss0:.1f} MB (cap {rss_cap})"
        assert fds <= self.fds0 + FD_SLACK + conns, f"{what}: {fds} open files, {self.fds0} before"

    def restart_and_verify(self) -> None:
        """kill -9, start again: every acknowledged message is there."""
        self.broker.kill()
        self.broker.start()
        with SyncRocketMQClient(self.broker.namesrv, timeout=10) as c:
            for queue, offset, body in self.acked:
                pulled = c.pull(self.broker.namesrv, "check", "health", queue, offset, 1)
                assert [m.body for m in pulled.messages] == [body], f"acknowledged {body!r} lost"
        self.healthy("after-restart")

    def no_tracebacks(self) -> None:
        log = self.log.read_text()
        assert "Traceback" not in log, log[log.index("Traceback") - 300:][:3000]

    def stop(self) -> None:
        self.broker.stop()


@pytest.fixture
def subject(tmp_path):
    s = Subject(tmp_path)
    yield s
    s.stop()
    s.no_tracebacks()


def _wait(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s")
        time.sleep(0.1)


# -- the abuses -----------------------------------------------------------------------------------
def test_partial_frames_are_bounded_and_closed_after_the_frame_timeout(subject):
    """10 connections each begin a 15 MiB frame (under the 16 MiB frame limit) and stop 1 MiB
    short (before the fix: 10 x 14 MiB held, forever). The partial frames together hold at most
    the budget, and each connection is closed once its frame is older than the frame timeout."""
    conns = [socket.create_connection(("127.0.0.1", subject.port)) for _ in range(10)]

    def begin(s: socket.socket) -> None:
        s.settimeout(0.5)
        try:
            s.sendall((15 * MiB).to_bytes(4, "big") + b"\0" * (14 * MiB))
        except (TimeoutError, OSError):
            pass  # the broker stopped reading this one: the budget is spent

    senders = [threading.Thread(target=begin, args=(s,)) for s in conns]
    for t in senders:
        t.start()
    for t in senders:
        t.join()
    subject.check_caps("10 partial frames held", rss_cap=RSS_CAP_MB, conns=10)
    held = runtime_info(subject.broker)["bufferedBytesIn"]
    assert held <= BUDGET + 10 * 256 * 1024, held  # the budget, plus at most one read (256 KiB) per connection
    started = time.monotonic()
    for s in conns:
        w = Wire.__new__(Wire)
        w.sock = s
        assert w.closed_by_peer(FRAME_TIMEOUT_MS / 1000 + 5), "a partial frame was kept past the frame timeout"
        s.close()
    assert time.monotonic() - started < FRAME_TIMEOUT_MS / 1000 + 5
    assert _wait(lambda: runtime_info(subject.broker)["bufferedBytesIn"] == 0, 5, "partial frames freed")
    with socket.create_connection(("127.0.0.1", subject.port)) as s:  # beyond the frame limit: closed at once
        s.sendall((100 * MiB).to_bytes(4, "big") + b"\0" * 1024)
        s.settimeout(5)
        assert s.recv(10) == b""
    subject.check_caps("partial frames closed")
    subject.healthy("partial-frames")
    subject.restart_and_verify()


def test_a_client_that_never_reads_its_answers_stops_being_read_and_is_closed(subject):
    """150 pipelined 2 MiB pulls on a connection that never reads (before the fix: every answer
    built and buffered, about 300 MB). The broker produces an answer only while fewer than
    1 MiB are unsent, stops reading the connection, and closes it after the idle timeout."""
    with SyncRocketMQClient(subject.broker.namesrv, timeout=10) as c:
        c.create_topic(subject.broker.namesrv, "big", 1, 1)
        for i in range(8):
            assert c.send(subject.broker.namesrv, "big", 0, bytes([i]) * (256 * 1024)).result(10).ok
    w = Wire(subject.port, rcvbuf=4096)
    w.pipeline([pull_cmd("big", 0, 0) for _ in range(150)], read=False)
    time.sleep(1.5)
    subject.check_caps("150 pulls not read", rss_cap=RSS_CAP_MB)
    info = runtime_info(subject.broker)
    assert info["bufferedBytesOut"] <= 1 * MiB + 3 * MiB, info
    assert _wait(lambda: runtime_info(subject.broker)["connections"] == 1, IDLE_TIMEOUT_MS / 1000 + 5,
                 "the connection that does not read closed")
    w.close()
    subject.check_caps("non-reading client closed")
    subject.healthy("never-reads")
    subject.restart_and_verify()


def test_3000_short_long_polls_leave_no_waiter_behind(subject):
    """3,000 long polls of 200 ms on an empty queue, 1,000 pipelined on each of 3 connections
    (before the fix: every timed-out waiter stayed in the queue's list)."""
    with SyncRocketMQClient(subject.broker.namesrv, timeout=10) as c:
        c.create_topic(subject.broker.namesrv, "quiet", 1, 1)
    wires = [Wire(subject.port) for _ in range(3)]
    sent = [w.pipeline([pull_cmd("quiet", 0, 0, suspend_ms=200) for _ in range(1000)], read=False) for w in wires]
    assert sent == [{}, {}, {}]
    for w in wires:
        answers = w.answers(1000, 20)
        assert len(answers) == 1000 and {a.code for a in answers.values()} == {ResponseCode.PULL_NOT_FOUND}
        w.close()
    info = runtime_info(subject.broker)
    assert info["longPollWaiters"] == 0 and info["pendingAnswers"] == 0, info
    subject.check_caps("3,000 long polls")
    subject.healthy("long-polls")
    subject.restart_and_verify()


def test_offsets_only_for_existing_topics_from_bounded_groups(subject):
    """10,000 distinct 255-character groups, 20 groups of 1 MiB, unknown topics and queues
    (before the fix: every one kept, a 20 MB offsets.json rewritten at each flush)."""
    with SyncRocketMQClient(subject.broker.namesrv, timeout=10) as c:
        c.create_topic(subject.broker.namesrv, "offs", 2, 2)

    def update(group: str, topic: str = "offs", queue: int = 0, offset: int = 7) -> RemotingCommand:
        return RemotingCommand(RequestCode.UPDATE_CONSUMER_OFFSET, ext_fields={
            "consumerGroup": group, "topic": topic, "queueId": str(queue), "commitOffset": str(offset)})

    groups = [f"g{i:05d}" + "x" * 249 for i in range(10_000)]
    # offsets only for existing groups (as 5.x): the groups are created first, under --max-groups
    w = Wire(subject.port)
    created = w.pipeline([RemotingCommand(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                                          body=orjson.dumps({"groupName": g})) for g in [*groups, "fine"]], timeout=60)
    w.close()
    codes = [created[i + 1].code for i in range(len(groups) + 1)]
    assert codes[:1000] == [ResponseCode.SUCCESS] * 1000 and ResponseCode.SUCCESS not in codes[1000:]
    with SyncRocketMQClient(subject.broker.namesrv, timeout=10) as c:
        c.delete_subscription_group(subject.broker.namesrv, groups[999])
        c.create_subscription_group(subject.broker.namesrv, {"groupName": "fine"})
    cmds = [update(g, offset=i) for i, g in enumerate(groups)]
    cmds += [update(f"{i}" + "y" * MiB) for i in range(20)]
    cmds += [update("fine", topic=f"nothere{i}") for i in range(100)]
    cmds += [update("fine", queue=q) for q in (2, -1, 1 << 40)]
    cmds += [update("evil\n"), update("a/../b"), update("")]
    w = Wire(subject.port)
    answers = w.pipeline(cmds, timeout=60)
    w.close()
    assert len(answers) == len(cmds)
    codes = [answers[i + 1].code for i in range(len(cmds))]
    assert codes[:999] == [ResponseCode.SUCCESS] * 999  # --max-groups 1000, one of them "fine"
    assert ResponseCode.SUCCESS not in codes[999:], "a group past the cap, a bad name or an unknown queue was kept"
    assert answers[10_021].code == ResponseCode.TOPIC_NOT_EXIST
    time.sleep(1.0)  # a flush tick writes offsets.json
    size = (subject.broker.data_dir / "offsets.json").stat().st_size
    print(f"offsets.json: {size} bytes")
    assert size <= OFFSETS_CAP
    subject.check_caps("10,000 offset groups", rss_cap=RSS_CAP_MB)
    subject.healthy("offsets")
    subject.restart_and_verify()
    with SyncRocketMQClient(subject.broker.namesrv, timeout=10) as c:
        for i in random.Random(1).sample(range(999), 20):  # acknowledged offsets survive too
            assert c.query_consumer_offset(subject.broker.namesrv, groups[i], "offs", 0) == i


def _nofile_128() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))


def test_many_topics_and_connections_under_ulimit_n_128(tmp_path):
    """40 topics x 8 queues and 60 connections under ``ulimit -n 128`` (before the fix: one open
    file per queue, "Too many open files" and topics.json not saved). Queue files go through a
    cache of 16 descriptors and connections are capped at 32; a topics.json that cannot be
    written fails the creation, visibly, and leaves no topic in memory only."""
    subject = Subject(tmp_path, preexec_fn=_nofile_128)
    try:
        with SyncRocketMQClient(subject.broker.namesrv, timeout=10) as c:
            for t in range(40):
                c.create_topic(subject.broker.namesrv, f"t{t}", 8, 8)
            sent = [(t, q, c.send(subject.broker.namesrv, f"t{t}", q, f"m{t}.{q}".encode())) for t in range(40) for q in range(8)]
            assert all(f.result(10).ok for _t, _q, f in sent)
        extra = [socket.create_connection(("127.0.0.1", subject.port)) for _ in range(60)]
        time.sleep(0.5)
        fds = open_fds(subject.broker)
        for s in extra:
            s.close()
        info = _wait(lambda: (i := runtime_info(subject.broker))["connections"] == 1 and i, 5, "connections closed")
        print("under ulimit -n 128:", {k: info[k] for k in ("refusedConnections", "openQueueFiles")}, "fds", fds)
        assert info["openQueueFiles"] <= 16 and info["maxOpenQueueFiles"] == 16
        assert info["refusedConnections"] == 60 - 32 and info["maxConnections"] == 32
        assert fds < 100
        blocker = subject.broker.data_dir / ".topics.json.tmp"
        blocker.mkdir()  # topics.json cannot be rewritten now (even as root)
        with SyncRocketMQClient(subject.broker.namesrv, timeout=10) as c:
            with pytest.raises(Exception, match="not saved"):
                c.create_topic(subject.broker.namesrv, "unsaved", 1, 1)
            assert "unsaved" not in c.topic_list()
            blocker.rmdir()
            c.create_topic(subject.broker.namesrv, "saved", 1, 1)
        subject.healthy("ulimit")
        subject.restart_and_verify()
        with SyncRocketMQClient(subject.broker.namesrv, timeout=10) as c:
            assert {f"t{t}" for t in range(40)} | {"saved"} <= set(c.topic_list())
            for t in range(40):
                for q in range(8):
                    pulled = c.pull(subject.broker.namesrv, "check", f"t{t}", q, 0, 10)
                    assert [m.body for m in pulled.messages] == [f"m{t}.{q}".encode()]
        assert open_fds(subject.broker) < 100
    finally:
        subject.stop()
    subject.no_tracebacks()


def test_a_second_broker_on_the_same_data_dir_stops_naming_the_holder(subject, tmp_path):
    """Before the fix both started and both wrote at commit-log offset 0."""
    data = subject.broker.data_dir
    second = subprocess.run([sys.executable, "-m", "worker.cli", "rocketmq-broker", "--port", str(free_port()),
                             "--data-dir", str(data)], capture_output=True, text=True, timeout=30)
    assert second.returncode == 2, second
    assert "in use by another broker" in second.stderr and f"pid {subject.broker.proc.pid}" in second.stderr, second.stderr
    subject.healthy("second-broker")
    assert oct(data.stat().st_mode & 0o777) == "0o700"
    for path in [data / "commitlog", data / "topics.json", data / "lock", data / "consumequeue" / "health" / "0"]:
        assert oct(path.stat().st_mode & 0o777) == "0o600", path
    assert oct((data / "consumequeue" / "health").stat().st_mode & 0o777) == "0o700"
    trap = tmp_path / "trap"
    trap.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    (trap / "lock").symlink_to(victim)
    refused = subprocess.run([sys.executable, "-m", "worker.cli", "rocketmq-broker", "--port", str(free_port()),
                              "--data-dir", str(trap)], capture_output=True, text=True, timeout=30)
    assert refused.returncode == 2 and "symlink" in refused.stderr, refused
    assert victim.read_text() == "keep me"
    subject.restart_and_verify()


def test_malformed_headers_and_fuzzed_requests_are_answered_or_closed_without_a_traceback(subject):
    """Decode errors (an opaque beyond 64 bits, a code beyond 32, a header that is not an object,
    lengths beyond the frame) close the connection; requests of every code with fuzzed fields
    and bodies are answered. The broker's log holds no traceback (checked by the fixture)."""
    import struct

    def frame(header: bytes, body: bytes = b"", kind: int = 0) -> bytes:
        return struct.pack(">II", 4 + len(header) + len(body), (kind << 24) | len(header)) + header + body

    bad = [frame(b'{"code":10,"opaque":"' + b"9" * 25 + b'","flag":0}'),  # opaque above 64 bits
           frame(b'{"code":10,"opaque":18446744073709551615}'), frame(b'{"code":1099511627776,"opaque":1}'),
           frame(b'{"code":10,"opaque":1,"flag":4294967296}'), frame(b"[1,2]"), frame(b'{"code":10,"extFields":[1]}'),
           frame(b'{"code":10,"extFields":{"a":{"b":1}}}'), frame(b"\xff\xfe"), frame(b"{}", kind=7),
           struct.pack(">II", 12, 100) + b"x" * 8, struct.pack(">I", 2), frame(b"\x00\x0a\x00", kind=1),
           frame(struct.pack(">hBhiii", 10, 0, 0, 1, 0, 1 << 30), kind=1)]
    for data in bad:
        with socket.create_connection(("127.0.0.1", subject.port), timeout=5) as s:
            s.sendall(data)
            decoder = FrameDecoder()
            answers = []
            while True:
                try:
                    chunk = s.recv(65536)
                except OSError:
                    break
                if not chunk:
                    break
                answers += decoder.feed(chunk)
                if answers:
                    break
            assert all(a.is_response for a in answers)
    rnd = random.Random(20)
    values = ["", "0", "-1", "1" * 30, "x" * 300, "evil\n", "%RETRY%", "TBW102", "health", "true", "9" * 5000, "\u00e9"]
    bodies = [b"", b"{}", b"[]", b"null", b"{\"clientID\": 5}", b"{\"consumerDataSet\": [1]}", b"\xff" * 40,
              b'{"groupName": {"a": 1}}', b'{"consumerGroup": "g", "clientId": "c", "mqSet": [{"topic": 1, "queueId": "x"}]}',
              b'{"clientID": "c", "consumerDataSet": [{"groupName": "g", "subscriptionDataSet": [5]}]}']
    names = ["topic", "consumerGroup", "queueId", "queueOffset", "maxMsgNums", "sysFlag", "commitOffset", "offset",
             "group", "timestamp", "readQueueNums", "writeQueueNums", "perm", "clientID", "groupName", "a", "b", "e",
             "suspendTimeoutMillis", "subscription", "batch", "m", "delayLevel", "maxReconsumeTimes"]
    codes = [10, 11, 14, 15, 17, 21, 29, 30, 31, 32, 33, 34, 35, 36, 38, 41, 42, 105, 106, 101, 200, 201, 202, 206,
             207, 208, 215, 216, 310, 320, 351, RUNTIME_INFO, 9999]
    cmds = []
    for code in codes:
        for _ in range(15):
            fields = {rnd.choice(names): rnd.choice(values) for _ in range(rnd.randint(0, 8))}
            cmds.append(RemotingCommand(code, ext_fields=fields, body=rnd.choice(bodies),
                                        serialize_type=rnd.choice((0, 1))))
    w = Wire(subject.port)
    answers = w.pipeline(cmds, timeout=30)
    w.close()
    assert len(answers) == len(cmds), f"{len(cmds) - len(answers)} request(s) neither answered nor refused"
    subject.healthy("fuzz")
    subject.no_tracebacks()
    subject.restart_and_verify()
