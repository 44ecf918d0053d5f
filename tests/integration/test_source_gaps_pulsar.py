"""Pulsar: records deleted before they were copied are a gap (issue 40), on Apache Pulsar with the
broker's message index (``AppendIndexMetadataInterceptor``, enabled by our launcher).

A pair copies a topic and stops; the topic's ledger is closed (an unload rolls it), more records
are written, and ``DELETE .../truncate`` deletes every ledger but the current one. The committed
message's ledger is then gone in two cases that only the index tells apart: records after it were
deleted (a gap of exactly that many), or it was the last message of a ledger that rolled and was
trimmed with nothing after it (no gap: a caught-up pair with retention 0, routine)."""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.request
import uuid

import pulsar_util
import pytest
from service_util import wait_for

from connect.records import partition_key
from connect.source import OffsetStorageReader, SourceTaskContext
from connect.source.gaps import RECREATED, SourceGapError
from connectors.pulsar.gaps import TRIMMED
from connectors.pulsar.source import PulsarSourceConnector

pytestmark = pytest.mark.timeout(400)


def _admin(broker, topic: str, path: str, method: str) -> int:
    url = f"{broker.admin_url}/admin/v2/{topic.replace('://', '/', 1)}{path}"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=60) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _roll_and_truncate(broker, topic: str, produce_between, committed: dict) -> None:
    """Close the topic's ledger (unload: the next write opens a new one), call ``produce_between``,
    then truncate: every ledger but the current one is deleted (the committed message's among them;
    waited for, the deletion is asynchronous)."""
    assert _admin(broker, topic, "/unload", "PUT") == 204
    produce_between()
    assert _admin(broker, topic, "/truncate", "DELETE") == 204
    wait_for(lambda: _admin(broker, topic, f"/ledger/{committed['ledger']}/entry/{committed['entry']}", "GET") == 404,
             60, "the committed message's ledger deleted")


def _task(broker, topic: str, policy: str, committed: dict | None):
    config = {"service.url": broker.service_url, "admin.url": broker.admin_url, "topics": topic,
              "source.gap.policy": policy, "poll.batch.size": "500"}
    connector = PulsarSourceConnector()
    connector.start(config)
    [task_config] = connector.task_configs(1)
    connector.stop()
    offsets = {partition_key({"topic": topic, "partition": -1}): committed} if committed else {}
    task = PulsarSourceConnector.task_class()()
    task.context = SourceTaskContext("gaps", task_config, OffsetStorageReader(offsets))
    task.start(task_config, task.context)
    return task


def _read(task, expected: int, timeout: float = 60) -> list:
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < expected and time.monotonic() < deadline:
        task.context.deadline = time.monotonic() + 1
        got.extend(task.poll() or [])
    return got


def _values(records) -> list[int]:
    return [int(r.value.decode().split("-")[1]) for r in records]


def _copied(broker, topic: str, count: int) -> dict:
    """Produce ``count`` records, copy them with a task; the committed offset of the last one."""
    pulsar_util.produce(broker, topic, count, 0)
    task = _task(broker, topic, "fail", None)
    try:
        got = _read(task, count)
    finally:
        task.stop()
    assert _values(got) == list(range(count))
    assert [r.source_offset["index"] for r in got] == list(range(count))  # the broker's index, batches included
    return got[-1].source_offset


def _topic(unique: str, what: str) -> str:
    return f"persistent://public/default/{what}-{unique.rsplit('-', 1)[1]}-{uuid.uuid4().hex[:6]}"  # new on a rerun


def test_fail_stops_at_exactly_the_records_truncation_removed_and_report_counts_them(apache_pulsar_pair, unique):
    broker = apache_pulsar_pair[0]
    topic = _topic(unique, "gapf")
    committed = _copied(broker, topic, 100)
    pulsar_util.produce(broker, topic, 100, 0, start=100)  # in the committed ledger: deleted below, never copied
    _roll_and_truncate(broker, topic, lambda: pulsar_util.produce(broker, topic, 50, 0, start=200), committed)

    failing = _task(broker, topic, "fail", committed)
    try:
        with pytest.raises(SourceGapError, match=rf"{topic}\[-1\] offsets 100\.\.199 \(100 record\(s\)\) were never "
                                                 rf"copied: {re.escape(TRIMMED)}"):
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                failing.context.deadline = time.monotonic() + 1
                assert not failing.poll()  # nothing past the gap
        [gap] = failing.take_gaps()
        assert (gap.first, gap.last, gap.records, gap.policy) == (100, 199, 100, "fail")
        [resume] = gap.resume.values()
        assert resume["index"] == 199
    finally:
        failing.stop()

    # acknowledged: the partition resumes from the gap's resume offset, at the first record left
    after = _task(broker, topic, "fail", resume)
    try:
        assert _values(_read(after, 50)) == list(range(200, 250))
        assert after.take_gaps() == []
    finally:
        after.stop()

    reporting = _task(broker, topic, "report", committed)
    try:
        got = _read(reporting, 50)
        [gap] = reporting.take_gaps()
        assert (gap.first, gap.last, gap.records, gap.policy) == (100, 199, 100, "report")
        assert _values(got) == list(range(200, 250))
        assert len(got) + gap.records == 250 - 100  # produced after the committed record: copied or counted
        assert got[-1].source_offset["index"] == 249
    finally:
        reporting.stop()


def test_a_caught_up_pair_whose_ledger_rolled_away_has_no_gap(apache_pulsar_pair, unique):
    broker = apache_pulsar_pair[0]
    topic = _topic(unique, "gapn")
    committed = _copied(broker, topic, 100)
    # the committed message was the last of its ledger, which is gone: its id alone cannot tell this from a gap
    _roll_and_truncate(broker, topic, lambda: None, committed)
    pulsar_util.produce(broker, topic, 60, 0, start=100)

    task = _task(broker, topic, "fail", committed)
    try:
        got = _read(task, 60)
        assert _values(got) == list(range(100, 160))
        assert task.take_gaps() == []
    finally:
        task.stop()


def test_a_topic_deleted_and_created_again_is_read_from_its_start(apache_pulsar_pair, unique):
    broker = apache_pulsar_pair[0]
    topic = _topic(unique, "gapc")
    committed = _copied(broker, topic, 100)
    assert _admin(broker, topic, "?force=true", "DELETE") == 204
    wait_for(lambda: _admin(broker, topic, "/internalStats", "GET") == 404, 60, "the topic deleted")
    pulsar_util.produce(broker, topic, 30, 0, start=1000)  # a new topic, its index from 0 again

    failing = _task(broker, topic, "fail", committed)
    try:
        with pytest.raises(SourceGapError, match=rf"{topic}\[-1\] offsets 100\.\.\? \(an unknown number of records\) "
                                                 rf"were never copied: {re.escape(RECREATED)}"):
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                failing.context.deadline = time.monotonic() + 1
                assert not failing.poll()
    finally:
        failing.stop()

    reporting = _task(broker, topic, "report", committed)
    try:
        got = _read(reporting, 30)
        assert _values(got) == list(range(1000, 1030))  # the new topic, from its start
        assert [r.source_offset["index"] for r in got] == list(range(30))
        [gap] = reporting.take_gaps()
        assert (gap.cause, gap.records, gap.last) == (RECREATED, None, None)
    finally:
        reporting.stop()


def _status(c, name: str) -> dict:
    return c.get(f"/connectors/{name}/status").json()


def test_a_worker_fails_at_the_gap_and_resumes_after_the_acknowledgement(worker_factory, apache_pulsar_pair, unique):
    a, b = apache_pulsar_pair
    topic, name = _topic(unique, "gapw"), f"{unique}-gapw"
    pulsar_util.produce(a, topic, 100, 0)
    _, c = worker_factory()
    config = {"source.connector.class": "pulsar", "source.service.url": a.service_url, "source.admin.url": a.admin_url,
              "source.topics": topic, "sink.connector.class": "pulsar", "sink.service.url": b.service_url,
              "epoch.max.ms": "1000", "tasks.max": "1"}  # source.gap.policy=fail: the default
    assert c.post("/connectors", json={"name": name, "config": config}).status_code == 201
    wait_for(lambda: (s := _status(c, name))["tasks"] and s["tasks"][0]["records"]["committed"] >= 100, 300,
             "the first 100 committed")
    assert c.put(f"/connectors/{name}/stop").status_code == 204
    wait_for(lambda: _status(c, name)["connector"]["state"] == "STOPPED", 60, "STOPPED")
    [committed] = [o["offset"] for o in c.get(f"/connectors/{name}/offsets").json()["offsets"]
                   if o["partition"] == {"topic": topic, "partition": -1}]
    assert committed["index"] == 99
    pulsar_util.produce(a, topic, 100, 0, start=100)
    _roll_and_truncate(a, topic, lambda: pulsar_util.produce(a, topic, 50, 0, start=200), committed)
    assert c.put(f"/connectors/{name}/resume").status_code == 202

    wait_for(lambda: (s := _status(c, name))["tasks"] and s["tasks"][0]["state"] == "FAILED", 120, "FAILED at the gap")
    assert f"{topic}[-1] offsets 100..199 (100 record(s)) were never copied" in _status(c, name)["tasks"][0]["trace"]
    gaps = c.get(f"/connectors/{name}/gaps").json()["gaps"]
    assert [(g["first"], g["last"], g["records"], g["open"]) for g in gaps] == [(100, 199, 100, True)]
    metric = f'connect_source_gap_records_total{{connector="{name}",partition="-1",topic="{topic}"}} 100.0'
    wait_for(lambda: metric in c.get("/metrics").text, 30, "the gap in /metrics")

    answer = c.post(f"/connectors/{name}/gaps/acknowledge", json={"by": "alice"})
    assert answer.status_code == 200 and answer.json()["acknowledged"] == 1
    copied = pulsar_util.consume_all(b, topic, 0, 150)[-1]
    assert sorted(int(m.data().decode().split("-")[1]) for m in copied) == [*range(100), *range(200, 250)]
    wait_for(lambda: _status(c, name)["tasks"][0]["state"] == "RUNNING", 60, "RUNNING after the acknowledgement")
    kept = _status(c, name)["connector"]["gaps"]
    assert kept["open"] == 0 and kept["records"] == 100 and kept["list"][0]["acknowledged"]["by"] == "alice"
