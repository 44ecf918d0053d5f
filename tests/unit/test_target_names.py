"""Target name rules of the RocketMQ and Pulsar sinks, ``topic.illegal.chars`` and where the checks
run (the sink's validate, the pipeline's, the announcement at start)."""

from __future__ import annotations

import logging

import pytest

from connect.errors import ConfigError
from connect.sink.naming import IllegalTopicName, TargetNames, naming_issues
from connectors.pulsar.names import PULSAR_NAMES
from connectors.pulsar.names import topic_problem as pulsar_problem
from connectors.rocketmq import metadata
from connectors.rocketmq.names import ROCKETMQ_NAMES
from connectors.rocketmq.names import topic_problem as rocketmq_problem
from connectors.rocketmq.sink import RocketMQSinkConnector
from worker.pipeline import parse_pipeline


def _names(rules, **config) -> TargetNames:
    return TargetNames({"topic": "", "topic.template": "{topic}", "topic.illegal.chars": "fail",
                        "topic.illegal.chars.replacement": "_", **config}, rules)


@pytest.mark.parametrize("name", ["orders", "orders_created", "a-b", "%RETRY%group", "a|b", "rmq_sys_replicator_heartbeat",
                                  "TBW102", "x" * 127])
def test_rocketmq_accepts_what_its_client_sends_to(name):
    assert rocketmq_problem(name) is None


@pytest.mark.parametrize("name, why", [
    ("orders.created", "not '.'"), ("persistent://public/default/x", "not '/' ':'"),
    ("a b", "not ' '"), ("café", "not 'é'"), ("", "blank"), ("   ", "blank"), ("x" * 128, "at most 127"),
    ("SCHEDULE_TOPIC_XXXX", "internal topic"), ("RMQ_SYS_TRANS_HALF_TOPIC", "internal topic"),
])
def test_rocketmq_refuses_with_the_reason(name, why):
    assert why in rocketmq_problem(name)


def test_rocketmq_source_may_name_an_internal_topic_a_sink_may_not_send_to():
    assert rocketmq_problem("SCHEDULE_TOPIC_XXXX", sending=False) is None


@pytest.mark.parametrize("name", ["persistent://public/default/orders.created", "non-persistent://t/ns/x",
                                  "persistent://pu.bl=ic/def:ault/x", "persistent://public/default/x%y|z é",
                                  "persistent://public/default/x-partition-3"])
def test_pulsar_accepts_dots_and_any_local_character_but_slash(name):
    assert pulsar_problem(name) is None


@pytest.mark.parametrize("name, why", [
    ("persistent://public/default/a/b", "may not hold '/'"), ("http://public/default/x", "domain"),
    ("persistent://public/x", "domain://tenant/namespace/topic"), ("persistent://public/default/ ", "non-blank"),
    ("persistent://my tenant/ns/x", "tenant name is one or more of [A-Za-z0-9_=:.-] (not ' ')"),
    ("persistent://t//x", "namespace name"),
])
def test_pulsar_refuses_or_misreads_with_the_reason(name, why):
    assert why in pulsar_problem(name)


def test_pulsar_names_are_completed_as_the_sink_completes_them():
    names = _names(PULSAR_NAMES)
    assert names("orders.created") == "persistent://public/default/orders.created"
    assert names("t/ns/x") == "persistent://t/ns/x"
    with pytest.raises(IllegalTopicName, match="'persistent://public/default/a/b'.*may not hold '/'"):
        names("a/b")  # Pulsar itself refuses the short name a/b; the sink would make it a v1 name


def test_replace_maps_as_the_metadata_connectors_do():
    names = _names(ROCKETMQ_NAMES, **{"topic.illegal.chars": "replace"})
    for topic in ("orders.created", "persistent://tenant/ns/orders.v1", "a b/c", "plain"):
        assert names(topic) == metadata.local_topic_name(topic)[0]  # one rule: data and config sync meet
    templated = _names(ROCKETMQ_NAMES, **{"topic.illegal.chars": "replace", "topic.template": "dc1.{topic}"})
    assert templated("persistent://t/ns/orders.created") == "dc1_orders_created"
    fixed = _names(ROCKETMQ_NAMES, **{"topic.illegal.chars": "replace", "topic": "all.orders",
                                      "topic.illegal.chars.replacement": "-"})
    assert fixed("anything") == "all-orders"


def test_replace_in_pulsar_names_only_what_pulsar_refuses():
    names = _names(PULSAR_NAMES, **{"topic.illegal.chars": "replace",
                                    "topic.template": "persistent://my tenant/ns/kafka/{topic}"})
    assert names("orders.created") == "persistent://my_tenant/ns/kafka_orders.created"
    broken = _names(PULSAR_NAMES, **{"topic.illegal.chars": "replace", "topic.template": "persistent://public/{topic}"})
    with pytest.raises(IllegalTopicName, match="not domain://tenant/namespace/topic.*name a legal target"):
        broken("orders")  # no replacement fixes a missing namespace: the message does not offer one


def test_fail_says_which_source_topic_maps_to_which_name_and_the_fix():
    with pytest.raises(IllegalTopicName) as refused:
        _names(ROCKETMQ_NAMES)("orders.created")
    assert str(refused.value) == (
        "source topic 'orders.created' maps to RocketMQ topic 'orders.created', which RocketMQ refuses: topic names "
        "may only hold [%|a-zA-Z0-9_-] (not '.'). Fix: set the sink's topic.illegal.chars=replace (it becomes "
        "'orders_created'), or name a legal target with topic / topic.template")
    too_long = _names(ROCKETMQ_NAMES, **{"topic.illegal.chars": "replace"})
    with pytest.raises(IllegalTopicName, match="longer than RocketMQ's 127 characters, even with refused characters"):
        too_long("a." * 70)


def test_plan_finds_collisions_unless_the_config_merges_on_purpose():
    names = _names(ROCKETMQ_NAMES, **{"topic.illegal.chars": "replace"})
    targets, refused, collisions = names.plan(["a.b", "a_b", "c.d", "a.b"])
    assert targets == {"a.b": "a_b", "a_b": "a_b", "c.d": "c_d"} and not refused
    assert collisions == {"a_b": ["a.b", "a_b"]}
    assert names.plan(["persistent://t1/ns/x", "persistent://t2/ns/x"])[2] == {"x": ["persistent://t1/ns/x",
                                                                                       "persistent://t2/ns/x"]}
    assert not _names(ROCKETMQ_NAMES, topic="all").plan(["a", "b"])[2]  # a fixed topic merges on purpose
    assert not _names(ROCKETMQ_NAMES, **{"topic.template": "all"}).plan(["a", "b"])[2]


def test_announce_logs_each_rename_refusal_and_collision_once(caplog):
    log = logging.getLogger("test.naming")
    caplog.set_level(logging.INFO, logger="test.naming")
    names = _names(ROCKETMQ_NAMES, **{"topic.illegal.chars": "replace"})
    names.announce(["orders.created", "plain"], log, "connector c")
    names.announce(["orders.created", "plain"], log, "connector c")  # nothing new: nothing said
    names.announce(["orders_created", "x" * 200], log, "connector c")
    said = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert said[0] == ("INFO", "connector c: target topics renamed (topic.illegal.chars=replace): "
                               "orders.created -> orders_created")
    assert [level for level, _ in said[1:]] == ["ERROR", "ERROR"] and len(said) == 3
    assert "longer than RocketMQ's 127" in said[1][1]
    assert "source topics 'orders.created', 'orders_created' all map to RocketMQ topic 'orders_created'" in said[2][1]


def test_sink_validate_catches_fixed_names_templates_and_replacements_alone():
    base = {"namesrv.addr": "127.0.0.1:9876"}
    assert RocketMQSinkConnector.validate({**base, "topic.template": "backup_{topic}"}) == []
    assert RocketMQSinkConnector.validate({**base, "topic.template": "backup.{topic}",
                                           "topic.illegal.chars": "replace"}) == []
    (issue,) = RocketMQSinkConnector.validate({**base, "topic.template": "backup.{topic}"})
    assert issue.key == "topic.template" and "(it becomes 'backup_orders')" in issue.message
    (issue,) = RocketMQSinkConnector.validate({**base, "topic": "a.b"})
    assert issue.key == "topic" and issue.message.startswith("every source topic maps to RocketMQ topic 'a.b'")
    (issue,) = RocketMQSinkConnector.validate({**base, "topic.illegal.chars": "replace",
                                               "topic.illegal.chars.replacement": "."})
    assert issue.key == "topic.illegal.chars.replacement"
    (issue,) = RocketMQSinkConnector.validate({**base, "topic.illegal.chars": "rename"})
    assert issue.key == "topic.illegal.chars" and "must be one of fail, replace" in issue.message  # said once


def test_naming_issues_with_source_topics_name_each_one():
    config = {"topic.template": "{topic}"}
    issues = naming_issues(config, ROCKETMQ_NAMES, ["ok", "a.b", "c.d"])
    assert [i.message.split(" maps")[0] for i in issues] == ["source topic 'a.b'", "source topic 'c.d'"]
    assert naming_issues({**config, "topic.illegal.chars": "replace"}, ROCKETMQ_NAMES, ["a.b", "c.d"]) == []


KAFKA_SOURCE = {"source.connector.class": "kafka", "source.bootstrap.servers": "127.0.0.1:9092"}


def _pipeline(source=KAFKA_SOURCE, **config):
    sink = {"sink.connector.class": "rocketmq", "sink.namesrv.addr": "127.0.0.1:9876"}
    return parse_pipeline({"name": "names", "config": {**source, **sink, **config}})


def test_pipeline_checks_the_names_the_sink_really_receives():
    with pytest.raises(ConfigError, match="source topic 'A.orders' maps to RocketMQ topic 'A.orders'"):
        _pipeline(**{"source.topics": "orders", "source.cluster.alias": "A", "sink.cluster.alias": "B",
                     "replication.policy": "prefix"})  # MM2's prefix policy writes A.orders
    _pipeline(**{"source.topics": "orders", "source.cluster.alias": "A", "sink.cluster.alias": "B",
                 "replication.policy": "prefix", "replication.policy.separator": "_"})
    _pipeline(**{"source.topics.regex": "orders\\..*"})  # unknown before running: checked then
    with pytest.raises(ConfigError, match="errors.deadletterqueue.topic.name: every dead-lettered record goes to "
                                          "RocketMQ topic 'orders.dlq'"):
        _pipeline(**{"source.topics": "orders", "errors.deadletterqueue.topic.name": "orders.dlq"})
    _pipeline(**{"source.topics": "orders", "errors.deadletterqueue.topic.name": "orders.dlq",
                 "sink.topic.illegal.chars": "replace"})  # written with the sink's connector: replaced too
    with pytest.raises(ConfigError, match="offset.syncs.topic: every offset sync goes to"):
        _pipeline(**{"source.topics": "orders", "offset.syncs.topic": "mm2-offset-syncs.B.internal"})


def test_pipeline_from_pulsar_and_rocketmq_sources():
    pulsar = {"source.connector.class": "pulsar", "source.service.url": "pulsar://127.0.0.1:6650",
              "source.topics": "orders.created"}
    with pytest.raises(ConfigError, match="'persistent://public/default/orders.created' maps to RocketMQ topic "
                                          "'persistent://public/default/orders.created'.*it becomes 'orders_created'"):
        _pipeline(pulsar)  # Pulsar records carry full names
    _pipeline(pulsar, **{"sink.topic.illegal.chars": "replace"})
    rocketmq = {"source.connector.class": "rocketmq", "source.namesrv.addr": "127.0.0.1:9877",
                "source.topics": "orders,TagA;audit"}
    _pipeline(rocketmq, **{"sink.topic.template": "{topic}_copy"})
    with pytest.raises(ConfigError, match="source topics 'orders.copy', 'orders_copy' all map to RocketMQ topic "
                                          "'orders_copy'"):
        _pipeline(**{"source.topics": "orders.copy,orders_copy", "sink.topic.illegal.chars": "replace"})
