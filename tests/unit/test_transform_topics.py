"""Where a topic's records go, known before any record: each routing transform's ``topic_for``,
predicates decided by the topic or not, the chain's set of names per source topic (with the
replication naming first), and the pipeline refusing a renamed target the sink's broker refuses."""

from __future__ import annotations

import logging
import pickle

import pytest

from connect.errors import ConfigError
from connect.tasks.policy import RunnerPolicy
from connect.tasks.stages import target_counts, target_routes
from connect.transforms import Transformation, TransformsConfig, TransformSpec, load_transforms
from connect.transforms.base import UNKNOWN
from connect.transforms.routing import RegexRouter, TimestampRouter
from connect.transforms.topics import TopicRoute, routed_issues, topic_routes, unknown_note
from worker.pipeline import parse_pipeline

ROUTE = {"transforms.route.type": "RegexRouter", "transforms.route.regex": r"orders\.(.*)",
         "transforms.route.replacement": "dc1_orders_$1"}


def configured(cls, **params):
    transform = cls()
    transform.configure(cls.config_def().parse(params))
    return transform


def names(config: dict, *topics: str) -> dict[str, object]:
    """topic -> set of its possible target names, or ("UNKNOWN", names received, label)."""
    out = {}
    for topic, route in topic_routes(load_transforms(config), topics).items():
        out[topic] = set(route.names) if route.unknown is None else ("UNKNOWN", set(route.names), route.unknown)
    return out


def test_regex_router_is_decided_by_the_topic():
    router = configured(RegexRouter, regex=r"orders\.(?P<region>.*)",
                        replacement="dc1_${region}")
    assert router.topic_for("orders.eu") == "dc1_eu"
    assert router.topic_for("payments") == "payments"  # not a whole match: kept


def test_timestamp_router_depends_on_each_record_unless_its_format_has_no_timestamp():
    assert configured(TimestampRouter).topic_for("orders") is UNKNOWN
    assert configured(TimestampRouter, **{"topic.format": "${topic}_archive"}).topic_for("orders") == "orders_archive"


def test_filter_drops_field_transforms_keep_and_a_custom_transform_is_unknown():
    assert names({"transforms": "f", "transforms.f.type": "Filter"}, "orders") == {"orders": set()}
    kept = {"transforms": "h,m", "transforms.h.type": "InsertHeader", "transforms.h.header": "x",
            "transforms.h.value.literal": "1", "transforms.m.type": "MaskField$Value", "transforms.m.fields": "card"}
    assert names(kept, "orders") == {"orders": {"orders"}}

    class Custom(Transformation):
        configured = False

        def configure(self, config):
            Custom.configured = True

    chain = TransformsConfig((TransformSpec("mine", "Custom", Custom, {}),))
    route = topic_routes(chain, ["orders"])["orders"]
    assert route == TopicRoute({"orders": None}, unknown="transforms.mine (Custom)")
    assert not Custom.configured  # not asked: nothing of a plugin that cannot tell runs on the driver

    class Suffix(Transformation):
        def configure(self, config):
            self.suffix = config["suffix"]

        def topic_for(self, topic):
            return topic + self.suffix

    class Broken(Suffix):
        def configure(self, config):
            raise RuntimeError("no")

    chain = TransformsConfig((TransformSpec("sfx", "Suffix", Suffix, {"suffix": "_x"}),
                              TransformSpec("bad", "Broken", Broken, {})))
    route = topic_routes(chain, ["orders"])["orders"]
    assert route.names == {"orders_x": chain.transforms[0]} and route.unknown == "transforms.bad (Broken)"
    assert pickle.loads(pickle.dumps(UNKNOWN)) is UNKNOWN


def test_a_router_under_topic_name_matches_is_decided_by_the_topic():
    guarded = {"transforms": "route", **ROUTE, "transforms.route.predicate": "eu",
               "predicates": "eu", "predicates.eu.type": "TopicNameMatches", "predicates.eu.pattern": r".*\.eu"}
    assert names(guarded, "orders.eu", "orders.us") == {"orders.eu": {"dc1_orders_eu"}, "orders.us": {"orders.us"}}
    negated = {**guarded, "transforms.route.negate": "true"}
    assert names(negated, "orders.eu", "orders.us") == {"orders.eu": {"orders.eu"}, "orders.us": {"dc1_orders_us"}}


@pytest.mark.parametrize("predicate", [{"predicates.p.type": "HasHeaderKey", "predicates.p.name": "route"},
                                       {"predicates.p.type": "RecordIsTombstone"}])
def test_a_router_under_a_record_predicate_gives_both_names(predicate):
    config = {"transforms": "route", **ROUTE, "transforms.route.predicate": "p", "predicates": "p", **predicate}
    assert names(config, "orders.eu") == {"orders.eu": {"orders.eu", "dc1_orders_eu"}}


def test_filter_under_predicates():
    by_topic = {"transforms": "drop", "transforms.drop.type": "Filter", "transforms.drop.predicate": "audit",
                "predicates": "audit", "predicates.audit.type": "TopicNameMatches", "predicates.audit.pattern": "audit.*"}
    assert names(by_topic, "audit_log", "orders") == {"audit_log": set(), "orders": {"orders"}}
    tombstones = {"transforms": "drop", "transforms.drop.type": "Filter", "transforms.drop.predicate": "t",
                  "predicates": "t", "predicates.t.type": "RecordIsTombstone"}
    assert names(tombstones, "orders") == {"orders": {"orders"}}  # the other records stay


def test_the_chain_follows_every_name_and_stops_at_the_first_per_record_transform():
    twice = {"transforms": "route,again", **ROUTE, "transforms.again.type": "RegexRouter",
             "transforms.again.regex": "dc1_(.*)", "transforms.again.replacement": "x_$1"}
    assert names(twice, "orders.eu", "other") == {"orders.eu": {"x_orders_eu"}, "other": {"other"}}
    then_time = {"transforms": "route,ts", **ROUTE, "transforms.ts.type": "TimestampRouter"}
    assert names(then_time, "orders.eu") == {
        "orders.eu": ("UNKNOWN", {"dc1_orders_eu"}, "transforms.ts (TimestampRouter)")}


def test_target_routes_apply_the_replication_naming_first():
    policy = RunnerPolicy(source_alias="A", target_alias="B", topic_policy="prefix")
    transforms = load_transforms({"transforms": "route", "transforms.route.type": "RegexRouter",
                                  "transforms.route.regex": r"A\.(.*)", "transforms.route.replacement": "from_a_$1"})
    routes = target_routes(policy, transforms, ["orders", "B.orders"])
    assert {t: set(r.names) for t, r in routes.items()} == {"orders": {"from_a_orders"}, "B.orders": set()}
    assert target_counts(routes, {"orders": 3, "B.orders": 2}) == {"from_a_orders": 3}
    merged = load_transforms({"transforms": "route", "transforms.route.type": "RegexRouter",
                              "transforms.route.regex": "orders_.*", "transforms.route.replacement": "orders"})
    routes = target_routes(RunnerPolicy(), merged, ["orders_eu", "orders_us"])
    assert target_counts(routes, {"orders_eu": 2, "orders_us": 5}) == {"orders": 5}  # the most partitions


def test_routed_issues_key_a_renamed_name_by_the_transform_and_tell_unknown_targets():
    transforms = load_transforms({"transforms": "route,ts", **ROUTE, "transforms.route.predicate": "eu",
                                  "transforms.ts.type": "TimestampRouter", "transforms.ts.predicate": "us",
                                  "predicates": "eu,us", "predicates.eu.type": "TopicNameMatches",
                                  "predicates.eu.pattern": r".*\.eu", "predicates.us.type": "TopicNameMatches",
                                  "predicates.us.pattern": r".*\.us"})
    routes = target_routes(RunnerPolicy(), transforms, ["orders.eu", "orders.us", "plain"])
    from connect.errors import ConfigIssue

    def check(received):
        return [ConfigIssue("sink.topic.template", None, f"{n!r} refused") for n in received if n != "plain"]

    issues = routed_issues(routes, check)
    assert issues == [
        ConfigIssue("transforms.route.replacement", None,
                    "transforms.route (RegexRouter) renames the records of source topic 'orders.eu' to "
                    "'dc1_orders_eu'; 'dc1_orders_eu' refused"),
        ConfigIssue("sink.topic.template", None, "'orders.us' refused (checked under the name transforms.ts "
                                                 "(TimestampRouter) receives: it names each record's topic itself)")]
    assert unknown_note(routes).startswith("transforms.ts (TimestampRouter) names the target of each record of "
                                           "'orders.us' from the record itself")
    assert unknown_note({"plain": routes["plain"]}) is None


ROCKETMQ = {"source.connector.class": "kafka", "source.bootstrap.servers": "127.0.0.1:9092",
            "sink.connector.class": "rocketmq", "sink.namesrv.addr": "127.0.0.1:9876"}


def test_pipeline_refuses_a_replacement_the_target_broker_refuses():
    config = {**ROCKETMQ, "source.topics": "orders", "transforms": "route", "transforms.route.type": "RegexRouter",
              "transforms.route.regex": "orders", "transforms.route.replacement": "dc1.orders"}
    with pytest.raises(ConfigError) as caught:
        parse_pipeline({"name": "renamed", "config": config})
    [issue] = caught.value.issues
    assert issue.key == "transforms.route.replacement"
    assert issue.message.startswith("transforms.route (RegexRouter) renames the records of source topic 'orders' to "
                                    "'dc1.orders'; source "
                                    "topic 'dc1.orders' maps to RocketMQ topic 'dc1.orders', which RocketMQ refuses")
    parse_pipeline({"name": "ok", "config": {**config, "transforms.route.replacement": "dc1_orders"}})
    # the source's own name is no longer the one checked: a dotted source renamed to a legal name passes
    parse_pipeline({"name": "ok", "config": {**config, "source.topics": "orders.eu", "transforms.route.regex":
                                             r"orders\.(.*)", "transforms.route.replacement": "dc1_$1"}})


def test_pipeline_refuses_a_replacement_pulsar_refuses():
    config = {"source.connector.class": "kafka", "source.bootstrap.servers": "127.0.0.1:9092", "source.topics": "orders",
              "sink.connector.class": "pulsar", "sink.service.url": "pulsar://127.0.0.1:6650",
              "transforms": "route", "transforms.route.type": "RegexRouter", "transforms.route.regex": "(.*)",
              "transforms.route.replacement": "dc1/$1"}
    with pytest.raises(ConfigError, match=r"transforms.route.replacement: transforms.route \(RegexRouter\) renames "
                                          r"the records of source topic 'orders' to 'dc1/orders'.*Pulsar refuses"):
        parse_pipeline({"name": "renamed", "config": config})


def test_pipeline_with_a_per_record_router_checks_the_name_it_receives_and_says_so():
    config = {**ROCKETMQ, "source.topics": "orders.eu", "transforms": "ts", "transforms.ts.type": "TimestampRouter",
              "transforms.ts.topic.format": "archive_${timestamp}"}
    with pytest.raises(ConfigError, match=r"sink.topic.template: source topic 'orders.eu' maps to RocketMQ topic "
                                          r"'orders.eu'.*\(checked under the name transforms.ts \(TimestampRouter\)"):
        parse_pipeline({"name": "ts", "config": config})  # as before transforms were known: the name it receives
    parse_pipeline({"name": "ts", "config": {**config, "source.topics": "orders_eu"}})


def test_the_driver_prepares_the_names_the_chain_gives_and_logs_per_record_ones_once(tmp_path, caplog):
    from connect.connector import SinkConnector, SourceConnector
    from worker.pipeline import PIPELINE_CONFIG, PipelineConfig
    from worker.runtime.driver import PipelineRuntime
    from worker.settings import FrameworkSettings
    from worker.stores.store import OffsetStore

    prepared = []

    class Source(SourceConnector):
        def source_topics(self):
            return {"orders.eu": 3, "orders.us": 2, "audit": 1}

        def task_configs(self, max_tasks):
            return []

    class Sink(SinkConnector):
        def prepare_topics(self, source_topics):
            prepared.append(dict(source_topics))

    transforms = load_transforms({"transforms": "route,ts", **ROUTE, "transforms.ts.type": "TimestampRouter",
                                  "transforms.ts.predicate": "audit", "predicates": "audit",
                                  "predicates.audit.type": "TopicNameMatches", "predicates.audit.pattern": "audit"})
    pipeline = PipelineConfig("prep", FrameworkSettings.from_config(PIPELINE_CONFIG.parse({}), ("", "")), Source, {},
                              Sink, {}, {}, {}, transforms=transforms)
    store = OffsetStore(tmp_path)
    try:
        with caplog.at_level(logging.INFO, logger="worker.runtime.driver"):
            runtime = PipelineRuntime(pipeline, store, "run")
            runtime.configure_tasks()
        runtime.stop()
    finally:
        store.close()
    assert prepared == [{"dc1_orders_eu": 3, "dc1_orders_us": 2, "audit": 1}] * 2
    told = [r.getMessage() for r in caplog.records if "names the target of each record" in r.getMessage()]
    assert told == ["connector prep: transforms.ts (TimestampRouter) names the target of each record of 'audit' from "
                    "the record itself: their targets are checked and prepared under the names that transform "
                    "receives; a name the target broker refuses fails its records at run time"]
