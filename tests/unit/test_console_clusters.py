"""worker.console: one node per cluster whatever names a connector gives it (alias, one bootstrap
address or another, the Kafka cluster id the cluster reports), the Kafka id lookups bounded in time
and number, the actions and the draining a link page shows, failure reasons made readable."""

from __future__ import annotations

import threading
import time

import pytest

from connect.tasks.results import REASON_SHOWN
from worker.console.clusters import KafkaClusterIds, endpoints, group, sides
from worker.console.model import actions, draining
from worker.console.reasons import readable_reason


def kafka_flow(src: str | None, src_addr: str, dst: str | None, dst_addr: str) -> dict[str, str]:
    config = {"source.connector.class": "kafka", "source.bootstrap.servers": src_addr,
              "sink.connector.class": "kafka", "sink.bootstrap.servers": dst_addr}
    if src:
        config["source.cluster.alias"] = src
    if dst:
        config["sink.cluster.alias"] = dst
    return config


def clusters_of(configs: dict[str, dict[str, str]], kafka=lambda _: ()):
    return group({n: sides(c) for n, c in configs.items()}, kafka)


def test_endpoints_are_host_port_sets_without_scheme_or_path():
    assert endpoints("PLAINTEXT://Kafka-A:9092, kafka-b:9092") == ("kafka-a:9092", "kafka-b:9092")
    assert endpoints("n1:9876;n2:9876") == ("n1:9876", "n2:9876")
    assert endpoints("pulsar+ssl://P:6651/") == ("p:6651",)
    assert endpoints("  ") == ()


def test_connectors_naming_a_cluster_by_alias_and_by_address_draw_one_node_labelled_by_the_alias():
    """Four clusters, seven connectors: some name both ends by alias, some by address only, one by
    another bootstrap list sharing a broker - four nodes, labelled A, B, C and the address of the
    cluster nobody gave an alias."""
    configs = {
        "a-to-b": kafka_flow("A", "h1:9092", "B", "h2:9092"),
        "b-to-a": kafka_flow("B", "h2:9092", "A", "h1:9092"),
        "mirror-payments": kafka_flow(None, "h1:9092", None, "h2:9092"),
        "mirror-audit": kafka_flow(None, "H1:9092,h1b:9092", None, "PLAINTEXT://h2:9092"),
        "c-to-a": kafka_flow("C", "h3:9092", None, "h1b:9092"),
        "to-d": kafka_flow(None, "h3:9092", None, "h4:9092"),
        "rocket": {"source.connector.class": "rocketmq-source", "source.namesrv.addr": "n1:9876;n2:9876",
                   "sink.connector.class": "kafka", "sink.bootstrap.servers": "h4:9092"},
    }
    c = clusters_of(configs)
    assert sorted(c.nodes) == ["A", "B", "C", "h4:9092", "n1:9876;n2:9876"]
    assert c.ends["mirror-payments"] == c.ends["mirror-audit"] == c.ends["a-to-b"] == ("A", "B")
    assert c.ends["c-to-a"] == ("C", "A") and c.ends["to-d"] == ("C", "h4:9092")
    assert c.nodes["A"]["addresses"] == ["H1:9092,h1b:9092", "h1:9092", "h1b:9092"]
    assert c.nodes["A"]["kinds"] == ["kafka"] and c.nodes["n1:9876;n2:9876"]["kinds"] == ["rocketmq"]
    assert c.alias_node("C") == "C" and c.alias_node("nope") is None


def test_pulsar_and_rocketmq_sides_are_one_cluster_by_their_service_url_and_name_servers():
    configs = {
        "p1": {"source.connector.class": "pulsar-source", "source.service.url": "pulsar://p:6650",
               "source.cluster.alias": "P", "sink.connector.class": "rocketmq-sink", "sink.namesrv.addr": "n1:9876;n2:9876",
               "sink.cluster.alias": "R"},
        "p2": {"source.connector.class": "pulsar-source", "source.service.url": "pulsar://P:6650/",
               "sink.connector.class": "rocketmq-sink", "sink.namesrv.addr": "n2:9876"},
    }
    c = clusters_of(configs)
    assert sorted(c.nodes) == ["P", "R"] and c.ends["p2"] == ("P", "R")


def test_the_kafka_cluster_id_joins_bootstrap_addresses_that_share_nothing():
    said = {("localhost:9092",): ["kafka-id:abc", "kafka@127.0.0.1:9092"],
            ("kafka.internal:9092",): ["kafka-id:abc", "kafka@kafka.internal:9092"],
            ("other:9092",): ["kafka-id:xyz", "kafka@other:9092"]}
    configs = {"named": kafka_flow("A", "localhost:9092", "X", "other:9092"),
               "by-address": kafka_flow(None, "kafka.internal:9092", None, "other:9092")}
    c = clusters_of(configs, lambda key: said.get(key, []))
    assert sorted(c.nodes) == ["A", "X"] and c.ends["by-address"] == ("A", "X")
    assert c.nodes["A"]["cluster_id"] == "abc"
    assert sorted(clusters_of(configs).nodes) == ["A", "X", "kafka.internal:9092"]  # without the ids: three


def test_one_id_reported_by_clusters_with_disjoint_brokers_is_not_taken_as_one_cluster():
    """Two tansu brokers started with its default id both say tansu_cluster: they stay two."""
    answers = {"h1:1": ("tansu_cluster", ("h1:1",)), "h2:2": ("tansu_cluster", ("h2:2",)),
               "alias-of-h1:1": ("tansu_cluster", ("h1:1",))}
    ids = KafkaClusterIds(lambda settings, timeout: answers[settings["bootstrap.servers"]])
    for address in answers:
        ids.request(endpoints(address), {"bootstrap.servers": address})
    ids.wait([endpoints(a) for a in answers], 10)
    assert ids.tokens(("h1:1",)) == ["kafka@h1:1"]  # the id clashes: only the advertised brokers count
    configs = {"x": kafka_flow(None, "h1:1", None, "h2:2"), "y": kafka_flow("A", "alias-of-h1:1", None, "h2:2")}
    c = clusters_of(configs, ids.tokens)
    assert sorted(c.nodes) == ["A", "h2:2"] and c.ends["x"] == ("A", "h2:2")


def test_cluster_id_lookups_are_bounded_in_time_remembered_and_retried_after_a_failure():
    clock = [0.0]
    calls: list[str] = []
    release = threading.Event()

    def lookup(settings, timeout):
        calls.append(settings["bootstrap.servers"])
        if settings["bootstrap.servers"] == "slow:1":
            release.wait(10)
        if settings["bootstrap.servers"] == "down:1":
            raise RuntimeError("unreachable")
        return "id-" + settings["bootstrap.servers"], (settings["bootstrap.servers"],)

    ids = KafkaClusterIds(lookup, ttl=300, retry=30, max_entries=3, clock=lambda: clock[0])
    for address in ("slow:1", "down:1", "up:1", "more:1"):
        ids.request((address,), {"bootstrap.servers": address})
    started = time.monotonic()
    ids.wait([("slow:1",)], 0.3)  # the slow cluster does not hold the document longer than the budget
    assert time.monotonic() - started < 2 and ids.tokens(("slow:1",)) == []
    release.set()
    ids.wait([("slow:1",), ("down:1",), ("up:1",)], 10)
    assert ids.tokens(("up:1",)) == ["kafka-id:id-up:1", "kafka@up:1"]
    assert ids.tokens(("down:1",)) == [] and "more:1" not in calls  # at most max_entries clusters
    ids.request(("up:1",), {"bootstrap.servers": "up:1"})
    ids.request(("down:1",), {"bootstrap.servers": "down:1"})
    time.sleep(0.2)
    assert calls.count("up:1") == 1 and calls.count("down:1") == 1  # remembered; the failure too, for a while
    clock[0] = 31.0
    ids.request(("down:1",), {"bootstrap.servers": "down:1"})
    ids.wait([("down:1",)], 0)  # asked before: not waited for again
    deadline = time.monotonic() + 10
    while calls.count("down:1") < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert calls.count("down:1") == 2 and calls.count("up:1") == 1  # retried after `retry`, the rest kept


@pytest.mark.parametrize("state, allowed", [
    ("RUNNING", {"pause", "restart", "stop"}),
    ("PAUSED", {"resume", "restart", "stop"}),
    ("STOPPED", {"resume"}),
    ("FAILED", {"restart", "stop"}),
    ("UNASSIGNED", {"pause", "restart", "stop"}),
])
def test_only_the_actions_that_apply_to_a_state_are_offered(state, allowed):
    assert {a for a, ok in actions(state).items() if ok} == allowed


def test_a_paused_connector_still_moving_records_is_draining():
    assert draining("PAUSED", 24.0) and draining("STOPPED", 0.5)
    assert not draining("PAUSED", 0.0) and not draining("PAUSED", None) and not draining("RUNNING", 24.0)


def test_failure_reasons_read_as_sentences_and_a_cut_one_ends_at_a_word():
    kafka = 'KafkaException: KafkaError{code=MSG_SIZE_TOO_LARGE,val=10,str="Broker: Message size too large"}'
    assert readable_reason(kafka) == "Broker: Message size too large (Kafka error MSG_SIZE_TOO_LARGE, KafkaException)"
    assert readable_reason("ValueError: record 3 of orders/0 has no key") == \
        "record 3 of orders/0 has no key (ValueError)"
    delivery = ("DeliveryError: record orders[0]@{'offset': 4} cannot be produced: MSG_SIZE_TOO_LARGE: Unable to "
                "produce message: Broker: Message size too large")
    assert readable_reason(delivery) == ("record orders[0] at offset 4 cannot be produced: MSG_SIZE_TOO_LARGE: Unable "
                                         "to produce message: Broker: Message size too large (DeliveryError)")
    assert readable_reason("E: at {'ledger': 1, 'entry': 2} and {'x': __import__('os')}") == \
        "at ledger 1, entry 2 and {'x': __import__('os')} (E)"  # literals only: nothing is evaluated
    long = "ValueError: " + " ".join(["refused"] * 400)
    cut = readable_reason(long[:REASON_SHOWN])
    assert cut.endswith(" \u2026 (cut) (ValueError)") and set(cut.split(" \u2026")[0].split(" ")) == {"refused"}


class _Herder:
    """The little of a herder the console's views read: names, status, masked config, offsets."""

    def __init__(self, configs: dict[str, dict[str, str]]):
        self.configs = configs

    def connector_names(self) -> list[str]:
        return list(self.configs)

    def status(self, name: str) -> dict:
        return {"name": name, "connector": {"state": "RUNNING", "lag": None}, "tasks": []}

    def info(self, name: str) -> dict:
        return {"name": name, "config": self.configs[name]}

    def offsets(self, name: str) -> dict:
        return {"offsets": []}


def test_a_link_page_takes_its_replication_latency_from_a_heartbeat_monitor_in_the_target_cluster():
    """The mirror A -> B has no latency of its own; a monitor in B (named there by address only)
    reading heartbeats from A gives the link's p50/p99. B -> A has no monitor: unknown."""
    from tests.unit.test_console import Clock, epoch
    from worker.console.history import ConsoleHistory
    from worker.console.model import ConsoleViews
    from worker.telemetry.metrics import ConnectMetrics

    configs = {"a-to-b": kafka_flow("A", "h1:9092", "B", "h2:9092"), "b-to-a": kafka_flow("B", "h2:9092", "A", "h1:9092"),
               "monitor-b": {"source.connector.class": "kafka", "source.bootstrap.servers": "h2:9092",
                             "sink.connector.class": "heartbeat"}}
    metrics, clock = ConnectMetrics(), Clock()
    history = ConsoleHistory(metrics, lambda: list(configs), clock=clock)
    for i in range(1, 11):
        metrics.epoch("monitor-b", epoch("monitor-b", metrics={"heartbeat.A.latency_ms": 100.0 * i,
                                                               "heartbeat.A.count": float(i)}))
        history.sample()
        clock.now += 2.0
    asked: list = []
    ids = KafkaClusterIds(lambda settings, timeout: asked.append(settings) or (None, ()))
    views = ConsoleViews(_Herder(configs), metrics, history, lambda: {"worker_id": "w"}, cluster_ids=ids)
    link = views.detail("a-to-b")
    assert (link["source"], link["target"]) == ("A", "B")
    assert link["replication_latency"] == {"p50_ms": 500.0, "p99_ms": 1000.0, "heartbeats": 10,
                                           "monitor": "monitor-b", "origin": "A"}
    assert views.detail("b-to-a")["replication_latency"] is None
    assert views.detail("monitor-b")["source"] == "B"  # the monitor's loop is drawn on B
    assert {s["bootstrap.servers"] for s in asked} == {"h1:9092", "h2:9092"}  # each cluster asked once
