"""Pulsar connector units: the record <-> message mapping, config checks, and the admin REST
exchange used for topics.regex (contract test: pulsar-lite has no admin REST API, so a local HTTP
server answers the exact path Pulsar's admin API serves, GET /admin/v2/namespaces/{tenant}/{ns}/topics)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from connect.errors import ConnectError, RetriableError
from connectors.pulsar.mapping import BASE64_KEY, BASE64_PROPERTIES, ORDERING_KEY_HEADER, message_fields
from connectors.pulsar.sink import PulsarSinkConnector
from connectors.pulsar.source import (
    PulsarSourceConnector,
    _decode_marked,
    full_topic_name,
    list_namespace_topics,
    split_partition,
)


def test_utf8_keys_and_headers_travel_as_text_and_bytes_are_marked_and_come_back_identical():
    headers = [("trace", b"abc"), ("bin", b"\xff\x00\x01"), ("none", None), (ORDERING_KEY_HEADER, b"ord")]
    key, props, ordering = message_fields(b"\xfe\xed", headers)
    assert props[BASE64_KEY] == "true" and props[BASE64_PROPERTIES] == "bin"
    assert props["trace"] == "abc" and props["none"] == "" and ORDERING_KEY_HEADER not in props
    assert ordering == b"ord"
    back_key, back_props = _decode_marked(key, props)
    assert back_key == b"\xfe\xed"
    assert back_props == {"trace": "abc", "bin": b"\xff\x00\x01", "none": ""}
    assert message_fields(b"plain", None) == ("plain", {}, None)
    assert message_fields(None, [("a", "text")]) == (None, {"a": "text"}, None)


def test_topic_names():
    assert full_topic_name("x") == "persistent://public/default/x"
    assert full_topic_name("t/ns/x") == "persistent://t/ns/x"
    assert full_topic_name("non-persistent://t/ns/x") == "non-persistent://t/ns/x"
    assert split_partition("persistent://t/ns/x-partition-12") == ("persistent://t/ns/x", 12)
    assert split_partition("persistent://t/ns/x") == ("persistent://t/ns/x", -1)


@pytest.mark.parametrize("config, key", [
    ({"service.url": "http://wrong:6650", "topics": "a"}, "service.url"),
    ({"service.url": "pulsar://h:1", "topics": "a", "auth.plugin": "token"}, "auth.token"),
    ({"service.url": "pulsar://h:1", "topics": "a", "auth.plugin": "tls"}, "auth.tls.cert.file"),
    ({"service.url": "pulsar://h:1", "topics.regex": "persistent://public/default/a.*"}, "admin.url"),
    ({"service.url": "pulsar://h:1"}, "topics"),
    ({"service.url": "pulsar://h:1", "topics": "a", "start.position": "timestamp"}, "start.timestamp.ms"),
])
def test_source_config_errors_name_the_key(config, key):
    assert key in [issue.key for issue in PulsarSourceConnector.validate(config)]


@pytest.mark.parametrize("extra, key, words", [
    ({"value.schema.type": "AVRO4"}, "value.schema.type", "not a Pulsar schema type"),
    ({"value.schema.type": "avro"}, "value.schema.definition", "needs the schema definition"),
])
def test_sink_declared_schema_errors_name_the_key(extra, key, words):
    issues = PulsarSinkConnector.validate({"service.url": "pulsar://h:1", **extra})
    assert [(i.key, words in i.message) for i in issues] == [(key, True)]
    assert not PulsarSinkConnector.validate({"service.url": "pulsar://h:1", "value.schema.type": "avro",
                                             "value.schema.definition": "{}"})


def test_sink_chunking_needs_batching_off_and_token_is_secret():
    issues = PulsarSinkConnector.validate({"service.url": "pulsar://h:1", "chunking.enabled": "true"})
    assert [i.key for i in issues] == ["chunking.enabled"]
    assert not PulsarSinkConnector.validate({"service.url": "pulsar://h:1", "chunking.enabled": "true",
                                             "batching.enabled": "false"})
    assert PulsarSinkConnector.config_def().is_secret("auth.token")


class _Admin(BaseHTTPRequestHandler):
    answers: dict = {}
    seen: list = []

    def do_GET(self):  # noqa: N802 - http.server's name
        self.seen.append((self.path, self.headers.get("Authorization")))
        status, body = self.answers.get(self.path, (404, {"reason": "Namespace does not exist"}))
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def admin():
    server = HTTPServer(("127.0.0.1", 0), _Admin)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Admin.seen.clear()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_namespace_listing_uses_pulsars_admin_path_and_token(admin):
    _Admin.answers = {"/admin/v2/namespaces/acme/orders/topics": (200, [
        "persistent://acme/orders/a-partition-0", "persistent://acme/orders/a-partition-1", "persistent://acme/orders/b"])}
    names = list_namespace_topics(admin, "acme/orders", {"auth.plugin": "token", "auth.token": "tok"})
    assert names == ["persistent://acme/orders/a-partition-0", "persistent://acme/orders/a-partition-1",
                     "persistent://acme/orders/b"]
    assert _Admin.seen == [("/admin/v2/namespaces/acme/orders/topics", "Bearer tok")]


def test_namespace_listing_errors_say_what_was_wrong(admin):
    _Admin.answers = {"/admin/v2/namespaces/acme/odd/topics": (200, {"not": "a list"}),
                      "/admin/v2/namespaces/acme/busy/topics": (503, {"reason": "busy"})}
    with pytest.raises(ConnectError, match="HTTP 404.*topics.namespace") as missing:
        list_namespace_topics(admin, "acme/missing", {})
    assert not isinstance(missing.value, RetriableError)  # a wrong namespace does not fix itself
    with pytest.raises(RetriableError, match="not a JSON list"):
        list_namespace_topics(admin, "acme/odd", {})
    with pytest.raises(RetriableError, match="HTTP 503"):
        list_namespace_topics(admin, "acme/busy", {})


@pytest.mark.parametrize("name", ["pulsar-to-pulsar", "kafka-to-pulsar", "pulsar-to-kafka", "demo-mirror",
                                  "demo-kafka-to-pulsar", "rocketmq-to-rocketmq", "kafka-to-rocketmq",
                                  "rocketmq-to-kafka"])
def test_example_configs_in_conf_are_valid(name):
    from pathlib import Path

    from connect.errors import ConfigError
    from worker.pipeline import load_pipeline_file

    path = Path(__file__).resolve().parents[2] / "conf" / f"{name}.json"
    try:
        load_pipeline_file(path)
    except ConfigError as exc:  # pragma: no cover - the failure message is the point
        pytest.fail(f"{path.name}: {exc}")


class _Id:
    def __init__(self, entry: int, batch: int) -> None:
        self.pos = (7, entry, batch)

    def ledger_id(self):
        return self.pos[0]

    def entry_id(self):
        return self.pos[1]

    def batch_index(self):
        return self.pos[2]


class _Msg:
    """The accessors of the extension's message the source calls."""

    def __init__(self, entry: int, batch: int) -> None:
        self.id = _Id(entry, batch)

    def message_id(self):
        return self.id

    def data(self):
        return f"m-{self.id.pos[1]}-{self.id.pos[2]}".encode()

    def properties(self):
        return {}

    def partition_key(self):
        return ""

    def ordering_key(self):
        return ""

    def int_schema_version(self):
        return -1

    def has_null_value(self):
        return False

    def event_timestamp(self):
        return 0

    def publish_timestamp(self):
        return 1


class _Reader:
    """Stands in for a reader whose subscription went wrong after a reconnection (the misbehaviour
    tests/integration/test_pulsar_mirror.py provokes over the wire by restarting the broker)."""

    def __init__(self, script: list, available: bool = False, connected: bool = True) -> None:
        self.script, self.available, self.closed, self.connected = list(script), available, False, connected
        self._reader = self

    def is_connected(self):
        return self.connected

    def read_next(self, timeout_ms):
        import pulsar

        if not self.script:
            raise pulsar.Timeout("nothing buffered")
        return self.script.pop(0)

    def has_message_available_async(self, callback):
        import pulsar

        self.asked = getattr(self, "asked", 0) + 1
        callback(pulsar.Result.Ok, self.available)  # answered at once (a broker may take longer)

    def close(self):
        self.closed = True


def _task_with(reader, stall_ms: int = 0):
    import pulsar

    from connectors.pulsar.source import PulsarSourceTask, _Partition

    class Ctx:
        poll_limit = 1_000_000  # the runner's budget: none here

        def time_left(self):
            return 0.0

    task = PulsarSourceTask()
    task._pulsar, task.context, task._schemas = pulsar, Ctx(), None
    task._batch, task._timeout_ms, task._stall_s, task._next = 100, 0, stall_ms / 1000, 0
    task.duplicates_dropped = task.readers_reopened = 0
    sp = {"topic": "persistent://public/default/t", "partition": 0}
    task._readers = [_Partition(reader, sp, 0, sp["topic"], None, (pulsar.MessageId.earliest, False))]
    opened = []
    task._client = None
    task._open_async = lambda name, start, inclusive, done: (opened.append((name, start, inclusive)),
                                                              done(pulsar.Result.Ok, _Reader([])))
    return task, opened


def test_source_drops_messages_it_delivered_already_and_reopens_the_reader_after_the_last():
    script = [_Msg(1, b) for b in range(3)] + [_Msg(1, 1), _Msg(1, 2), _Msg(2, -1)]  # a stale re-subscription
    task, opened = _task_with(_Reader(script))
    first = task.poll()
    assert [r.source_offset for r in first] == [{"ledger": 7, "entry": 1, "batch": b} for b in (0, 1, 2)] + \
        [{"ledger": 7, "entry": 2, "batch": -1}]
    assert task.duplicates_dropped == 2 and task.readers_reopened == 1
    (name, start, inclusive), = opened
    assert name == "persistent://public/default/t-partition-0" and not inclusive
    assert (start.ledger_id(), start.entry_id(), start.batch_index()) == (7, 2, -1)  # just after the last delivered


def test_source_reopens_a_reader_that_finds_nothing_while_the_broker_has_more():
    import time

    stalled = _Reader([_Msg(1, -1)], available=True)
    task, opened = _task_with(stalled, stall_ms=50)
    assert len(task.poll()) == 1
    assert task.poll() == [] and not opened  # idle from now on
    time.sleep(0.06)
    assert task.poll() == [] and stalled.asked == 1 and not opened  # asked; the answer is looked at next poll
    assert task.poll() == [] and stalled.closed and len(opened) == 1
    assert task.readers_reopened == 1
    idle = _Reader([], available=False)  # at the end of its partition: left alone
    task, opened = _task_with(idle, stall_ms=50)
    for _ in range(3):
        task.poll()
        time.sleep(0.06)
    assert idle.asked >= 1 and not opened and not idle.closed
    gave_up = _Reader([], connected=False)  # stopped reconnecting: opened again without asking the broker
    task, opened = _task_with(gave_up, stall_ms=50)
    task.poll()
    time.sleep(0.06)
    task.poll()
    assert len(opened) == 1 and gave_up.closed and not getattr(gave_up, "asked", 0)


def test_a_reader_that_cannot_be_opened_again_stays_until_it_can():
    import time

    import pulsar

    stalled = _Reader([_Msg(1, -1)], connected=False)
    task, opened = _task_with(stalled, stall_ms=50)

    def refuse(name, start, inclusive, done):
        opened.append(name)
        done(pulsar.Result.Timeout, None)  # what a lookup answers while the broker is away

    task._open_async = refuse
    task.poll()
    task.poll()
    time.sleep(0.06)
    task.poll()
    assert opened and not stalled.closed and task._readers[0].reader is stalled  # kept, tried again later


def test_a_read_failing_midway_keeps_what_was_read_and_reopens_after_it():
    """The reader has handed over every message it read: those go out, and the next reader starts
    after the last one delivered (before: the poll failed, the records read were dropped and the
    position had moved past them, a silent gap)."""
    import pulsar

    class _Failing(_Reader):
        def read_next(self, timeout_ms):
            if len(self.script) == 1:
                raise pulsar.ConnectError("connection closed")
            return super().read_next(timeout_ms)

    failing = _Failing([_Msg(1, b) for b in range(3)] + [_Msg(2, -1)])
    task, opened = _task_with(failing)
    got = task.poll()
    assert [r.source_offset["batch"] for r in got] == [0, 1, 2]
    (_, start, inclusive), = opened
    assert (start.ledger_id(), start.entry_id(), start.batch_index()) == (7, 1, 2) and not inclusive
    assert failing.closed and task.readers_reopened == 1
    nothing = _Failing([_Msg(1, -1)])  # failed before reading anything: the poll fails (retried), the reader is replaced
    task, opened = _task_with(nothing)
    with pytest.raises(RetriableError, match="reading persistent://public/default/t-partition-0 failed"):
        task.poll()
    assert len(opened) == 1 and nothing.closed


def test_topic_readers_check_with_the_source_guards_each_message_once_and_stalled_readers_opened_again():
    """TopicReaders (what `make demo-pulsar` checks the target with) reads through the source's
    guards: a message delivered again is dropped and its reader opened again after the last one
    delivered; a reader that finds nothing while the broker has more is opened again too."""
    import time

    import pulsar

    from connectors.pulsar.guards import TopicReaders

    again = _Reader([_Msg(1, -1), _Msg(2, -1), _Msg(1, -1), _Msg(3, -1)])  # a stale re-subscription
    stalled = _Reader([_Msg(1, -1)], available=True)

    class Client:
        def create_reader(self, name, start, receiver_queue_size):
            return {"a": again, "b": stalled}[name]

    readers = TopicReaders(Client(), ["a", "b"], stall_ms=50)
    opened = []
    readers._open_async = lambda name, start, inclusive, done: (opened.append((name, start.entry_id(), inclusive)),
                                                                done(pulsar.Result.Ok, _Reader([])))
    got = readers.read(wait_ms=0)
    assert [(topic, m.id.pos[1]) for topic, m in got] == [("a", 1), ("a", 2), ("a", 3), ("b", 1)]
    assert readers.duplicates_dropped == 1 and opened == [("a", 3, False)] and again.closed
    assert readers.read(wait_ms=0) == []  # b idle from now on
    time.sleep(0.06)
    readers.read(wait_ms=0)  # asked; the answer is looked at next time
    assert readers.read(wait_ms=0) == [] and opened[1:] == [("b", 1, False)] and stalled.closed
    assert readers.readers_reopened == 2


def test_source_holds_a_message_whose_index_look_up_failed_and_asks_again_before_reading_on():
    from connect.errors import RetriableError
    from connectors.pulsar.gaps import IndexCheck

    answers: list = [RetriableError("admin away"), RetriableError("admin away"), 41, 41]

    class Check(IndexCheck):
        def index(self, entry, pos):
            answer = answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer

    task, _ = _task_with(_Reader([_Msg(1, -1), _Msg(2, -1)]))
    task._index = Check("http://admin", {}, "fail")
    assert task.poll() == []  # held: where it stands is not known
    with pytest.raises(RetriableError, match="admin away"):
        task.poll()  # asked again first: still away, so the runner retries with backoff
    got = task.poll()
    assert [r.source_offset for r in got] == [{"ledger": 7, "entry": 1, "batch": -1, "index": 41},
                                              {"ledger": 7, "entry": 2, "batch": -1, "index": 42}]
    assert answers == [] and task.take_gaps() == []
