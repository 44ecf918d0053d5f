"""worker.telemetry.metrics: Prometheus metrics fed from real EpochResult objects, checked on the rendered text."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from connect import __version__
from connect.tasks.results import FAILED, RUNNING, EpochResult, EpochStats
from worker.telemetry.metrics import DURATION_BUCKETS, STATES, ConnectMetrics

ACK_KEYS = ("acknowledged", "ack_latency_ms_max", "ack_latency_ms_sum", "ack_latency_samples")


def result(connector="orders", task=0, epoch=0, *, state=RUNNING, started=1000.0, duration=0.5, lag=None, gap=None,
           restarted=False, ack=None, **stats) -> EpochResult:
    s = EpochStats()
    for name, value in stats.items():
        setattr(s, name, value)
    d = s.as_dict()
    for key in ACK_KEYS:  # results of runners that do not report acknowledgements (older, or doubles)
        d.pop(key, None)
    if ack is not None:
        d.update(ack)
    return EpochResult(connector, task, epoch, state, {}, d, started, started + duration, lag=lag,
                       restarted=restarted, gap_s=gap)


def scrape(metrics: ConnectMetrics) -> dict[tuple[str, tuple], float]:
    body, _ = metrics.render()
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))))


def names(samples, connector=None) -> set[str]:
    return {name for name, labels in samples if connector is None or ("connector", connector) in labels}


def test_render_content_type_and_worker_info():
    m = ConnectMetrics(info={"worker": "w1"})
    body, ctype = m.render()
    assert ctype == CONTENT_TYPE_LATEST
    samples = scrape(m)
    assert value(samples, "connect_worker_info", version=__version__, worker="w1") == 1.0
    assert ConnectMetrics(version="9.9").render()[0].count(b'connect_worker_info{version="9.9"} 1.0') == 1
    # Nothing per task before any epoch; connectors by state are all 0.
    assert {value(samples, "connect_connectors", state=s) for s in STATES} == {0.0}
    assert not [k for k in samples if k[0].startswith("connect_records_polled")]


def test_counters_sum_over_epochs_per_task():
    m = ConnectMetrics()
    m.epoch("orders", result(task=0, epoch=0, records=10, bytes=1000, errors=1, transient=2, retries=3, dismissed=4,
                             customer_handled=5, dead_lettered=6, skipped=7, flushes=1))
    m.epoch("orders", result(task=0, epoch=1, records=5, bytes=500, errors=2, transient=1, retries=1, dismissed=1,
                             customer_handled=1, dead_lettered=1, skipped=1, flushes=2, state=FAILED, restarted=True))
    m.epoch("orders", result(task=1, epoch=0, records=7, bytes=70))
    s = scrape(m)
    t0, t1 = {"connector": "orders", "task": "0"}, {"connector": "orders", "task": "1"}
    expected0 = {"connect_records_polled_total": 15, "connect_bytes_polled_total": 1500, "connect_record_errors_total": 3,
                 "connect_transient_failures_total": 3, "connect_retries_total": 4, "connect_records_dismissed_total": 5,
                 "connect_records_customer_handled_total": 6, "connect_records_dead_lettered_total": 7,
                 "connect_records_skipped_total": 8, "connect_flushes_total": 3, "connect_epochs_total": 2,
                 "connect_epochs_failed_total": 1, "connect_task_restarts_total": 1}
    for name, want in expected0.items():
        assert value(s, name, **t0) == want, name
    assert value(s, "connect_records_polled_total", **t1) == 7
    assert value(s, "connect_bytes_polled_total", **t1) == 70
    assert value(s, "connect_epochs_total", **t1) == 1
    assert value(s, "connect_epochs_failed_total", **t1) == 0
    assert value(s, "connect_record_errors_total", **t1) == 0
    # Counters carry no _created series, and the label sets are exactly connector + task.
    assert not [k for k in s if k[0].endswith("_created")]
    assert {labels for name, labels in s if name == "connect_records_polled_total"} == {
        tuple(sorted(t0.items())), tuple(sorted(t1.items()))}


def test_counters_only_increase():
    m = ConnectMetrics()
    m.epoch("c", result(records=10, errors=2))
    bad = result(records=-5, errors=None)
    bad.stats["bytes"] = float("nan")
    bad.stats["retries"] = True
    del bad.stats["skipped"]
    m.epoch("c", bad)
    s = scrape(m)
    assert value(s, "connect_records_polled_total", connector="c", task="0") == 10
    assert value(s, "connect_record_errors_total", connector="c", task="0") == 2
    assert value(s, "connect_bytes_polled_total", connector="c", task="0") == 0
    assert value(s, "connect_retries_total", connector="c", task="0") == 0
    assert value(s, "connect_records_skipped_total", connector="c", task="0") == 0
    assert value(s, "connect_epochs_total", connector="c", task="0") == 2


def test_epoch_duration_histogram():
    m = ConnectMetrics()
    for i, duration in enumerate((0.005, 0.3, 0.3, 7.0, 75.0)):
        m.epoch("c", result(epoch=i, duration=duration))
    s = scrape(m)
    labels = {"connector": "c", "task": "0"}
    buckets = {le: value(s, "connect_epoch_duration_seconds_bucket", le=le, **labels)
               for le in ("0.01", "0.25", "0.5", "5.0", "10.0", "60.0", "+Inf")}
    assert buckets == {"0.01": 1, "0.25": 1, "0.5": 3, "5.0": 3, "10.0": 4, "60.0": 4, "+Inf": 5}
    assert len([k for k in s if k[0] == "connect_epoch_duration_seconds_bucket"]) == len(DURATION_BUCKETS) + 1
    assert value(s, "connect_epoch_duration_seconds_count", **labels) == 5
    assert value(s, "connect_epoch_duration_seconds_sum", **labels) == pytest.approx(82.605)


def test_gauges_reflect_the_last_epoch():
    m = ConnectMetrics()
    m.epoch("c", result(epoch=0, started=1000.0, duration=2.0, lag=500, in_flight=12, gap=None))
    m.epoch("c", result(epoch=1, started=1002.25, duration=0.5, lag=40, in_flight=3, gap=0.25))
    s = scrape(m)
    labels = {"connector": "c", "task": "0"}
    assert value(s, "connect_records_in_flight", **labels) == 3
    assert value(s, "connect_source_lag_records", **labels) == 40
    assert value(s, "connect_epoch_gap_seconds", **labels) == 0.25
    assert value(s, "connect_last_epoch_end_timestamp_seconds", **labels) == 1002.75


def test_lag_none_leaves_the_gauge_absent():
    m = ConnectMetrics()
    m.epoch("c", result(task=0, lag=None))
    m.epoch("c", result(task=1, lag=0))
    s = scrape(m)
    assert value(s, "connect_source_lag_records", connector="c", task="0") is None
    assert value(s, "connect_source_lag_records", connector="c", task="1") == 0
    m.epoch("c", result(task=0, epoch=1, lag=25))
    assert value(scrape(m), "connect_source_lag_records", connector="c", task="0") == 25
    m.epoch("c", result(task=0, epoch=2, lag=None))  # unknown again: no stale value left behind
    s = scrape(m)
    assert value(s, "connect_source_lag_records", connector="c", task="0") is None
    assert value(s, "connect_epochs_total", connector="c", task="0") == 3
    m.epoch("c", result(task=1, epoch=1, gap=None))
    assert value(scrape(m), "connect_epoch_gap_seconds", connector="c", task="1") is None


def test_replication_latency():
    m = ConnectMetrics()
    labels = {"connector": "c", "task": "0"}
    m.epoch("c", result(epoch=0, latency_ms_max=1500.0, latency_ms_sum=2000.0, latency_samples=4))
    s = scrape(m)
    assert value(s, "connect_replication_latency_avg_seconds", **labels) == 0.5
    assert value(s, "connect_replication_latency_max_seconds", **labels) == 1.5
    m.epoch("c", result(epoch=1, latency_ms_max=250.0, latency_ms_sum=1000.0, latency_samples=4))
    s = scrape(m)
    assert value(s, "connect_replication_latency_avg_seconds", **labels) == 0.25
    assert value(s, "connect_replication_latency_max_seconds", **labels) == 0.25
    assert value(s, "connect_replication_latency_seconds_count", **labels) == 8
    assert value(s, "connect_replication_latency_seconds_sum", **labels) == 3.0
    m.epoch("c", result(epoch=2))  # put nothing: the per-epoch gauges go, the summary stays
    s = scrape(m)
    assert value(s, "connect_replication_latency_avg_seconds", **labels) is None
    assert value(s, "connect_replication_latency_max_seconds", **labels) is None
    assert value(s, "connect_replication_latency_seconds_count", **labels) == 8


def test_acknowledgements_only_when_reported():
    m = ConnectMetrics()
    m.epoch("c", result(task=0, records=5))
    s = scrape(m)
    absent = {"connect_records_acknowledged_total", "connect_ack_latency_seconds_count", "connect_ack_latency_seconds_sum",
              "connect_ack_latency_avg_seconds", "connect_ack_latency_max_seconds"}
    assert not absent & names(s)
    ack = dict(zip(ACK_KEYS, (4, 750.0, 1000.0, 4), strict=True))
    m.epoch("c", result(task=0, epoch=1, records=5, ack=ack))
    m.epoch("c", result(task=0, epoch=2, records=5, ack=dict(zip(ACK_KEYS, (6, 2000.0, 3000.0, 6), strict=True))))
    s = scrape(m)
    labels = {"connector": "c", "task": "0"}
    assert value(s, "connect_records_acknowledged_total", **labels) == 10
    assert value(s, "connect_records_polled_total", **labels) == 15
    assert value(s, "connect_ack_latency_seconds_count", **labels) == 10
    assert value(s, "connect_ack_latency_seconds_sum", **labels) == 4.0
    assert value(s, "connect_ack_latency_avg_seconds", **labels) == 0.5
    assert value(s, "connect_ack_latency_max_seconds", **labels) == 2.0
    m.epoch("c", result(task=0, epoch=3, ack=dict(zip(ACK_KEYS, (0, 0.0, 0.0, 0), strict=True))))
    s = scrape(m)
    assert value(s, "connect_ack_latency_max_seconds", **labels) is None
    assert value(s, "connect_ack_latency_seconds_count", **labels) == 10
    assert value(s, "connect_records_acknowledged_total", **labels) == 10
    # Only acknowledged reported (no ack timing): the counter appears, the latency summary does not.
    m.epoch("c", result(task=1, ack={"acknowledged": 3}))
    s = scrape(m)
    assert value(s, "connect_records_acknowledged_total", connector="c", task="1") == 3
    assert value(s, "connect_ack_latency_seconds_count", connector="c", task="1") is None


def _states(samples, name, **labels):
    return {lbl["state"]: v for (n, lbls), v in samples.items() if n == name
            for lbl in [dict(lbls)] if all(lbl.get(k) == w for k, w in labels.items())}


def test_state_gauges_switch_with_exactly_one_set():
    m = ConnectMetrics()
    m.connector_state("orders", RUNNING)
    m.task_state("orders", 0, RUNNING)
    m.task_state("orders", 1, "running")
    s = scrape(m)
    states = _states(s, "connect_task_state", connector="orders", task="0")
    assert set(states) == set(STATES)
    assert {k for k, v in states.items() if v == 1.0} == {RUNNING} and sum(states.values()) == 1
    m.task_state("orders", 0, FAILED)
    m.connector_state("orders", FAILED)
    s = scrape(m)
    states = _states(s, "connect_task_state", connector="orders", task="0")
    assert {k for k, v in states.items() if v == 1.0} == {FAILED} and sum(states.values()) == 1
    assert {k for k, v in _states(s, "connect_task_state", task="1").items() if v == 1.0} == {RUNNING}
    assert {k for k, v in _states(s, "connect_connector_state", connector="orders").items() if v == 1.0} == {FAILED}
    assert sum(_states(s, "connect_connector_state", connector="orders").values()) == 1
    with pytest.raises(ValueError, match="unknown state"):
        m.task_state("orders", 0, "BROKEN")
    with pytest.raises(ValueError):
        m.connector_state("orders", "")


def test_connectors_count_by_state():
    m = ConnectMetrics()
    for name, state in (("a", RUNNING), ("b", RUNNING), ("c", "PAUSED"), ("d", FAILED)):
        m.connector_state(name, state)
    m.connector_state("d", RUNNING)
    s = scrape(m)
    assert _states(s, "connect_connectors") == {RUNNING: 3, "PAUSED": 1, "STOPPED": 0, FAILED: 0, "UNASSIGNED": 0,
                                                 "RESTARTING": 0}


def test_remove_drops_every_series_of_the_connector():
    m = ConnectMetrics()
    for connector in ("orders", "payments"):
        m.connector_state(connector, RUNNING)
        for task in (0, 1):
            m.task_state(connector, task, RUNNING)
            m.epoch(connector, result(connector, task, records=3, lag=1, gap=0.1, latency_ms_max=5.0, latency_ms_sum=5.0,
                                      latency_samples=1, ack=dict(zip(ACK_KEYS, (3, 1.0, 1.0, 1), strict=True))))
    before = names(scrape(m), "orders")
    assert {"connect_records_polled_total", "connect_task_state", "connect_connector_state", "connect_source_lag_records",
            "connect_epoch_duration_seconds_bucket", "connect_ack_latency_seconds_count"} <= before
    m.remove("orders")
    s = scrape(m)
    assert names(s, "orders") == set()
    assert names(s, "payments") == before
    assert value(s, "connect_records_polled_total", connector="payments", task="1") == 3
    assert _states(s, "connect_connectors")[RUNNING] == 1
    m.remove("unknown")  # no-op
    m.epoch("orders", result("orders", 0, records=2))  # re-created: starts from zero
    assert value(scrape(m), "connect_records_polled_total", connector="orders", task="0") == 2


def test_remove_task():
    m = ConnectMetrics()
    for task in (0, 1):
        m.task_state("c", task, RUNNING)
        m.epoch("c", result("c", task, records=1))
    m.remove_task("c", 1)
    s = scrape(m)
    assert {dict(labels)["task"] for name, labels in s if ("connector", "c") in labels} == {"0"}


def test_instances_do_not_share_series():
    a, b = ConnectMetrics(), ConnectMetrics()
    a.epoch("orders", result(records=10))
    a.task_state("orders", 0, RUNNING)
    b.epoch("orders", result(records=1))
    assert value(scrape(a), "connect_records_polled_total", connector="orders", task="0") == 10
    assert value(scrape(b), "connect_records_polled_total", connector="orders", task="0") == 1
    assert names(scrape(b)) & {"connect_task_state"} == set()
    assert a.registry is not b.registry and a.registry is not REGISTRY
    assert REGISTRY.get_sample_value("connect_records_polled_total", {"connector": "orders", "task": "0"}) is None
    # The registry is usable directly, like any prometheus_client registry.
    assert a.registry.get_sample_value("connect_records_polled_total", {"connector": "orders", "task": "0"}) == 10


def test_concurrent_updates_add_up_exactly():
    m = ConnectMetrics()
    threads, epochs, start = 8, 300, threading.Barrier(9)
    errors: list[BaseException] = []

    def feed(n: int) -> None:
        try:
            start.wait()
            for i in range(epochs):
                # Two connectors, tasks shared between threads: every increment must land.
                m.epoch(f"c{n % 2}", result(f"c{n % 2}", n % 3, i, records=3, bytes=7, retries=1,
                                            latency_ms_max=1.0, latency_ms_sum=2.0, latency_samples=2))
                m.task_state(f"c{n % 2}", n % 3, FAILED if i % 2 else RUNNING)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def scrape_while_feeding() -> None:
        start.wait()
        for _ in range(50):
            scrape(m)

    workers = [threading.Thread(target=feed, args=(n,)) for n in range(threads)]
    scraper = threading.Thread(target=scrape_while_feeding)
    for t in (*workers, scraper):
        t.start()
    for t in (*workers, scraper):
        t.join(60)
        assert not t.is_alive()
    assert not errors
    s = scrape(m)
    total = {name: sum(v for (n, _), v in s.items() if n == name)
             for name in ("connect_records_polled_total", "connect_bytes_polled_total", "connect_retries_total",
                          "connect_epochs_total", "connect_epoch_duration_seconds_count",
                          "connect_replication_latency_seconds_count")}
    n = threads * epochs
    assert total == {"connect_records_polled_total": 3 * n, "connect_bytes_polled_total": 7 * n,
                     "connect_retries_total": n, "connect_epochs_total": n, "connect_epoch_duration_seconds_count": n,
                     "connect_replication_latency_seconds_count": 2 * n}
    # Per label set: thread n feeds (c{n%2}, task n%3); threads 0..7 -> c0: tasks 0,2,1,0 ; c1: tasks 1,0,2,1.
    assert value(s, "connect_epochs_total", connector="c0", task="0") == 2 * epochs
    assert value(s, "connect_epochs_total", connector="c1", task="1") == 2 * epochs
    assert value(s, "connect_epochs_total", connector="c0", task="1") == epochs
    pairs = {(dict(labels)["connector"], dict(labels)["task"]) for name, labels in s if name == "connect_task_state"}
    assert len(pairs) == 6
    for connector, task in pairs:
        assert sum(_states(s, "connect_task_state", connector=connector, task=task).values()) == 1


def _runtime(name, tasks, alive=True):
    return SimpleNamespace(name=name, tasks=tasks, alive=lambda: alive)


def test_on_epoch_syncs_states_from_runtimes():
    m = ConnectMetrics()
    tasks = [SimpleNamespace(task=0, state=RUNNING, restart_at=None),
             SimpleNamespace(task=1, state=FAILED, restart_at=123.0),
             SimpleNamespace(task=2, state=FAILED, restart_at=None)]
    rt = _runtime("orders", tasks)
    m.on_epoch(0, [result("orders", t.task, records=2) for t in tasks], [rt])
    s = scrape(m)
    on = {(dict(labels)["task"], dict(labels)["state"]) for (name, labels), v in s.items()
          if name == "connect_task_state" and v == 1.0}
    assert on == {("0", RUNNING), ("1", "RESTARTING"), ("2", FAILED)}
    assert _states(s, "connect_connector_state", connector="orders")[RUNNING] == 1
    assert value(s, "connect_records_polled_total", connector="orders", task="2") == 2
    # Reconfigured down to one pair, which then failed for good: the others' series go, the connector is FAILED.
    tasks[:] = [SimpleNamespace(task=0, state=FAILED, restart_at=None)]
    m.on_epoch(1, [result("orders", 0, 1, state=FAILED)], [_runtime("orders", tasks, alive=False)])
    s = scrape(m)
    assert {dict(labels)["task"] for name, labels in s if ("connector", "orders") in labels and ("task", "0") not in labels
            and name != "connect_connector_state"} == set()
    assert _states(s, "connect_task_state", connector="orders", task="0")[FAILED] == 1
    assert _states(s, "connect_connector_state", connector="orders")[FAILED] == 1
    assert _states(s, "connect_connectors")[FAILED] == 1
    assert value(s, "connect_epochs_failed_total", connector="orders", task="0") == 1


def test_partition_lag_gauges_per_partition_with_readable_labels():
    m = ConnectMetrics()
    r = result(task=0)
    r.partition_lag = {'{"partition":1,"topic":"orders"}': [7.0, 2.5],
                       '{"broker":"b-a","queue":3,"topic":"rq"}': [0.0, 0.0]}
    m.epoch("c", r)
    s = scrape(m)
    assert value(s, "connect_partition_lag_records", connector="c", task="0", partition="orders/1") == 7.0
    assert value(s, "connect_partition_lag_seconds", connector="c", task="0", partition="orders/1") == 2.5
    assert value(s, "connect_partition_lag_records", connector="c", task="0", partition="rq/b-a/3") == 0.0
    m.epoch("c", result(task=0, epoch=1))  # a source that no longer reports: the series go
    assert value(scrape(m), "connect_partition_lag_records", connector="c", task="0", partition="orders/1") is None


def test_a_lag_question_to_a_source_that_is_away_never_holds_the_connector_long():
    """``CommittedLag.measure`` waits at most MEASURE_WAIT_S for the source; the late answer is
    taken by a later measurement, and a pending question is not asked twice."""
    import threading
    import time as _time

    from worker.telemetry import lag as lag_module
    from worker.telemetry.lag import CommittedLag

    release = threading.Event()
    asked = []

    class Away:
        def committed_lag(self, committed):
            asked.append(1)
            release.wait(10)
            return {"p": 7}

    lag = CommittedLag()
    lag_module.MEASURE_WAIT_S, saved = 0.2, lag_module.MEASURE_WAIT_S
    try:
        t0 = _time.monotonic()
        lag.measure(Away(), {"p": {"offset": 1}})
        assert _time.monotonic() - t0 < 1.0 and not lag.known and lag.of() is None
        lag.measure(Away(), {"p": {"offset": 1}})
        assert len(asked) == 1  # still pending: not asked again
        release.set()
        _time.sleep(0.1)
        lag.measure(Away(), {"p": {"offset": 1}})
        assert lag.known and lag.of()[0] == 7
    finally:
        lag_module.MEASURE_WAIT_S = saved
