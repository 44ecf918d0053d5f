"""Kafka -> Kafka through the real driver, Spark partitions and two Apache Kafka brokers (tansu with CONNECT_TEST_KAFKA=tansu)."""

from __future__ import annotations

from collections import defaultdict

from kafka_util import consume_all, create_topic, produce
from pipeline_util import kafka_pipeline, make_driver, run_until


def _by_partition(msgs):
    out = defaultdict(list)
    for m in msgs:
        out[m.partition()].append(m)
    return out


def test_mirror_100k_records_keeps_keys_headers_timestamps_partitions_and_order(kafka_pair, spark, tmp_path, unique):
    src, dst = kafka_pair
    topic, n, parts = f"orders-{unique}", 100_000, 3
    create_topic(src.bootstrap, topic, parts)
    produce(src.bootstrap, topic, n, parts)
    driver = make_driver(spark, tmp_path, kafka_pipeline(unique, src.bootstrap, dst.bootstrap,
                                                         **{"source.topics": topic, "tasks.max": 2}))
    try:
        assert len(driver.runtimes[0].tasks) == 2  # 3 partitions divided over 2 task pairs
        assert run_until(driver, n) == n
    finally:
        driver.close()
    mirrored = consume_all(dst.bootstrap, topic, range(parts), n)
    assert len(mirrored) == n
    for part, msgs in _by_partition(mirrored).items():
        indexes = [int(m.value().decode().rsplit("-", 1)[1]) for m in msgs]
        assert indexes == list(range(part, n, parts)), f"partition {part} out of order or incomplete"
        for m, i in zip(msgs, indexes, strict=True):
            assert m.key() == f"key-{i}".encode()
            assert m.timestamp()[1] == 1_700_000_000_000 + i
            assert m.headers() == [("idx", str(i).encode()), ("src", b"test")]


def test_stop_and_restart_resumes_without_loss_or_duplicates(kafka_pair, spark, tmp_path, unique):
    src, dst = kafka_pair
    topic, parts = f"resume-{unique}", 2
    create_topic(src.bootstrap, topic, parts)
    produce(src.bootstrap, topic, 3000, parts)
    pipeline = kafka_pipeline(unique, src.bootstrap, dst.bootstrap,
                              **{"source.topics": topic, "sink.topic.template": "copy.{topic}"})
    first = make_driver(spark, tmp_path, pipeline)
    try:
        run_until(first, 3000)
    finally:
        first.close()
    produce(src.bootstrap, topic, 2000, parts, start=3000)
    second = make_driver(spark, tmp_path, pipeline)  # same data dir: resumes from stored offsets
    try:
        assert run_until(second, 2000) == 2000  # only the new records are moved
    finally:
        second.close()
    mirrored = consume_all(dst.bootstrap, f"copy.{topic}", range(parts), 5000)
    values = sorted(int(m.value().decode().rsplit("-", 1)[1]) for m in mirrored)
    assert values == list(range(5000))


def test_new_topics_matching_the_regex_are_picked_up(kafka_pair, spark, tmp_path, unique):
    src, dst = kafka_pair
    prefix = f"auto-{unique}"
    create_topic(src.bootstrap, f"{prefix}-a", 1)
    produce(src.bootstrap, f"{prefix}-a", 100, 1)
    pipeline = kafka_pipeline(unique, src.bootstrap, dst.bootstrap,
                              **{"source.topics.regex": f"{prefix}-.*", "sink.topic.template": "m.{topic}",
                                 "epoch.max.ms": 700})
    driver = make_driver(spark, tmp_path, pipeline)
    try:
        run_until(driver, 100)
        create_topic(src.bootstrap, f"{prefix}-b", 2)
        produce(src.bootstrap, f"{prefix}-b", 300, 2)
        run_until(driver, 400, max_epochs=40)
        assert sorted(t.source_config["task.assignment"] for t in driver.runtimes[0].tasks) == [
            f"{prefix}-a:0,{prefix}-b:0,{prefix}-b:1"]
    finally:
        driver.close()
    assert len(consume_all(dst.bootstrap, f"m.{prefix}-b", range(2), 300)) == 300


def test_start_position_latest_and_timestamp(kafka_pair, spark, tmp_path, unique):
    src, dst = kafka_pair
    topic = f"start-{unique}"
    create_topic(src.bootstrap, topic, 1)
    produce(src.bootstrap, topic, 500, 1)  # timestamps 1.7e12 + i
    by_time = kafka_pipeline(f"{unique}-ts", src.bootstrap, dst.bootstrap,
                             **{"source.topics": topic, "source.start.position": "timestamp",
                                "source.start.timestamp.ms": 1_700_000_000_000 + 400, "sink.topic": f"{topic}-ts"})
    driver = make_driver(spark, tmp_path / "ts", by_time)
    try:
        assert run_until(driver, 100) == 100
    finally:
        driver.close()
    got = consume_all(dst.bootstrap, f"{topic}-ts", [0], 100)
    assert [int(m.value().decode().rsplit("-", 1)[1]) for m in got] == list(range(400, 500))

    # tansu answers "latest" as (base offset of the last stored batch + 1), so the last record
    # before the start goes in a batch of its own to make its answer the true end.
    single = f"{topic}-single"
    create_topic(src.bootstrap, single, 1)
    produce(src.bootstrap, single, 20, 1)
    produce(src.bootstrap, single, 1, 1, start=20)
    latest = kafka_pipeline(f"{unique}-latest", src.bootstrap, dst.bootstrap,
                            **{"source.topics": single, "source.start.position": "latest", "sink.topic": f"{topic}-l"})
    driver = make_driver(spark, tmp_path / "latest", latest)
    try:
        driver.run_epoch()  # resolves "latest" and persists it before any record arrives
        assert _partition_offsets(driver) == [{"offset": 20}]
    finally:
        driver.close()
    produce(src.bootstrap, single, 50, 1, start=21)  # written while the connector is down
    driver = make_driver(spark, tmp_path / "latest", latest)
    try:
        assert run_until(driver, 50) == 50  # nothing skipped by re-resolving "latest"
    finally:
        driver.close()
    got = consume_all(dst.bootstrap, f"{topic}-l", [0], 50)
    assert [int(m.value().decode().rsplit("-", 1)[1]) for m in got] == list(range(21, 71))


def produce_with_one_oversized(bootstrap: str, topic: str, count: int, oversized: int) -> None:
    """``count`` small records keyed by index into a 1-partition topic; record ``oversized`` is 5000 B."""
    from confluent_kafka import Producer

    create_topic(bootstrap, topic, 1)
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        p.produce(topic, (b"x" * 5000) if i == oversized else f"small-{i}".encode(), key=str(i).encode(), partition=0)
    assert p.flush(10) == 0


def test_rejected_record_goes_to_dead_letter_topic_and_offsets_advance(kafka_pair, spark, tmp_path, unique):
    src, dst = kafka_pair
    topic = f"dlq-{unique}"
    produce_with_one_oversized(src.bootstrap, topic, 10, oversized=4)
    pipeline = kafka_pipeline(unique, src.bootstrap, dst.bootstrap, **{
        "source.topics": topic, "sink.topic": f"{topic}-out",
        "sink.producer.override.message.max.bytes": 2000,  # the 5000-byte record is refused
        "dlq.producer.override.message.max.bytes": 1_000_000,
        "errors.deadletterqueue.topic.name": f"{topic}-dlq", "errors.retry.timeout": 300})
    driver = make_driver(spark, tmp_path, pipeline)
    try:
        assert _partition_offsets(driver) == []
        driver.run_epoch()  # the first epoch persists where the partition starts, before data
        assert _partition_offsets(driver) == [{"offset": -1}]
        results = driver.run_epoch()
        assert [r.state for r in results] == ["RUNNING"]
        assert results[0].stats["dead_lettered"] == 1 and results[0].stats["errors"] == 1
        assert driver.runtimes[0].offsets  # offsets advanced past the dead-lettered record
        assert _partition_offsets(driver) == [{"offset": 9}]
    finally:
        driver.close()
    out = consume_all(dst.bootstrap, f"{topic}-out", [0], 9)
    assert [m.key() for m in out] == [str(i).encode() for i in range(10) if i != 4]
    dead = consume_all(dst.bootstrap, f"{topic}-dlq", [0], 1)
    assert len(dead) == 1 and dead[0].value() == b"x" * 5000
    headers = dict(dead[0].headers())
    assert headers["__connect.errors.topic"] == topic.encode()
    assert headers["__connect.errors.offset"] == b"4"
    assert b"MSG_SIZE_TOO_LARGE" in headers["__connect.errors.exception.message"]


def test_rejected_record_without_tolerance_fails_the_task_and_keeps_its_offset(kafka_pair, spark, tmp_path, unique):
    src, dst = kafka_pair
    topic = f"fail-{unique}"
    produce_with_one_oversized(src.bootstrap, topic, 5, oversized=2)
    pipeline = kafka_pipeline(unique, src.bootstrap, dst.bootstrap, **{
        "source.topics": topic, "sink.topic": f"{topic}-out",
        "sink.producer.override.message.max.bytes": 2000, "errors.retry.timeout": 300})
    driver = make_driver(spark, tmp_path, pipeline)
    try:
        driver.run_epoch()  # persists the start position
        results = driver.run_epoch()
        assert results[0].state == "FAILED"
        assert f"{topic}[0]@{{'offset': 2}}" in results[0].trace
        assert _partition_offsets(driver) == [{"offset": -1}]  # nothing past the failed record
        assert driver.runtimes[0].tasks[0].state == "FAILED"
        assert driver.run_epoch() == []  # a failed pair is not scheduled again
    finally:
        driver.close()


def test_delivery_failures_are_matched_to_records_and_nothing_is_lost(kafka_pair, spark, tmp_path, unique):
    """Target goes down mid-stream with a finite message.timeout.ms: delivery reports fail
    asynchronously, each tied to its own record, as *transient* failures: they are re-sent, never
    skipped, nothing is committed past them; past errors.retry.timeout the pair fails as
    retriable (the worker restarts it), and a restart against the recovered target delivers
    every record.

    The first phase drives the task pair in this process (one runner across both epochs) so the
    failure surfaces in delivery reports rather than in a restarted task's metadata lookup.
    """
    from kafka_brokers import kafka_broker

    from connect.tasks.plan import PairPlan
    from connect.tasks.policy import RunnerPolicy
    from connect.tasks.runner import TaskPairRunner
    from connectors.kafka import KafkaSinkTask, KafkaSourceTask
    from worker.stores.store import OffsetStore

    src, _ = kafka_pair
    topic = f"down-{unique}"
    create_topic(src.bootstrap, topic, 1)
    produce(src.bootstrap, topic, 100, 1)
    target = kafka_broker(log_path=tmp_path / "target.log").start()
    pipeline = kafka_pipeline(unique, src.bootstrap, target.bootstrap, **{
        "source.topics": topic, "sink.producer.override.message.timeout.ms": 1500,
        "errors.retry.timeout": 500, "epoch.max.ms": 2000})
    runner = TaskPairRunner(PairPlan(
        connector=unique, task_id=0, source=KafkaSourceTask(), sink=KafkaSinkTask(),
        source_config={**pipeline.source_config, "task.assignment": f"{topic}:0"},
        sink_config=pipeline.sink_config, policy=RunnerPolicy(epoch_max_ms=2000, retry_timeout_ms=500)))
    try:
        positioning = runner.run_epoch(0)
        assert [v for k, v in positioning.offsets.items() if '"topic.identity"' not in k] == [{"offset": -1}]
        committed = {}
        for epoch in range(1, 6):  # epochs end without draining: acknowledgements may come an epoch later
            first = runner.run_epoch(epoch)
            assert first.state == "RUNNING", first.trace
            committed.update(first.offsets)
            if [o["offset"] for o in committed.values()] == [99]:
                break
        assert [o["offset"] for o in committed.values()] == [99]
        target.stop()
        produce(src.bootstrap, topic, 100, 1, start=100)
        down = []
        for epoch in range(6, 12):
            down.append(runner.run_epoch(epoch))
            if down[-1].state == "FAILED":
                break
    finally:
        runner.stop()
    second = down[-1]
    assert second.state == "FAILED" and second.retriable
    assert "errors.retry.timeout=500 ms" in second.trace
    assert "timed out after 1500 ms (producer.override.message.timeout.ms)" in second.trace  # the sink's timeout
    assert sum(r.stats["errors"] + r.stats["skipped"] for r in down) == 0  # transient: never skipped
    assert sum(r.stats["transient"] for r in down) >= 100
    assert all(r.offsets == {} for r in down)  # nothing past offset 99
    store = OffsetStore(tmp_path)
    store.commit(unique, committed)
    store.close()

    target = kafka_broker(port=target.port, log_path=tmp_path / "target2.log").start()  # a new, empty cluster
    try:
        driver = make_driver(spark, tmp_path, pipeline)  # resumes after offset 99
        try:
            assert run_until(driver, 100) == 100
        finally:
            driver.close()
        got = consume_all(target.bootstrap, topic, [0], 100)
        assert [m.key() for m in got] == [f"key-{i}".encode() for i in range(100, 200)]
    finally:
        target.stop()


def test_topic_discovered_while_running_is_read_from_its_start_even_across_a_restart(kafka_pair, spark, tmp_path,
                                                                                       unique):
    src, dst = kafka_pair
    prefix = f"late-{unique}"
    create_topic(src.bootstrap, f"{prefix}-a", 1)
    pipeline = kafka_pipeline(unique, src.bootstrap, dst.bootstrap, **{
        "source.topics.regex": f"{prefix}-.*", "source.start.position": "latest", "epoch.max.ms": 700})
    driver = make_driver(spark, tmp_path, pipeline)
    try:
        driver.run_epoch()
        create_topic(src.bootstrap, f"{prefix}-b", 1)
        produce(src.bootstrap, f"{prefix}-b", 100, 1)
        for _ in range(20):  # until the new topic's start position is persisted
            driver.run_epoch()
            if any(f"{prefix}-b" in key for key in driver.runtimes[0].offsets):
                break
    finally:
        driver.close()
    # Restarted: the new topic now belongs to the initial set, whose start is "latest"; its
    # persisted start keeps it from skipping what was written before the first commit.
    driver = make_driver(spark, tmp_path, pipeline)
    try:
        run_until(driver, 100)
    finally:
        driver.close()
    assert len(consume_all(dst.bootstrap, f"{prefix}-b", [0], 100)) == 100


def test_two_connectors_share_one_driver_and_one_spark_job_per_epoch(kafka_pair, spark, tmp_path, unique):
    src, dst = kafka_pair
    first, second = f"{unique}-one", f"{unique}-two"
    for topic, parts in ((first, 2), (second, 1)):
        create_topic(src.bootstrap, topic, parts)
        produce(src.bootstrap, topic, 1000, parts)
    driver = make_driver(spark, tmp_path,
                         kafka_pipeline(first, src.bootstrap, dst.bootstrap,
                                        **{"source.topics": first, "sink.topic.template": "x.{topic}", "tasks.max": 2}),
                         kafka_pipeline(second, src.bootstrap, dst.bootstrap,
                                        **{"source.topics": second, "sink.topic.template": "x.{topic}"}))
    try:
        results = driver.run_epoch()
        assert sorted((r.connector, r.task) for r in results) == [(first, 0), (first, 1), (second, 0)]
        run_until(driver, 2000)
        assert [rt.records_total for rt in driver.runtimes] == [1000, 1000]
    finally:
        driver.close()
    assert len(consume_all(dst.bootstrap, f"x.{first}", range(2), 1000)) == 1000
    assert len(consume_all(dst.bootstrap, f"x.{second}", [0], 1000)) == 1000


def test_a_pair_stays_in_its_home_process_while_spark_rotates_python_workers(kafka_pair, spark, tmp_path, unique):
    """Spark hands idle Python workers out in turn; a pair must not follow them (and restart)."""
    src, dst = kafka_pair
    wide, narrow = f"{unique}-wide", f"{unique}-narrow"
    create_topic(src.bootstrap, wide, 3)
    create_topic(src.bootstrap, narrow, 1)
    produce(src.bootstrap, narrow, 3000, 1)
    # Three pairs at once leave (at least) three idle Python workers behind.
    warm = make_driver(spark, tmp_path / "warm", kafka_pipeline(wide, src.bootstrap, dst.bootstrap, **{
        "source.topics": wide, "tasks.max": 3, "epoch.max.ms": 300}))
    try:
        assert len({r.pid for r in warm.run_epoch()}) == 3
    finally:
        warm.close()
    driver = make_driver(spark, tmp_path / "one", kafka_pipeline(narrow, src.bootstrap, dst.bootstrap, **{
        "source.topics": narrow, "epoch.max.ms": 300, "epoch.max.records": 300}))
    try:
        results = [driver.run_epoch()[0] for _ in range(8)]
    finally:
        driver.close()
    assert all(r.state == "RUNNING" for r in results), [r.trace for r in results]
    assert [r.restarted for r in results[1:]] == [False] * 7, [(r.pid, r.restarted) for r in results]
    assert len({r.pid for r in results}) == 1


def _partition_offsets(driver) -> list:
    """The partitions' offsets, without the topic identities kept beside them (connectors.kafka.gaps)."""
    return [v for k, v in driver.runtimes[0].offsets.items() if '"topic.identity"' not in k]
