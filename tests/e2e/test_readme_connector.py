"""docs/writing-a-connector.md's example runs as printed (issue 25): with a DLQ configured its
sink used to be instantiated again as the dead-letter writer, refused its dead letters, and the pair
went FAILED; and a tombstone (value None) made it fail on ``None.upper()``. Here it runs through the
real driver and Spark, from a Kafka topic on tansu, its dead letters kept by the Kafka sink's side
writer (``dlq.connector.class=kafka``). What must hold is in ``tests/readme_connector.py``."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from kafka_util import consume_all, create_topic
from pipeline_util import make_driver, partition_offsets
from readme_connector import RECORDS, check_outcome, pipeline_config, readme_sink

from connect.clientpolicy import ClientConfigPolicy
from worker.pipeline import parse_pipeline

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def readme_module(tmp_path):
    with readme_sink(tmp_path) as module:
        yield module


def test_readme_sink_handles_a_tombstone_and_dead_letters_what_it_refuses(kafka_pair, spark, tmp_path, unique,
                                                                         readme_module):
    from pyspark import cloudpickle

    src, dst = kafka_pair
    module = readme_module
    cloudpickle.register_pickle_by_value(module)  # Spark's Python workers cannot import it from tmp_path
    topic, dlq_topic = f"upper-{unique}", f"upper-{unique}-dlq"
    create_topic(src.bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": src.bootstrap})
    for key, value in RECORDS:
        producer.produce(topic, value, key, partition=0)
    assert producer.flush(30) == 0
    out = tmp_path / "out" / "orders.txt"
    out.parent.mkdir()
    config = pipeline_config(topic=topic, out_path=out, dlq_topic=dlq_topic,
                             source={"connector.class": "kafka", "bootstrap.servers": src.bootstrap},
                             dlq={"connector.class": "kafka", "bootstrap.servers": dst.bootstrap})
    pipeline = parse_pipeline({"name": unique, "config": {**config, "epoch.max.ms": "1500"}},
                              client_policy=ClientConfigPolicy.from_settings(allowed_paths=str(out.parent)))
    driver = make_driver(spark, tmp_path / "data", pipeline)
    dead_lettered = 0
    try:
        for _ in range(20):
            results = driver.run_epoch()
            assert all(r.state == "RUNNING" for r in results), [r.trace for r in results]
            dead_lettered += sum(r.stats.get("dead_lettered", 0) for r in results)
            committed = [o["offset"] + 1 for o in partition_offsets(driver.runtimes[0].offsets) if o]
            if committed == [len(RECORDS)]:
                break
    finally:
        driver.close()
    dead = [(m.key(), m.value(), dict(m.headers())) for m in consume_all(dst.bootstrap, dlq_topic, [0], 1)]
    check_outcome(out, dead, committed[0], dead_lettered)
