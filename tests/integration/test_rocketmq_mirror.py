"""RocketMQ source and sink through the real driver and Spark executor, against embedded RocketMQ
brokers (and Apache Kafka / pulsar-lite for the cross-broker routes)."""

from __future__ import annotations

import hashlib

from kafka_util import consume_all as kafka_consume_all
from kafka_util import create_topic as kafka_create_topic
from kafka_util import produce as kafka_produce
from pipeline_util import (
    assert_delivered_in_order,
    committed_total,
    make_driver,
    pair_pipeline,
    partition_offsets,
    run_until,
)
from rocketmq_util import consume_all, produce

from connectors.rocketmq.mapping import record_fields


def _name(prefix: str, unique: str) -> str:
    return prefix + hashlib.sha1(unique.encode()).hexdigest()[:10]


def _index(m) -> int:
    return int(m.body.decode().rsplit("-", 1)[1])


def test_rocketmq_to_rocketmq_50k_keeps_queues_tags_keys_properties_ids_and_order(rocketmq_pair, spark, tmp_path,
                                                                                  unique):
    src, dst = rocketmq_pair
    topic, n, queues = _name("Mirror", unique), 50_000, 4
    produce(src, topic, n, queues)
    driver = make_driver(spark, tmp_path, pair_pipeline(
        unique, {"connector.class": "rocketmq", "namesrv.addr": src.namesrv, "topics": topic},
        {"connector.class": "rocketmq", "namesrv.addr": dst.namesrv, "auto.create.topics": "true"}, **{"tasks.max": 2}))
    try:
        assert len(driver.runtimes[0].tasks) == 2  # 4 queues over 2 task pairs
        assert run_until(driver, n) >= n
    finally:
        driver.close()
    mirrored = consume_all(dst, topic)
    assert sorted(mirrored) == list(range(queues))  # the target was created with the source's queue count
    for q, msgs in mirrored.items():
        indexes = [_index(m) for m in msgs]
        assert_delivered_in_order(indexes, list(range(q, n, queues)), f"queue {q}")
        for m, i in zip(msgs, indexes, strict=True):
            assert (m.tags, m.keys, m.properties["idx"], m.properties["src"]) == (["TagA", "TagB"][i % 2], [f"key-{i}"],
                                                                                   str(i), "test")
            assert m.msg_id == f"{i:032X}"  # the message keeps its id across clusters
            # A batch is born once: each record's own born time travels with it and is read back.
            assert record_fields(m)[3] == 1_700_000_000_000 + i


def test_rocketmq_tag_filter_in_the_replicator_form(rocketmq_pair, spark, tmp_path, unique):
    src, dst = rocketmq_pair
    a, b = _name("TagsA", unique), _name("TagsB", unique)
    produce(src, a, 3000, 2, tags=("TagA", "TagB", "TagC"))
    produce(src, b, 1000, 1)
    driver = make_driver(spark, tmp_path, pair_pipeline(
        unique, {"connector.class": "rocketmq", "namesrv.addr": src.namesrv, "topics": f"{a},TagA || TagC;{b}"},
        {"connector.class": "rocketmq", "namesrv.addr": dst.namesrv, "topic.template": "{topic}Copy",
         "auto.create.topics": "true"}))
    try:
        run_until(driver, 3000)
        for _ in range(2):
            driver.run_epoch()
    finally:
        driver.close()
    got_a = sorted(_index(m) for msgs in consume_all(dst, f"{a}Copy").values() for m in msgs)
    assert got_a == [i for i in range(3000) if i % 3 != 1]  # TagB filtered out
    assert sorted(_index(m) for msgs in consume_all(dst, f"{b}Copy").values() for m in msgs) == list(range(1000))


def test_rocketmq_to_kafka_and_kafka_to_rocketmq(rocketmq_pair, kafka_pair, spark, tmp_path, unique):
    src, dst = rocketmq_pair
    ksrc, kdst = kafka_pair
    topic, n = _name("ToKafka", unique), 50_000
    produce(src, topic, n, 2)
    kafka_create_topic(kdst.bootstrap, topic, 2)
    driver = make_driver(spark, tmp_path / "r2k", pair_pipeline(
        unique + "-r2k", {"connector.class": "rocketmq", "namesrv.addr": src.namesrv, "topics": topic},
        {"connector.class": "kafka", "bootstrap.servers": kdst.bootstrap}))
    try:
        assert run_until(driver, n) >= n
    finally:
        driver.close()
    by_part: dict[int, list] = {}
    for m in kafka_consume_all(kdst.bootstrap, topic, range(2), n):
        by_part.setdefault(m.partition(), []).append(m)
    for part, msgs in by_part.items():
        indexes = [int(m.value().decode().rsplit("-", 1)[1]) for m in msgs]
        assert_delivered_in_order(indexes, list(range(part, n, 2)), f"partition {part}")
        for m, i in zip(msgs, indexes, strict=True):
            headers = dict(m.headers())
            assert m.key() == f"key-{i}".encode() and m.timestamp()[1] == 1_700_000_000_000 + i
            assert (headers["idx"], headers["src"], headers["rocketmq.tags"]) == (str(i).encode(), b"test",
                                                                                 ["TagA", "TagB"][i % 2].encode())
            assert headers["rocketmq.msg.id"] == f"{i:032X}".encode()

    ktopic = f"k2r-{unique.rsplit('-', 1)[1]}"
    kafka_create_topic(ksrc.bootstrap, ktopic, 3)
    kafka_produce(ksrc.bootstrap, ktopic, n, 3)
    target = _name("FromKafka", unique)
    driver = make_driver(spark, tmp_path / "k2r", pair_pipeline(
        unique + "-k2r", {"connector.class": "kafka", "bootstrap.servers": ksrc.bootstrap, "topics": ktopic},
        {"connector.class": "rocketmq", "namesrv.addr": dst.namesrv, "topic": target, "tag": "FromKafka",
         "auto.create.topics": "true"}))
    try:
        assert run_until(driver, n) >= n
    finally:
        driver.close()
    mirrored = consume_all(dst, target)
    assert sorted(mirrored) == [0, 1, 2]  # created with the Kafka topic's partition count
    for q, msgs in mirrored.items():
        indexes = [_index(m) for m in msgs]
        assert_delivered_in_order(indexes, list(range(q, n, 3)), f"queue {q}")
        for m, i in zip(msgs, indexes, strict=True):
            assert (m.tags, m.keys, m.properties["idx"]) == ("FromKafka", [f"key-{i}"], str(i))


def test_both_brokers_restarted_mid_stream_lose_nothing(spark, tmp_path, unique):
    """Source and target brokers are stopped mid-stream (pulls and sends in flight fail over the
    wire) and started again 2 s later on their data: the pair keeps RUNNING, and after the
    restart every record is there, per queue in order."""
    from rocketmq_brokers import rocketmq_broker

    src = rocketmq_broker(tmp_path / "src", log_path=tmp_path / "src.log").start()
    dst = rocketmq_broker(tmp_path / "dst", log_path=tmp_path / "dst.log").start()
    topic, n, queues = "Restarted", 50_000, 2
    try:
        produce(src, topic, n, queues)
        driver = make_driver(spark, tmp_path / "data", pair_pipeline(
            unique, {"connector.class": "rocketmq", "namesrv.addr": src.namesrv, "topics": topic},
            {"connector.class": "rocketmq", "namesrv.addr": dst.namesrv, "auto.create.topics": "true",
             "request.timeout.ms": 1000}, **{"epoch.max.ms": 700}))
        try:
            for _ in range(20):
                driver.run_epoch()
                if committed_total(driver):
                    break
            assert 0 < committed_total(driver) < n
            src.stop()
            dst.stop()
            for _ in range(3):  # epochs while both are away
                assert [r.state for r in driver.run_epoch()] == ["RUNNING"]
            src.start()
            dst.start()
            assert run_until(driver, n, max_epochs=80) >= n
        finally:
            driver.close()
        for q, msgs in consume_all(dst, topic).items():
            assert_delivered_in_order([_index(m) for m in msgs], list(range(q, n, queues)), f"queue {q}")
    finally:
        src.stop()
        dst.stop()


def test_worker_killed_with_sigkill_mid_stream_then_restarted_loses_nothing(rocketmq_pair, tmp_path, unique):
    """`connect run` as a process, killed with SIGKILL while it mirrors: nothing is committed on the
    way out, and a new process resumes from the committed offsets and completes the mirror."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import orjson
    from pipeline_util import committed_in_store

    src, dst = rocketmq_pair
    topic, n, queues = _name("Killed", unique), 50_000, 2
    produce(src, topic, n, queues)
    config = tmp_path / "c.json"
    config.write_bytes(orjson.dumps({"name": unique, "config": {
        "source.connector.class": "rocketmq", "source.namesrv.addr": src.namesrv, "source.topics": topic,
        "source.pull.batch.size": "64", "sink.connector.class": "rocketmq", "sink.namesrv.addr": dst.namesrv,
        "sink.auto.create.topics": "true", "epoch.max.ms": "300"}}))  # short epochs, small pulls: killed mid-stream
    data = tmp_path / "data"

    def start(log_name: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "worker.cli", "run", str(config), "--data-dir", str(data),
                                 "--spark-conf", "spark.ui.enabled=false"], stdout=open(tmp_path / log_name, "wb"),
                                stderr=subprocess.STDOUT, start_new_session=True)

    def wait_committed(proc, log_name: str, at_least: int, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while committed_in_store(data) < at_least and time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / log_name).read_text()[-3000:]
            time.sleep(0.05)
        assert committed_in_store(data) >= at_least, (tmp_path / log_name).read_text()[-3000:]
        return committed_in_store(data)

    first = start("first.log")
    try:
        wait_committed(first, "first.log", 1, 120)
        before = committed_in_store(data)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(30)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    assert committed_in_store(data) == before < n, "nothing is committed on the way out of a killed worker"
    second = start("second.log")
    try:
        wait_committed(second, "second.log", n, 180)
    finally:
        second.send_signal(signal.SIGTERM)
        code = second.wait(60)
    assert code == 0, (tmp_path / "second.log").read_text()[-3000:]
    for q, msgs in consume_all(dst, topic).items():
        assert_delivered_in_order([_index(m) for m in msgs], list(range(q, n, queues)), f"queue {q}")


def test_pulsar_to_rocketmq_and_back(rocketmq_pair, pulsar_pair, spark, tmp_path, unique):
    """Pulsar -> RocketMQ -> Pulsar: keys, properties, event times and partition/queue ids survive both hops."""
    from pulsar_util import consume_all as pulsar_consume_all
    from pulsar_util import produce as pulsar_produce

    psrc, pdst = pulsar_pair
    _, rdst = rocketmq_pair
    name, n, parts = _name("P2R", unique), 50_000, 2
    ptopic = f"persistent://public/default/{name}"
    psrc.create_partitioned_topics({ptopic: parts})
    pulsar_produce(psrc, ptopic, n, parts)
    to_rocketmq = make_driver(spark, tmp_path / "p2r", pair_pipeline(
        unique + "-p2r", {"connector.class": "pulsar", "service.url": psrc.service_url, "topics": ptopic},
        {"connector.class": "rocketmq", "namesrv.addr": rdst.namesrv, "topic": name, "auto.create.topics": "true"}))
    try:
        assert run_until(to_rocketmq, n) >= n
    finally:
        to_rocketmq.close()
    for q, msgs in consume_all(rdst, name).items():
        indexes = [_index(m) for m in msgs]
        assert_delivered_in_order(indexes, list(range(q, n, parts)), f"queue {q}")
        for m, i in zip(msgs, indexes, strict=True):
            assert (m.keys, m.properties["idx"], m.properties["pulsar.ordering.key"]) == ([f"key-{i}"], str(i),
                                                                                         f"ok-{i % 7}")
    back = f"persistent://public/default/{name}-back"
    pdst.create_partitioned_topics({back: parts})
    to_pulsar = make_driver(spark, tmp_path / "r2p", pair_pipeline(
        unique + "-r2p", {"connector.class": "rocketmq", "namesrv.addr": rdst.namesrv, "topics": name},
        {"connector.class": "pulsar", "service.url": pdst.service_url, "topic": back}))
    try:
        assert run_until(to_pulsar, n) >= n
    finally:
        to_pulsar.close()
    for part, msgs in pulsar_consume_all(pdst, back, parts, n).items():
        indexes = [int(m.data().decode().rsplit("-", 1)[1]) for m in msgs]
        assert_delivered_in_order(indexes, list(range(part, n, parts)), f"partition {part}")
        for m, i in zip(msgs, indexes, strict=True):
            assert m.partition_key() == f"key-{i}" and m.ordering_key() == f"ok-{i % 7}"
            assert m.event_timestamp() == 1_700_000_000_000 + i
            assert m.properties()["idx"] == str(i) and "rocketmq.msg.id" in m.properties()


def test_a_record_the_broker_refuses_fails_alone_and_the_rest_arrive(kafka_pair, rocketmq_pair, spark, tmp_path, unique):
    """A record whose properties are longer than a RocketMQ record holds is refused by the broker
    (MESSAGE_ILLEGAL): its batch is sent again record by record, so only that record fails
    (skipped with errors.tolerance=all, counted) and the nine around it arrive, in order."""
    from confluent_kafka import Producer

    ksrc, _ = kafka_pair
    _, dst = rocketmq_pair
    name, target = f"refused-{unique.rsplit('-', 1)[1]}", _name("Refused", unique)
    kafka_create_topic(ksrc.bootstrap, name, 1)
    p = Producer({"bootstrap.servers": ksrc.bootstrap})
    for i in range(10):
        p.produce(name, f"value-{i}".encode(), key=str(i).encode(), partition=0,
                  headers=[("big", b"x" * 40_000)] if i == 4 else None)
    assert p.flush(30) == 0
    driver = make_driver(spark, tmp_path, pair_pipeline(
        unique, {"connector.class": "kafka", "bootstrap.servers": ksrc.bootstrap, "topics": name},
        {"connector.class": "rocketmq", "namesrv.addr": dst.namesrv, "topic": target, "auto.create.topics": "true"},
        **{"errors.tolerance": "all"}))
    stats = []
    try:
        for _ in range(10):
            results = driver.run_epoch()
            assert [r.state for r in results] == ["RUNNING"], results[0].trace
            stats.extend(r.stats for r in results)
            if partition_offsets(driver.runtimes[0].offsets) == [{"offset": 9}]:
                break
        assert partition_offsets(driver.runtimes[0].offsets) == [{"offset": 9}]
    finally:
        driver.close()
    assert sum(s["errors"] for s in stats) == 1 and sum(s["skipped"] for s in stats) == 1
    reasons = {k for s in stats for k in s["failure_reasons"]}
    assert any("MESSAGE_ILLEGAL" in r or "properties" in r for r in reasons), reasons
    got = [m for msgs in consume_all(dst, target).values() for m in msgs]
    assert [m.keys[0] for m in got] == [str(i) for i in range(10) if i != 4]


def test_start_positions_and_progress_written_to_a_source_consumer_group(rocketmq_pair, spark, tmp_path, unique):
    """latest skips what is there, timestamp starts at the first message stored at or after it,
    and with consumer.group the committed positions show up as that group's offsets on the source."""
    import time

    from connectors.rocketmq.sync_client import SyncRocketMQClient

    src, dst = rocketmq_pair
    topic = _name("Starts", unique)
    produce(src, topic, 1000, 1)
    time.sleep(0.05)
    middle = int(time.time() * 1000)
    time.sleep(0.05)
    produce(src, topic, 500, 1, start=1000)
    for position, extra, first in (("latest", {}, 1500), ("timestamp", {"start.timestamp.ms": middle}, 1000)):
        target = _name(f"Start{position}", unique)
        driver = make_driver(spark, tmp_path / position, pair_pipeline(
            f"{unique}-{position}", {"connector.class": "rocketmq", "namesrv.addr": src.namesrv, "topics": topic,
                                     "start.position": position, "consumer.group": f"grp-{position}", **extra},
            {"connector.class": "rocketmq", "namesrv.addr": dst.namesrv, "topic": target, "auto.create.topics": "true"}))
        end = 1510 if position == "latest" else 1520  # 10 more are produced once the pair runs
        try:
            for _ in range(4):
                driver.run_epoch()
            produce(src, topic, 10, 1, start=end - 10)
            run_until(driver, end - first, max_epochs=30)
            for _ in range(2):  # the last commit is persisted, then written to the source group
                driver.run_epoch()
        finally:
            driver.close()
        got = sorted(_index(m) for msgs in consume_all(dst, target).values() for m in msgs)
        assert got == list(range(first, end)), position
        with SyncRocketMQClient(src.namesrv) as c:
            assert c.query_consumer_offset(src.broker_addr, f"grp-{position}", topic, 0) == end
