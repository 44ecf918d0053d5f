"""Records the source removed before they were copied are never lost silently (issue 40), on Apache
Kafka (real DeleteRecords, topic IDs): a worker (real uvicorn, the session's Spark) mirrors a topic,
is stopped, the source drops records past its committed offset, and the worker is resumed.

- ``source.gap.policy=fail``: the pair fails naming the exact range; acknowledged (REST), it resumes
  after the gap, and the status keeps the gap with who acknowledged it;
- ``report``: the pair goes on; copied + counted gap == produced, to the record;
- a topic deleted and re-created with fewer records than the committed offset: seen by its topic ID,
  the new topic is read from its start.
"""

from __future__ import annotations

import re
import time

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from kafka_util import consume_all, create_topic, produce
from service_util import wait_for

from worker.console.web import CONSOLE_PREFIX

pytestmark = pytest.mark.timeout(400)


def _delete_records_before(bootstrap: str, topic: str, offset: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, offset)], request_timeout=30).values():
        assert future.result().low_watermark == offset


def _gap_metric(text: str, connector: str, topic: str) -> float | None:
    match = re.search(rf'^connect_source_gap_records_total{{connector="{re.escape(connector)}",partition="0",'
                      rf'topic="{re.escape(topic)}"}} ([0-9.e+]+)$', text, re.MULTILINE)
    return float(match.group(1)) if match else None


def _start(worker_factory, a, b, name: str, topic: str, policy: str | None):
    _, c = worker_factory()
    config = {"source.connector.class": "kafka", "source.bootstrap.servers": a.bootstrap, "source.topics": topic,
              "sink.connector.class": "kafka", "sink.bootstrap.servers": b.bootstrap,
              "sink.topic.template": "{topic}-copy", "epoch.max.ms": "1000", "tasks.max": "1"}
    if policy is not None:
        config["source.source.gap.policy"] = policy
    assert c.post("/connectors", json={"name": name, "config": config}).status_code == 201
    return c


def _status(c, name: str) -> dict:
    return c.get(f"/connectors/{name}/status").json()


def _copied_then_stopped(c, name: str, committed: int) -> None:
    wait_for(lambda: (s := _status(c, name))["tasks"] and s["tasks"][0]["records"]["committed"] >= committed,
             300, f"the first {committed} committed")
    assert c.put(f"/connectors/{name}/stop").status_code == 204
    wait_for(lambda: _status(c, name)["connector"]["state"] == "STOPPED", 60, "STOPPED")


def _values(bootstrap: str, topic: str, expected: int) -> list[str]:
    return [m.value().decode() for m in consume_all(bootstrap, topic, [0], expected)]


def test_fail_names_the_exact_range_and_resumes_after_the_acknowledgement(worker_factory, apache_kafka_pair, unique):
    a, b = apache_kafka_pair
    topic, name = f"gapf-{unique}", f"{unique}-gapf"
    create_topic(a.bootstrap, topic, 1)
    produce(a.bootstrap, topic, 100, 1)
    c = _start(worker_factory, a, b, name, topic, None)  # fail is the default
    _copied_then_stopped(c, name, 100)
    produce(a.bootstrap, topic, 100, 1, start=100)  # offsets 100..199
    _delete_records_before(a.bootstrap, topic, 150)  # 100..149 gone, never copied
    assert c.put(f"/connectors/{name}/resume").status_code == 202

    wait_for(lambda: (s := _status(c, name))["tasks"] and s["tasks"][0]["state"] == "FAILED", 120, "FAILED at the gap")
    status = _status(c, name)
    assert f"{topic}[0] offsets 100..149 (50 record(s)) were never copied" in status["tasks"][0]["trace"]
    gaps = c.get(f"/connectors/{name}/gaps").json()["gaps"]
    assert [(g["first"], g["last"], g["records"], g["open"]) for g in gaps] == [(100, 149, 50, True)]
    assert status["connector"]["gaps"]["open"] == 1
    wait_for(lambda: _gap_metric(c.get("/metrics").text, name, topic) == 50, 30, "the gap in /metrics")
    flows = c.get(f"{CONSOLE_PREFIX}summary").json()["flows"]
    assert [f["health"] for f in flows if f["name"] == name] == ["failing"]  # the flow turns red
    time.sleep(3)  # it stays failed: nothing is copied past the gap without an acknowledgement
    assert _status(c, name)["tasks"][0]["state"] == "FAILED"

    bad = c.post(f"/connectors/{name}/gaps/acknowledge", json={})
    assert bad.status_code == 400 and "$.by" in bad.json()["message"]
    answer = c.post(f"/connectors/{name}/gaps/acknowledge", json={"by": "alice"})
    assert answer.status_code == 200 and answer.json()["acknowledged"] == 1
    copied = _values(b.bootstrap, f"{topic}-copy", 150)
    assert copied == [f"value-{i}" for i in [*range(100), *range(150, 200)]]
    wait_for(lambda: _status(c, name)["tasks"][0]["state"] == "RUNNING", 60, "RUNNING after the acknowledgement")
    kept = _status(c, name)["connector"]["gaps"]
    assert kept["open"] == 0 and kept["records"] == 50
    assert kept["list"][0]["acknowledged"]["by"] == "alice" and kept["list"][0]["acknowledged"]["at"] > 0


def test_report_counts_exactly_the_records_truncation_removed(worker_factory, apache_kafka_pair, unique):
    a, b = apache_kafka_pair
    topic, name = f"gapr-{unique}", f"{unique}-gapr"
    create_topic(a.bootstrap, topic, 1)
    produce(a.bootstrap, topic, 100, 1)
    c = _start(worker_factory, a, b, name, topic, "report")
    _copied_then_stopped(c, name, 100)
    produce(a.bootstrap, topic, 200, 1, start=100)  # offsets 100..299
    _delete_records_before(a.bootstrap, topic, 230)  # 130 records gone
    assert c.put(f"/connectors/{name}/resume").status_code == 202

    copied = _values(b.bootstrap, f"{topic}-copy", 170)
    produced = 300
    wait_for(lambda: (_status(c, name)["connector"].get("gaps") or {}).get("records") == 130, 60, "the gap recorded")
    gap = _status(c, name)["connector"]["gaps"]
    assert len(copied) + gap["records"] == produced  # nothing skipped without being counted
    assert copied == [f"value-{i}" for i in [*range(100), *range(230, 300)]]
    assert gap["list"][0]["policy"] == "report" and gap["list"][0]["first"] == 100 and gap["list"][0]["last"] == 229
    assert _status(c, name)["tasks"][0]["state"] == "RUNNING"
    wait_for(lambda: _gap_metric(c.get("/metrics").text, name, topic) == 130, 30, "the gap in /metrics")

    # stopped and resumed again: the gap is not found (nor counted) a second time
    assert c.put(f"/connectors/{name}/stop").status_code == 204
    wait_for(lambda: _status(c, name)["connector"]["state"] == "STOPPED", 60, "STOPPED")
    assert c.put(f"/connectors/{name}/resume").status_code == 202
    produce(a.bootstrap, topic, 10, 1, start=300)
    _values(b.bootstrap, f"{topic}-copy", 180)
    assert _status(c, name)["connector"]["gaps"]["records"] == 130
    assert len(c.get(f"/connectors/{name}/gaps").json()["gaps"]) == 1


def test_a_topic_re_created_with_fewer_records_is_read_from_its_start(worker_factory, apache_kafka_pair, unique):
    a, b = apache_kafka_pair
    topic, name = f"gapx-{unique}", f"{unique}-gapx"
    create_topic(a.bootstrap, topic, 1)
    produce(a.bootstrap, topic, 100, 1)
    c = _start(worker_factory, a, b, name, topic, "report")
    _copied_then_stopped(c, name, 100)
    admin = AdminClient({"bootstrap.servers": a.bootstrap})
    for future in admin.delete_topics([topic], operation_timeout=30).values():
        future.result()
    wait_for(lambda: topic not in admin.list_topics(timeout=10).topics, 60, "the topic deleted")
    wait_for(lambda: _try_create(a.bootstrap, topic), 60, "the topic created again")
    produce(a.bootstrap, topic, 30, 1, start=1000)  # fewer records than the committed offset (99)
    assert c.put(f"/connectors/{name}/resume").status_code == 202

    copied = _values(b.bootstrap, f"{topic}-copy", 130)
    assert copied == [f"value-{i}" for i in [*range(100), *range(1000, 1030)]]  # the new topic from its start
    wait_for(lambda: _status(c, name)["connector"].get("gaps"), 60, "the re-creation recorded")
    gap = _status(c, name)["connector"]["gaps"]["list"][0]
    assert "created again" in gap["cause"] and gap["first"] == 100 and gap["records"] is None
    offsets = c.get(f"/connectors/{name}/offsets").json()["offsets"]
    assert [o["offset"]["offset"] for o in offsets if o["partition"] == {"topic": topic, "partition": 0}] == [29]


def _try_create(bootstrap: str, topic: str) -> bool:
    try:
        create_topic(bootstrap, topic, 1)
        return True
    except Exception:  # noqa: BLE001 - the deletion may still be under way
        return False


def _poll_until(task, want: int, timeout: float = 60.0) -> list:
    out, deadline = [], time.monotonic() + timeout
    while len(out) < want and time.monotonic() < deadline:
        out.extend(task.poll() or [])
    return out


@pytest.mark.parametrize("shared", ["true", "false"])
def test_a_position_that_falls_out_of_the_log_while_reading_is_a_gap_not_a_jump(apache_kafka_pair, unique, shared):
    """The running path: the consumer's position is removed under it (auto.offset.reset=error), as
    retention does to a pair that fell behind: under report it reads on after the gap and counts it."""
    from connect.records import partition_key
    from connect.source import OffsetStorageReader, SourceTaskContext
    from connectors.kafka.source import KafkaSourceTask

    a, _ = apache_kafka_pair
    topic = f"gaprun-{unique}-{shared}"
    create_topic(a.bootstrap, topic, 1)
    produce(a.bootstrap, topic, 300, 1)
    sp = {"topic": topic, "partition": 0}
    config = {"bootstrap.servers": a.bootstrap, "topics": topic, "task.assignment": f"{topic}:0",
              "source.gap.policy": "report", "consumer.shared": shared, "poll.batch.size": "10",
              "consumer.override.max.partition.fetch.bytes": "1024",
              "consumer.override.queued.max.messages.kbytes": "1", "consumer.override.queued.min.messages": "1"}
    task = KafkaSourceTask()
    task.start(config, SourceTaskContext("gaps-0", config, OffsetStorageReader({partition_key(sp): {"offset": 9}})))
    try:
        _delete_records_before(a.bootstrap, topic, 200)  # after the start's checks: found while fetching
        first: list = []
        rest = []
        deadline = time.monotonic() + 60
        while (not rest or rest[-1].source_offset["offset"] < 299) and time.monotonic() < deadline:
            rest.extend(task.poll() or [])
        offsets = [r.source_offset["offset"] for r in first + rest]
        gaps = task.take_gaps()
        assert len(gaps) == 1 and gaps[0].first == max((o for o in offsets if o < 200), default=9) + 1
        assert gaps[0].last == 199
        # every record produced is either copied or counted, none twice
        assert sorted(set(offsets)) == offsets and len(offsets) + gaps[0].records == 290
        assert offsets[-1] == 299
    finally:
        task.stop()


def test_retention_removing_records_of_a_stopped_pair_is_counted_to_the_record(worker_factory, tmp_path, unique):
    """A topic with a small retention.ms whose segments roll: the pair stopped past retention resumes
    and counts what retention removed, checked against what was produced."""
    from worker.embedded import ApacheKafka

    broker = ApacheKafka(log_path=tmp_path / "retention.log", extra={
        "log.retention.check.interval.ms": "500", "log.segment.delete.delay.ms": "0"}).start()
    try:
        topic, name = f"gapt-{unique}", f"{unique}-gapt"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        from confluent_kafka.admin import NewTopic

        for future in admin.create_topics([NewTopic(topic, 1, 1, config={
                "retention.ms": "1000", "segment.ms": "200"})]).values():
            future.result()
        produce(broker.bootstrap, topic, 100, 1)  # timestamps of 2023: past retention once their segment rolls
        c = _start(worker_factory, broker, broker, name, topic, "report")
        _copied_then_stopped(c, name, 100)
        for start in range(100, 400, 50):  # a segment rolled at each batch (segment.ms 200)
            time.sleep(0.3)
            produce(broker.bootstrap, topic, 50, 1, start=start)
        low = wait_for(lambda: (w := _low(admin, topic)) > 100 and w, 60, "retention to delete segments")
        assert c.put(f"/connectors/{name}/resume").status_code == 202
        wait_for(lambda: (_status(c, name)["connector"].get("gaps") or {}).get("records"), 120, "the gap recorded")
        gap = _status(c, name)["connector"]["gaps"]["list"][0]
        assert gap["first"] == 100 and gap["records"] >= low - 100  # retention may go on until the pair resumes
        copied = _values(broker.bootstrap, f"{topic}-copy", 400 - gap["records"])
        assert len(copied) + gap["records"] == 400
        assert copied == [f"value-{i}" for i in [*range(100), *range(gap["last"] + 1, 400)]]
    finally:
        broker.stop()


def _low(admin: AdminClient, topic: str) -> int:
    from confluent_kafka.admin import OffsetSpec

    tp = TopicPartition(topic, 0)
    return admin.list_offsets({tp: OffsetSpec.earliest()}, request_timeout=10)[tp].result().offset
