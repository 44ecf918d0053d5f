"""Per-partition lag of the Pulsar source, from the admin API's internal stats.

On Apache Pulsar (``CONNECT_TEST_PULSAR=apache``) the source asks the real admin API. pulsar-lite
has no admin REST API, so a local HTTP server plays it on the exact path Pulsar serves
(``GET /admin/v2/persistent/{tenant}/{namespace}/{topic}/internalStats``) and answers with the
managed-ledger fields the source reads (``lastConfirmedEntry``, ``ledgers``), filled from the real
broker: the message id pulsar-lite gave the last message produced. The source reads the messages
from the real pulsar-lite broker."""

from __future__ import annotations

import http.server
import threading
import time

import orjson
import pulsar_util
import pytest

from connect.records import partition_key
from connect.source import OffsetStorageReader, SourceTaskContext
from connectors.pulsar.source import PulsarSourceConnector, entries_behind
from worker.embedded import ApachePulsar

pytestmark = pytest.mark.timeout(120)


class FakeAdmin(http.server.ThreadingHTTPServer):
    def __init__(self, stats: dict[str, dict]):
        self.stats = stats
        self.paths: list[str] = []
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        self.server.paths.append(self.path)
        body = self.server.stats.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(orjson.dumps(body if body is not None else {"reason": "Topic not found"}))

    def log_message(self, *args):
        pass


def test_pulsar_source_reports_entries_behind_per_partition(pulsar_pair, unique):
    broker = pulsar_pair[0]
    topic = f"persistent://public/default/lag-{unique.rsplit('-', 1)[1]}"
    c = pulsar_util.client(broker)
    producer = c.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"value-{i}".encode()) for i in range(100)]
    producer.close()
    c.close()
    last = ids[-1]
    path = f"/admin/v2/{topic.replace('://', '/')}/internalStats"
    admin = None
    if isinstance(broker, ApachePulsar):  # the real admin API's internal stats
        admin_url = broker.admin_url
    else:
        admin = FakeAdmin({path: {"entriesAddedCounter": 100, "numberOfEntries": 100,
                                  "lastConfirmedEntry": f"{last.ledger_id()}:{last.entry_id()}",
                                  "ledgers": [{"ledgerId": last.ledger_id(), "entries": 0, "size": 0}]}})
        threading.Thread(target=admin.serve_forever, daemon=True).start()
        admin_url = admin.url
    config = {"service.url": broker.service_url, "topics": topic, "admin.url": admin_url, "poll.batch.size": "30"}
    connector = PulsarSourceConnector()
    connector.start(config)
    [task_config] = connector.task_configs(1)
    connector.stop()
    task = PulsarSourceConnector.task_class()()
    task.context = SourceTaskContext("lag", task_config, OffsetStorageReader(None))
    task.start(task_config, task.context)
    try:
        assert task.lag_by_partition() == {partition_key({"topic": topic, "partition": -1}): 100}  # nothing read yet
        got = []
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            task.context.deadline = time.monotonic() + 1
            got = list(task.poll() or [])
        assert 0 < len(got) <= 30
        assert task.lag_by_partition() == {partition_key({"topic": topic, "partition": -1}): 100 - len(got)}
        while len(got) < 100 and time.monotonic() < deadline:
            task.context.deadline = time.monotonic() + 1
            got += task.poll() or []
        assert len(got) == 100 and task.lag() == 0
        assert admin is None or (admin.paths and all(p == path for p in admin.paths))
    finally:
        task.stop()
        if admin is not None:
            admin.shutdown()


def test_entries_behind_spans_ledgers():
    stats = {"lastConfirmedEntry": "7:4", "ledgers": [{"ledgerId": 3, "entries": 10}, {"ledgerId": 5, "entries": 20},
                                                       {"ledgerId": 7, "entries": 0}]}
    assert entries_behind(stats, None) == 10 + 20 + 5
    assert entries_behind(stats, (3, 9, -1)) == 20 + 5  # ledger 3 read to its end
    assert entries_behind(stats, (5, 4, 2)) == 15 + 5
    assert entries_behind(stats, (7, 4, -1)) == 0
    assert entries_behind({"ledgers": []}, None) is None  # no lastConfirmedEntry: unknown, not 0
