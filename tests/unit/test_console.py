"""worker.console.model: the console's history stays bounded, its rates and percentiles are right, flows get
the clusters and the health the console draws; fed by a real ConnectMetrics with real EpochResults."""

from __future__ import annotations

import pytest

from connect.tasks.results import FAILED, RUNNING, EpochResult, EpochStats
from worker.console.clusters import group, sides
from worker.console.model import (
    HEARTBEAT_ALIASES,
    HEARTBEAT_SAMPLES,
    LAGGING_S,
    SLOTS,
    ConsoleHistory,
    _health,
    _percentile,
    _stale_links,
    flow_ends,
)
from worker.telemetry.metrics import ConnectMetrics


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def epoch(connector: str, task: int = 0, *, records: int = 0, acknowledged: int = 0, state: str = RUNNING,
          trace: str | None = None, metrics: dict | None = None, reasons: dict | None = None) -> EpochResult:
    stats = EpochStats()
    stats.records, stats.acknowledged = records, acknowledged
    d = stats.as_dict()
    if reasons:
        d["failure_reasons"] = reasons
    return EpochResult(connector, task, 0, state, {}, d, 100.0, 101.0, lag=None, trace=trace, metrics=metrics)


def test_history_keeps_at_most_its_window_per_connector_and_forgets_deleted_connectors():
    metrics, clock = ConnectMetrics(), Clock()
    names = ["a", "b"]
    history = ConsoleHistory(metrics, lambda: list(names), clock=clock)
    for _ in range(3 * SLOTS):
        metrics.epoch("a", epoch("a", records=10, acknowledged=10))
        metrics.epoch("b", epoch("b", records=1, acknowledged=1))
        history.sample()
        clock.now += 2.0
    connectors, samples = history.size()
    assert connectors == 2 and samples == 2 * SLOTS, "the history grew past its window"
    chart = history.chart("a")
    assert len(chart["ago_s"]) == SLOTS - 1 and max(chart["ago_s"]) <= 900.0 + 2.0
    assert set(chart["records_per_second"]) == {5.0}  # 10 records every 2 s
    names.remove("b")
    history.sample()
    assert history.size()[0] == 1 and history.chart("b")["ago_s"] == []


def test_rates_are_unknown_not_negative_when_a_connector_is_created_again():
    metrics, clock = ConnectMetrics(), Clock()
    history = ConsoleHistory(metrics, lambda: ["a"], clock=clock)
    for _ in range(3):
        metrics.epoch("a", epoch("a", records=100, acknowledged=50))
        history.sample()
        clock.now += 2.0
    metrics.remove("a")  # deleted, then created again: its counters start from 0
    metrics.epoch("a", epoch("a", records=4, acknowledged=2))
    history.sample()
    chart = history.chart("a")
    assert chart["records_per_second"] == [50.0, 50.0, None]
    assert chart["acknowledged_per_second"] == [25.0, 25.0, None]
    assert history.recent_rate("a") == (None, None)


def test_the_record_age_is_kept_while_epochs_put_nothing():
    metrics, clock = ConnectMetrics(), Clock()
    history = ConsoleHistory(metrics, lambda: ["a"], clock=clock)
    history.sample()
    assert history.record_age("a") is None
    result = epoch("a", records=10, acknowledged=10)
    result.stats.update(latency_ms_max=5_000.0, latency_ms_sum=20_000.0, latency_samples=10)
    metrics.epoch("a", result)
    history.sample()
    assert history.record_age("a") == {"max_s": 5.0, "seen_s_ago": 0.0}
    metrics.epoch("a", epoch("a"))  # an epoch that put nothing: no latency gauge
    clock.now += 10.0
    history.sample()
    assert metrics.figures(["a"])["a"]["latency_max"] == 5.0  # the last epoch that timed records
    assert history.record_age("a") == {"max_s": 5.0, "seen_s_ago": 10.0}


def test_the_record_age_of_an_epoch_followed_by_idle_ones_before_the_sample_is_seen():
    metrics, clock = ConnectMetrics(), Clock()
    history = ConsoleHistory(metrics, lambda: ["a"], clock=clock)
    history.sample()
    result = epoch("a", records=10, acknowledged=10)
    result.stats.update(latency_ms_max=7_000.0, latency_ms_sum=20_000.0, latency_samples=10)
    metrics.epoch("a", result)
    metrics.epoch("a", epoch("a"))  # idle epochs end before the console samples (a backlog copied at once)
    metrics.epoch("a", epoch("a"))
    clock.now += 5.0
    history.sample()
    assert history.record_age("a") == {"max_s": 7.0, "seen_s_ago": 0.0}
    clock.now += 5.0
    history.sample()  # no epoch timed records since: the age is not taken again
    assert history.record_age("a") == {"max_s": 7.0, "seen_s_ago": 5.0}


def test_a_connector_whose_first_epoch_arrived_before_its_first_sample_still_shows_that_rate():
    metrics, clock = ConnectMetrics(), Clock()
    names: list[str] = []
    history = ConsoleHistory(metrics, lambda: list(names), clock=clock)
    history.sample()  # the worker's first sample: no connector yet
    clock.now += 2.0
    names.append("new")  # created, and its first epoch (all of a backlog) reported before the next sample
    metrics.epoch("new", epoch("new", records=2000, acknowledged=2000))
    history.sample()
    assert history.chart("new")["records_per_second"] == [1000.0]  # 2,000 records over the 2 s since
    clock.now += 2.0
    history.sample()
    assert history.chart("new")["records_per_second"] == [1000.0, 0.0]


def test_heartbeat_latency_percentiles_count_each_heartbeat_once_and_stay_bounded():
    metrics, clock = ConnectMetrics(), Clock()
    history = ConsoleHistory(metrics, lambda: ["monitor"], clock=clock)
    for i in range(1, 101):  # one new heartbeat per epoch, latency i ms; each sampled twice
        metrics.epoch("monitor", epoch("monitor", metrics={"heartbeat.A.latency_ms": float(i),
                                                           "heartbeat.A.count": float(i)}))
        history.sample()
        clock.now += 1.0
        history.sample()
        clock.now += 1.0
    seen = history.heartbeat_latency("monitor")["A"]
    assert seen == {"p50_ms": 50.0, "p99_ms": 99.0, "heartbeats": 100}
    many = {f"heartbeat.C{i}.latency_ms": 1.0 for i in range(40)} | {f"heartbeat.C{i}.count": 1.0 for i in range(40)}
    for n in range(HEARTBEAT_SAMPLES + 50):
        many = {k: (float(n) if k.endswith(".count") else v) for k, v in many.items()}
        metrics.epoch("monitor", epoch("monitor", metrics=many))
        history.sample()
    kept = history.heartbeat_latency("monitor")
    assert len(kept) <= HEARTBEAT_ALIASES
    assert all(v["heartbeats"] <= HEARTBEAT_SAMPLES for v in kept.values())


def test_percentile_is_nearest_rank():
    assert _percentile([], 50) is None
    assert _percentile([5.0], 99) == 5.0
    assert _percentile([float(i) for i in range(1, 11)], 50) == 5.0
    assert _percentile([float(i) for i in range(1, 11)], 99) == 10.0


@pytest.mark.parametrize("config, ends", [
    ({"source.connector.class": "kafka", "source.cluster.alias": "A", "source.bootstrap.servers": "h:1",
      "sink.connector.class": "kafka", "sink.cluster.alias": "B", "sink.bootstrap.servers": "h:2"}, ("A", "B", "kafka", "kafka")),
    ({"source.connector.class": "kafka", "source.bootstrap.servers": "h:1", "sink.connector.class": "pulsar",
      "sink.service.url": "pulsar://p:6650", "target.cluster.alias": ""}, ("h:1", "pulsar://p:6650", "kafka", "pulsar")),
    ({"source.connector.class": "rocketmq-source", "source.namesrv.addr": "n:9876", "sink.connector.class": "kafka",
      "sink.bootstrap.servers": "h:2", "target.cluster.alias": "B"}, ("n:9876", "B", "rocketmq", "kafka")),
    # a heartbeat emitter names its cluster with alias; its sink writes into that same cluster: a loop
    ({"source.connector.class": "heartbeat", "source.alias": "A", "sink.connector.class": "kafka",
      "sink.bootstrap.servers": "h:1"}, ("A", "A", "heartbeat", "kafka")),
    # a checkpoint source reads its upstream cluster's groups
    ({"source.connector.class": "checkpoint", "source.upstream.type": "kafka", "source.upstream.alias": "A",
      "source.upstream.bootstrap.servers": "h:1", "sink.connector.class": "kafka", "sink.bootstrap.servers": "h:2",
      "sink.cluster.alias": "B"}, ("A", "B", "checkpoint", "kafka")),
    # a monitor: its sink has no cluster, it is the source's
    ({"source.connector.class": "kafka", "source.cluster.alias": "B", "source.bootstrap.servers": "h:2",
      "sink.connector.class": "heartbeat"}, ("B", "B", "kafka", "heartbeat")),
])
def test_flow_ends_name_clusters_by_alias_else_address(config, ends):
    assert flow_ends(config) == ends


def test_health_first_match_wins():
    running = [{"state": "RUNNING"}]
    assert _health("RUNNING", running, False, None, None) == "running"
    assert _health("RUNNING", [{"state": "FAILED"}], True, 10**6, 0) == "failing"
    assert _health("RUNNING", [{"state": "RUNNING", "retrying": [{"operation": "put"}]}], False, 0, 1) == "failing"
    assert _health("PAUSED", running, True, 10**6, 0) == "paused"
    assert _health("STOPPED", [], False, None, None) == "stopped"
    assert _health("UNASSIGNED", [], False, None, None) == "starting"
    assert _health("RUNNING", running, True, 0, 100) == "stale"
    # lagging: more than LAGGING_S seconds of work at the rate it acknowledges now
    assert _health("RUNNING", running, False, 100 * LAGGING_S - 1, 100.0) == "running"
    assert _health("RUNNING", running, False, 100 * LAGGING_S + 1, 100.0) == "lagging"
    assert _health("RUNNING", running, False, LAGGING_S + 1, 0.0) == "lagging"


def test_a_monitor_reporting_an_unhealthy_origin_marks_that_link_stale():
    metrics = ConnectMetrics()
    monitor = {"source.connector.class": "kafka", "source.bootstrap.servers": "h:2", "sink.connector.class": "heartbeat"}
    mirror = {"source.connector.class": "kafka", "source.cluster.alias": "A", "source.bootstrap.servers": "h:1",
              "sink.connector.class": "kafka", "sink.cluster.alias": "B", "sink.bootstrap.servers": "h:2"}
    metrics.epoch("mon", epoch("mon", metrics={"heartbeat.A.healthy": 0.0, "heartbeat.C.healthy": 1.0}))
    configs = {"mon": monitor, "mirror": mirror}
    clusters = group({n: sides(c) for n, c in configs.items()})
    # the monitor names its cluster by address only; the mirror says that address is B
    assert _stale_links(configs, metrics.figures(), clusters) == {("A", "B")}


def test_figures_keep_failure_reasons_bounded_and_the_last_trace():
    metrics = ConnectMetrics()
    for i in range(50):
        metrics.epoch("c", epoch("c", reasons={f"ValueError: record {i} refused": 2}))
    metrics.epoch("c", epoch("c", state=FAILED, trace="Traceback: boom", reasons={"ValueError: record 0 refused": 1}))
    f = metrics.figures(["c"])["c"]
    assert len(f["failure_reasons"]) <= 33 and sum(f["failure_reasons"].values()) == 101
    assert f["failure_reasons"]["ValueError: record 0 refused"] == 3
    assert f["last_failure"]["trace"] == "Traceback: boom" and f["last_failure"]["task"] == 0
    metrics.remove("c")
    assert metrics.figures(["c"]) == {}


def test_every_console_asset_is_served_and_shipped_as_package_data():
    """A file added to worker/console/assets must be both served (worker.console.web.ASSETS) and in the wheel."""
    import fnmatch
    from pathlib import Path

    from worker.console.web import ASSETS

    tomllib = pytest.importorskip("tomllib")
    root = Path(__file__).resolve().parents[2]
    files = sorted(p.name for p in (root / "worker" / "console" / "assets").iterdir())
    assert files == sorted([*ASSETS, "index.html"])
    patterns = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["worker.console"]
    for name in files:
        assert any(fnmatch.fnmatch(f"assets/{name}", p) for p in patterns), f"{name} is not package data"
