"""Per-partition lag of the Pulsar source, from the admin API's internal stats, on Apache Pulsar: the
source asks the real admin API (``GET /admin/v2/persistent/{tenant}/{namespace}/{topic}/internalStats``)
for the managed ledger's ``lastConfirmedEntry`` and ``ledgers``, so the lag counts what the broker
really holds (pulsar-lite has no admin API; a stand-in answering for it would prove only our reading
of our own answer)."""

from __future__ import annotations

import time

import pulsar_util
import pytest

from connect.records import partition_key
from connect.source import OffsetStorageReader, SourceTaskContext
from connectors.pulsar.source import PulsarSourceConnector, entries_behind

pytestmark = pytest.mark.timeout(120)


def test_pulsar_source_reports_entries_behind_per_partition(apache_pulsar_pair, unique):
    broker = apache_pulsar_pair[0]
    topic = f"persistent://public/default/lag-{unique.rsplit('-', 1)[1]}"
    c = pulsar_util.client(broker)
    producer = c.create_producer(topic, batching_enabled=False)
    for i in range(100):
        producer.send(f"value-{i}".encode())
    producer.close()
    c.close()
    config = {"service.url": broker.service_url, "topics": topic, "admin.url": broker.admin_url, "poll.batch.size": "30"}
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
    finally:
        task.stop()


def test_entries_behind_spans_ledgers():
    stats = {"lastConfirmedEntry": "7:4", "ledgers": [{"ledgerId": 3, "entries": 10}, {"ledgerId": 5, "entries": 20},
                                                       {"ledgerId": 7, "entries": 0}]}
    assert entries_behind(stats, None) == 10 + 20 + 5
    assert entries_behind(stats, (3, 9, -1)) == 20 + 5  # ledger 3 read to its end
    assert entries_behind(stats, (5, 4, 2)) == 15 + 5
    assert entries_behind(stats, (7, 4, -1)) == 0
    assert entries_behind({"ledgers": []}, None) is None  # no lastConfirmedEntry: unknown, not 0
