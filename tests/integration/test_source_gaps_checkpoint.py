"""The checkpoint connector never translates a group positioned in a source gap (issue 40), on
Apache Kafka (real DeleteRecords): a mirror with offset syncs (``source.gap.policy=report``) copies
100 records and stops; 100 more are produced, group G commits at 120 and group H at 180, and the
source drops 100..149 before the mirror copies them. Resumed, the mirror reports the gap and writes
it to the offset-syncs topic; the checkpoint connector translates H, not G, and says why.
(Without the gap record, G would translate by the sync of record 99 to the record after the gap:
a consumer failing over would skip 120..149 without a word.)"""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka_util import create_topic, produce
from pipeline_util import make_driver, pair_pipeline

from connect.records import partition_key

pytestmark = pytest.mark.timeout(400)


def _epochs_until(driver, done, what: str, epochs: int = 60) -> list:
    for _ in range(epochs):
        results = driver.run_epoch()
        failed = [r.trace for r in results if r.state != "RUNNING"]
        assert not failed, failed[0]
        if done(results):
            return results
    raise AssertionError(f"{what}: not within {epochs} epochs")


def _metric(results, name: str) -> float:
    return max([0.0] + [r.metrics.get(name, 0.0) for r in results if r.metrics])


def test_a_group_in_a_source_gap_is_not_translated_and_the_checkpoint_says_why(apache_kafka_pair, spark, tmp_path,
                                                                                unique):
    a, b = apache_kafka_pair
    topic = f"gapc-{unique.rsplit('-', 1)[1]}"
    syncs = f"{topic}-offset-syncs"
    create_topic(a.bootstrap, topic, 1)
    create_topic(b.bootstrap, topic, 1)
    produce(a.bootstrap, topic, 100, 1)
    mirror = pair_pipeline(f"{topic}-mirror",
                           {"connector.class": "kafka", "bootstrap.servers": a.bootstrap, "topics": topic,
                            "cluster.alias": "S", "source.gap.policy": "report"},
                           {"connector.class": "kafka", "bootstrap.servers": b.bootstrap, "cluster.alias": "T"},
                           **{"offset.syncs.topic": syncs, "offset.syncs.interval.ms": "10", "epoch.max.ms": "700"})
    driver = make_driver(spark, tmp_path / "mirror", mirror)
    try:
        _epochs_until(driver, lambda rs: driver.runtimes[0].offsets.get(partition_key({"topic": topic, "partition": 0}))
                      == {"offset": 99} and _metric(rs, "offset_syncs.emitted") >= 1, "the first 100 copied")
        _epochs_until(driver, lambda rs: True, "one more epoch (the newest record's sync)")
    finally:
        driver.close()

    produce(a.bootstrap, topic, 100, 1, start=100)  # offsets 100..199
    for group, at in (("G", 120), ("H", 180)):
        c = Consumer({"bootstrap.servers": a.bootstrap, "group.id": f"{topic}-{group}", "enable.auto.commit": False})
        c.commit(offsets=[TopicPartition(topic, 0, at)], asynchronous=False)
        c.close()
    admin = AdminClient({"bootstrap.servers": a.bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 150)], request_timeout=30).values():
        assert future.result().low_watermark == 150  # 100..149 gone, never copied

    driver = make_driver(spark, tmp_path / "mirror", mirror)
    try:
        found: list = []

        def copied(results) -> bool:
            found.extend(g for r in results for g in r.gaps or ())
            return driver.runtimes[0].offsets.get(partition_key({"topic": topic, "partition": 0})) == {"offset": 199}

        _epochs_until(driver, copied, "the records after the gap copied")
        assert [(g["first"], g["last"]) for g in found] == [(100, 149)]
        _epochs_until(driver, lambda rs: True, "one more epoch (the newest record's sync)")
    finally:
        driver.close()

    checkpoint = pair_pipeline(
        f"{topic}-checkpoint",
        {"connector.class": "checkpoint", "upstream.type": "kafka", "upstream.alias": "S",
         "upstream.bootstrap.servers": a.bootstrap, "downstream.type": "kafka", "downstream.alias": "T",
         "downstream.bootstrap.servers": b.bootstrap, "offset.syncs.topic": syncs,
         "groups": f"{topic}-G,{topic}-H", "emit.checkpoints.interval.ms": "300",
         "checkpoints.topic": f"{topic}-checkpoints"},
        {"connector.class": "kafka", "bootstrap.servers": b.bootstrap}, **{"epoch.max.ms": "1000"})
    cdriver = make_driver(spark, tmp_path / "checkpoint", checkpoint)
    try:
        results = _epochs_until(cdriver, lambda rs: _metric(rs, "checkpoint.rounds") >= 2, "two checkpoint rounds")
    finally:
        cdriver.close()
    metrics = next(r.metrics for r in results if r.metrics)
    key = partition_key({"topic": topic, "partition": 0})
    assert metrics["checkpoint.emitted"] == 1  # H's checkpoint, none for G
    assert metrics.get(f"checkpoint.untranslated|{topic}-G|{key}|in-source-gap") == 1.0  # says why
    assert metrics["checkpoint.untranslated"] == 1.0  # G only: H, after the gap, translates
    assert metrics.get("checkpoint.source.gaps") == 1

    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": f"{topic}-reader", "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(f"{topic}-checkpoints", 0, 0)])
    keys = []
    for _ in range(30):
        keys += [m.key().decode() for m in c.consume(100, 1.0) if m.error() is None]
        if keys:
            break
    c.close()
    assert keys and all(k.startswith(f"{topic}-H:") for k in keys), keys
