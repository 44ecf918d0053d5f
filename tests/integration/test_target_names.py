"""Dotted Kafka topic names into RocketMQ and Pulsar, over the wire: ``connect validate`` names the
target the broker would refuse before anything runs, the sinks' ``topic.illegal.chars=replace``
delivers every record under the mapped name, and a name found only while running (a regex) fails
its records with the same message instead of a broker refusal retried forever."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import orjson
import pytest
from kafka_util import create_topic, produce
from pipeline_util import make_driver, pair_pipeline, run_until
from rocketmq_util import consume_all
from typer.testing import CliRunner

from connect.errors import ConfigError
from worker.cli import app
from worker.pipeline import parse_pipeline

CONF = Path(__file__).resolve().parents[2] / "conf"


def _base(unique: str) -> str:
    return "o" + hashlib.sha1(unique.encode()).hexdigest()[:8]


def _validate(tmp_path: Path, document: dict) -> tuple[int, str]:
    """``connect validate`` on ``document`` written to a file: (exit code, everything it printed)."""
    path = tmp_path / f"{document['name']}.json"
    path.write_text(json.dumps(document))
    result = CliRunner().invoke(app, ["validate", str(path)])
    return result.exit_code, result.output  # stdout and stderr, as click 8.2+ gathers them


def _values(messages) -> set[bytes]:
    return {m.body for msgs in messages.values() for m in msgs}


def test_kafka_to_rocketmq_dotted_topics_validate_names_the_problem_and_the_shipped_conf_maps_them(
        kafka_pair, rocketmq_pair, spark, tmp_path, unique, caplog):
    ksrc, _ = kafka_pair
    _, dst = rocketmq_pair
    base, n = _base(unique), 400
    topics = [f"{base}.orders.created", f"{base}.orders.updated"]
    for i, topic in enumerate(topics):
        create_topic(ksrc.bootstrap, topic, 2)
        produce(ksrc.bootstrap, topic, n, 2, start=i * n)
    shipped = orjson.loads((CONF / "kafka-to-rocketmq.json").read_bytes())
    assert shipped["config"]["sink.topic.illegal.chars"] == "replace"  # the shipped example maps dotted names
    document = {"name": f"{base}-k2r", "config": {
        **shipped["config"], "source.bootstrap.servers": ksrc.bootstrap, "source.topics": ",".join(topics),
        "sink.namesrv.addr": dst.namesrv, "source.start.position": "earliest", "epoch.max.ms": "1500"}}

    strict = {**document, "config": {k: v for k, v in document["config"].items() if k != "sink.topic.illegal.chars"}}
    code, text = _validate(tmp_path, strict)
    assert code == 1, text
    for topic in topics:  # each source topic, the name RocketMQ refuses, the rule and the fix with its result
        mapped = topic.replace(".", "_")
        assert (f"source topic {topic!r} maps to RocketMQ topic {topic!r}, which RocketMQ refuses: topic names may "
                f"only hold [%|a-zA-Z0-9_-] (not '.')") in text, text
        assert f"topic.illegal.chars=replace (it becomes {mapped!r})" in text, text

    code, text = _validate(tmp_path, document)
    assert code == 0 and "OK" in text, text  # validate and run agree: the same parse refuses or accepts
    caplog.set_level(logging.INFO, logger="connectors.rocketmq.sink")
    driver = make_driver(spark, tmp_path / "run", parse_pipeline(document))
    try:
        assert run_until(driver, 2 * n) >= 2 * n
    finally:
        driver.close()
    announced = [r.getMessage() for r in caplog.records if "renamed (topic.illegal.chars=replace)" in r.getMessage()]
    assert len(announced) == 1 and all(f"{t} -> {t.replace('.', '_')}" in announced[0] for t in topics), announced
    for i, topic in enumerate(topics):
        arrived = consume_all(dst, topic.replace(".", "_"))
        assert sorted(arrived) == [0, 1]  # created with the source's partition count
        assert _values(arrived) == {f"value-{j}".encode() for j in range(i * n, (i + 1) * n)}


def test_kafka_to_pulsar_dotted_topics_keep_their_dots_and_a_slash_is_named_then_replaced(
        kafka_pair, pulsar_pair, spark, tmp_path, unique):
    from pulsar_util import consume_all as pulsar_consume_all

    ksrc, _ = kafka_pair
    _, pdst = pulsar_pair
    base, n = _base(unique), 300
    topic = f"{base}.orders.created"
    create_topic(ksrc.bootstrap, topic, 1)
    produce(ksrc.bootstrap, topic, n, 1)
    source = {"connector.class": "kafka", "bootstrap.servers": ksrc.bootstrap, "topics": topic,
              "start.position": "earliest"}
    sink = {"connector.class": "pulsar", "service.url": pdst.service_url}
    # Dots are legal in Pulsar names: the identity mapping passes as it is.
    parse_pipeline({"name": f"{base}-id", "config": {
        **{f"source.{k}": v for k, v in source.items()}, **{f"sink.{k}": v for k, v in sink.items()}}})
    # A '/' in the local name is another topic to Pulsar (a v1 name): named before anything runs.
    folder = {**sink, "topic.template": "persistent://public/default/kafka/{topic}"}
    with pytest.raises(ConfigError) as refused:
        pair_pipeline(f"{base}-k2p", source, folder)
    mapped = f"persistent://public/default/kafka_{topic}"
    assert ("maps to Pulsar topic 'persistent://public/default/kafka/orders', which Pulsar refuses: the topic's "
            "local name may not hold '/'") in str(refused.value)
    assert "topic.illegal.chars=replace (it becomes 'persistent://public/default/kafka_orders')" in str(refused.value)
    driver = make_driver(spark, tmp_path, pair_pipeline(f"{base}-k2p", source, {**folder, "topic.illegal.chars": "replace"}))
    try:
        assert run_until(driver, n) >= n
    finally:
        driver.close()
    arrived = pulsar_consume_all(pdst, mapped, 0, n)[-1]
    assert sorted(m.data() for m in arrived) == sorted(f"value-{i}".encode() for i in range(n))


def test_a_regex_source_topic_rocketmq_refuses_fails_its_records_with_the_fix_not_a_broker_refusal(
        kafka_pair, rocketmq_pair, spark, tmp_path, unique, caplog):
    ksrc, _ = kafka_pair
    _, dst = rocketmq_pair
    base = _base(unique)
    topic = f"{base}.late"
    create_topic(ksrc.bootstrap, topic, 1)
    produce(ksrc.bootstrap, topic, 20, 1)
    pipeline = pair_pipeline(f"{base}-regex", {"connector.class": "kafka", "bootstrap.servers": ksrc.bootstrap,
                                               "topics.regex": rf"{base}\..*", "start.position": "earliest"},
                             {"connector.class": "rocketmq", "namesrv.addr": dst.namesrv, "auto.create.topics": "true"},
                             **{"errors.retry.timeout": "60000"})  # a retried refusal would outlast the test
    caplog.set_level(logging.INFO, logger="connectors.rocketmq.sink")
    driver = make_driver(spark, tmp_path, pipeline)  # names unknown before running: validate could not tell
    try:
        failed = []
        for _ in range(6):
            failed = [r.trace for r in driver.run_epoch() if r.state != "RUNNING"]
            if failed:
                break
    finally:
        driver.close()
    assert failed, "the pair should fail at once: the name will never be accepted"
    expected = (f"source topic {topic!r} maps to RocketMQ topic {topic!r}, which RocketMQ refuses: topic names may only "
                f"hold [%|a-zA-Z0-9_-] (not '.'). Fix: set the sink's topic.illegal.chars=replace (it becomes "
                f"{topic.replace('.', '_')!r})")
    assert expected in failed[0], failed[0]
    assert any(expected in r.getMessage() for r in caplog.records if r.levelno == logging.ERROR)  # told at start


def test_a_replication_flow_creates_the_target_it_writes_to_under_the_prefix_policy(kafka_pair, rocketmq_pair, spark,
                                                                                     tmp_path, unique):
    """MM2's prefix policy writes K.<topic>, which RocketMQ takes as K_<topic>: that target, not the
    source's own name, is the one created with the source's partition count before the first record
    (else nothing creates it and the sink waits for its route until the pair fails)."""
    ksrc, _ = kafka_pair
    _, dst = rocketmq_pair
    topic, n = _base(unique), 200
    create_topic(ksrc.bootstrap, topic, 3)
    produce(ksrc.bootstrap, topic, n, 3)
    driver = make_driver(spark, tmp_path, pair_pipeline(
        f"{topic}-flow", {"connector.class": "kafka", "bootstrap.servers": ksrc.bootstrap, "topics": topic,
                          "start.position": "earliest", "cluster.alias": "K"},
        {"connector.class": "rocketmq", "namesrv.addr": dst.namesrv, "cluster.alias": "R",
         "auto.create.topics": "true", "topic.illegal.chars": "replace"}, **{"replication.policy": "prefix"}))
    try:
        assert run_until(driver, n) >= n
    finally:
        driver.close()
    arrived = consume_all(dst, f"K_{topic}")
    assert sorted(arrived) == [0, 1, 2]
    assert _values(arrived) == {f"value-{i}".encode() for i in range(n)}
