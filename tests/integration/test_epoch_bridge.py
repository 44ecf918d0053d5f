"""Between two epochs the pair keeps moving records (``epoch.bridge.ms``), over the wire: Apache Kafka ->
the real driver and Spark -> Apache Kafka. What moved between epochs is the next epoch's: counted in its
stats and budget, committed with its offsets, never before."""

from __future__ import annotations

import time

from kafka_util import consume_all, create_topic, produce
from pipeline_util import committed_positions, kafka_pipeline, make_driver

BUDGET = 2_000  # epoch.max.records


def _run(kafka_pair, spark, tmp_path, unique, bridge_ms: int) -> tuple[int, int, int, list, int]:
    """After an epoch: (records committed, records it left in flight, records at the target once
    it is quiet, the next epoch's results, records committed after that one)."""
    src, dst = kafka_pair
    topic = f"bridge-{bridge_ms}-{unique}"
    create_topic(src.bootstrap, topic, 2)
    create_topic(dst.bootstrap, f"out.{topic}", 2)
    produce(src.bootstrap, topic, 20_000, 2)
    driver = make_driver(spark, tmp_path / str(bridge_ms), kafka_pipeline(
        unique, src.bootstrap, dst.bootstrap, **{"source.topics": topic, "sink.topic": f"out.{topic}",
                                                 "epoch.max.records": BUDGET, "epoch.max.ms": 5_000,
                                                 "epoch.bridge.ms": bridge_ms}))
    try:
        driver.run_epoch()  # start positions
        driver.run_epoch()
        time.sleep(1.0)  # the first acknowledgements from tansu take up to ~1 s
        in_flight = sum(r.stats.get("in_flight", 0) for r in driver.run_epoch())
        committed = committed_positions(driver)
        at_target = len(consume_all(dst.bootstrap, f"out.{topic}", range(2), 0, timeout=10))  # until 1 s quiet
        assert committed_positions(driver) == committed, "nothing is committed between epochs"
        results = driver.run_epoch()
        return committed, in_flight, at_target, results, committed_positions(driver)
    finally:
        driver.close()


def test_the_pair_keeps_moving_between_epochs_and_the_next_epoch_counts_it(kafka_pair, spark, tmp_path, unique):
    committed, in_flight, at_target, results, after = _run(kafka_pair, spark, tmp_path, unique, 3_000)
    # Beyond what the epoch committed and left in flight: the next epoch's whole budget, moved meanwhile.
    assert at_target >= committed + in_flight + BUDGET, (committed, in_flight, at_target)
    assert sum(r.stats["records"] for r in results) == BUDGET, "the next epoch counted those records as its own"
    assert after >= committed + BUDGET, "and committed them"


def test_with_bridge_0_the_pair_pauses_between_epochs(kafka_pair, spark, tmp_path, unique):
    committed, in_flight, at_target, _, _ = _run(kafka_pair, spark, tmp_path, unique, 0)
    assert at_target <= committed + in_flight, (committed, in_flight, at_target)
