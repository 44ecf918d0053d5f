"""Prometheus metrics of the worker service: per connector and task pair, fed from epoch results.

:class:`ConnectMetrics` owns its own :class:`~prometheus_client.CollectorRegistry` (never the
process-global one), so several workers, or several tests, in one process never share series.
It keeps plain numbers under one lock and builds the metric families when scraped, so a scrape
always sees every metric of an epoch updated together (never half an epoch).

Feeding it:

* :meth:`ConnectMetrics.epoch` with each :class:`~connect.tasks.results.EpochResult` the driver
  accepted. ``result.stats`` holds per-epoch deltas (``EpochStats.as_dict()``), so counters just add
  them up; a missing, negative or non-numeric value adds nothing (counters only increase).
* :meth:`ConnectMetrics.task_state` / :meth:`ConnectMetrics.connector_state` with Kafka-Connect-like
  states; :meth:`ConnectMetrics.sync` derives them from the driver's runtimes, and
  :meth:`ConnectMetrics.on_epoch` has the driver's ``on_epoch`` signature (records the results,
  then syncs).
* :meth:`ConnectMetrics.remove` when a connector is deleted (every series of it goes).

Absent rather than stale or NaN: a gauge whose value is unknown for the last epoch has no series
for that task pair until it is known again: the source lag (``result.lag`` is None), the gap
between epochs (``result.gap_s`` is None: a pair's first epoch, or after a restart), the
replication latency gauges (no record put in the last epoch) and the acknowledgement latency
gauges (no acknowledgement timed in the last epoch, or the runner does not report them). Likewise
``connect_records_acknowledged_total`` and ``connect_ack_latency_seconds`` appear for a task pair
once its runner first reports acknowledgements (the ``acknowledged`` / ``ack_latency_*`` stats).

Latencies are exported in seconds (stats carry milliseconds). Failure reasons are not exported
(unbounded label values); the progress lines and logs carry them, and :meth:`ConnectMetrics.figures`
keeps them per connector for the console (at most :data:`REASONS_KEPT` distinct ones, the rest
counted under ``OTHER_REASONS``; texts masked by the executors and cut to ``REASON_SHOWN``), with
the last FAILED trace.
"""

from __future__ import annotations

import math
import threading
from typing import Any, Callable, Iterable, Mapping

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from connect import __version__
from connect.tasks.results import FAILED, OTHER_REASONS, REASON_SHOWN, REASONS_KEPT, RUNNING, EpochResult
from worker.runtime.gapledger import gap_totals

__all__ = ["ConnectMetrics", "STATES", "DURATION_BUCKETS", "RUNNING", "PAUSED", "STOPPED", "FAILED", "UNASSIGNED",
           "RESTARTING"]

PAUSED = "PAUSED"
STOPPED = "STOPPED"
UNASSIGNED = "UNASSIGNED"
RESTARTING = "RESTARTING"
STATES = (RUNNING, PAUSED, STOPPED, FAILED, UNASSIGNED, RESTARTING)

# Epoch durations: from 10 ms (a near-empty epoch) to a minute (epoch.max.ms plus grace).
DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0)

_TASK_LABELS = ("connector", "task")

# (metric name without _total, EpochStats key, help)
_STAT_COUNTERS = (
    ("connect_records_polled", "records", "Records polled from the source and put to the sink."),
    ("connect_bytes_polled", "bytes", "Key and value bytes of the records put to the sink."),
    ("connect_transient_failures", "transient", "Transient delivery failures (timeouts, full queue...), re-sent."),
    ("connect_retries", "retries", "Retried calls (poll, put, flush) and re-sent records."),
    ("connect_record_errors", "errors", "Records that failed permanently (conversion, refused by the destination)."),
    ("connect_records_dead_lettered", "dead_lettered", "Failed records written to the dead-letter topic."),
    ("connect_records_dismissed", "dismissed", "Failed records dismissed by the source task (dismiss_failed_msgs)."),
    ("connect_records_customer_handled", "customer_handled",
     "Failed records handled by the source task (customer_failed_msgs)."),
    ("connect_records_skipped", "skipped", "Failed records skipped by errors.tolerance=all."),
    ("connect_records_filtered", "filtered",
     "Records not written by replication rules (origin chain holds the target, max hops, cycle by name)."),
    ("connect_flushes", "flushes", "Commit points (sink flushes)."),
    ("connect_records_committed", "committed",
     "Acknowledged records whose source offsets were committed (persisted with the epoch)."),
    ("connect_transactions_committed", "transactions", "exactly.once.support: epoch transactions committed."),
    ("connect_transactions_aborted", "aborted", "exactly.once.support: epoch transactions aborted."),
    ("connect_producers_fenced", "fenced", "exactly.once.support: attempts fenced by a newer attempt of the pair."),
    ("connect_transaction_commit_seconds", "commit_s", "exactly.once.support: time spent committing transactions."),
)

# (metric name, _TaskSeries.gauges key, help)
_GAUGES = (
    ("connect_records_in_flight", "in_flight", "Records put (or waiting to be re-sent) not yet acknowledged at epoch end."),
    ("connect_source_lag_records", "lag", "Records behind the source's end at epoch end (absent when unknown)."),
    ("connect_replication_latency_avg_seconds", "latency_avg",
     "Average record age (put time - record timestamp) in the last epoch (absent when it put nothing)."),
    ("connect_replication_latency_max_seconds", "latency_max",
     "Largest record age (put time - record timestamp) in the last epoch (absent when it put nothing)."),
    ("connect_ack_latency_avg_seconds", "ack_avg",
     "Average acknowledgement time - record timestamp in the last epoch (absent when none was timed)."),
    ("connect_ack_latency_max_seconds", "ack_max",
     "Largest acknowledgement time - record timestamp in the last epoch (absent when none was timed)."),
    ("connect_epoch_gap_seconds", "gap",
     "Seconds from the end of the previous epoch to the start of the last one (absent for a first epoch)."),
    ("connect_last_epoch_end_timestamp_seconds", "ended_at", "Unix time the last epoch ended (executor's clock)."),
)


def _delta(value: Any) -> float:
    """A counter increment: a finite, non-negative number, else 0."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
        return float(value)
    return 0.0


def _number(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _partition_label(key: str) -> str:
    """``orders/0`` for the partition key ``{"partition":0,"topic":"orders"}`` (topic first, then the
    other fields by name: ``orders/broker-a/3`` for a RocketMQ queue); the key itself if it is no JSON object."""
    try:
        fields = orjson.loads(key)
    except orjson.JSONDecodeError:
        return key
    if not isinstance(fields, dict):
        return key
    parts = [fields.pop("topic")] if "topic" in fields else []
    parts += [fields[k] for k in sorted(fields)]
    return "/".join(str(p) for p in parts)


def _state(state: str) -> str:
    name = str(state).upper()
    if name not in STATES:
        raise ValueError(f"unknown state {state!r}; expected one of {', '.join(STATES)}")
    return name


class _TaskSeries:
    """Everything exported for one (connector, task) pair."""

    __slots__ = ("counters", "acknowledged", "epochs", "failed", "restarts", "buckets", "duration_sum",
                 "gauges", "latency", "ack_latency", "reported", "partition_lag", "rate", "latency_seen")

    def __init__(self) -> None:
        self.counters = {name: 0.0 for name, _, _ in _STAT_COUNTERS}
        self.acknowledged: float | None = None  # None until the runner reports acknowledgements
        self.epochs = 0
        self.failed = 0
        self.restarts = 0
        self.buckets = [0] * (len(DURATION_BUCKETS) + 1)  # per bucket (not cumulative), last is +Inf
        self.duration_sum = 0.0
        self.gauges: dict[str, float] = {}
        self.latency = [0.0, 0]  # seconds sum, samples
        # (epoch number, oldest record age in s) of the last epoch that timed records: the gauge is
        # dropped by an idle epoch, this is kept for readers that sample less often than epochs end
        self.latency_seen: tuple[int, float] | None = None
        self.ack_latency: list | None = None  # like latency, once acknowledgements are timed
        self.reported: dict[str, float] = {}  # the tasks' own gauges (SourceTask/SinkTask.metrics), last epoch
        self.partition_lag: dict[str, tuple[float, float]] = {}  # partition label -> (records, seconds) behind
        self.rate: float | None = None  # records per second of the last epoch

    def observe_duration(self, seconds: float) -> None:
        for i, bound in enumerate(DURATION_BUCKETS):
            if seconds <= bound:
                self.buckets[i] += 1
                break
        else:
            self.buckets[-1] += 1
        self.duration_sum += seconds

    def observe_latency(self, totals: list | None, kind: str, stats: Mapping[str, Any], samples: int) -> None:
        """Add an epoch's ``<kind>`` latency (``latency`` or ``ack``) to ``totals`` [seconds, samples]
        and set its avg/max gauges (dropped when the epoch timed none)."""
        prefix = "latency" if kind == "latency" else "ack_latency"
        if totals is None or not samples:
            self.set_gauge(f"{kind}_avg", None)
            self.set_gauge(f"{kind}_max", None)
            return
        total_s = _delta(stats.get(f"{prefix}_ms_sum")) / 1000.0
        totals[0] += total_s
        totals[1] += samples
        self.set_gauge(f"{kind}_avg", total_s / samples)
        self.set_gauge(f"{kind}_max", _delta(stats.get(f"{prefix}_ms_max")) / 1000.0)

    def set_gauge(self, key: str, value: Any) -> None:
        number = _number(value)
        if number is None:
            self.gauges.pop(key, None)
        else:
            self.gauges[key] = number


class _Collector(Collector):
    def __init__(self, collect: Callable[[], list]):
        self._collect = collect

    def collect(self):
        return iter(self._collect())


class ConnectMetrics:
    """The worker's Prometheus metrics, in a registry of its own. Every method is thread-safe."""

    def __init__(self, *, version: str | None = None, info: Mapping[str, str] | None = None):
        self._info = {"version": __version__ if version is None else str(version),
                      **{str(k): str(v) for k, v in (info or {}).items()}}
        self._lock = threading.Lock()
        self._tasks: dict[tuple[str, int], _TaskSeries] = {}
        self._task_states: dict[tuple[str, int], str] = {}
        self._connector_states: dict[str, str] = {}
        self._executor: Any = None
        self._reasons: dict[str, dict[str, int]] = {}  # connector -> failure reason -> records (bounded)
        self._last_failure: dict[str, tuple[int, float, str]] = {}  # connector -> (task, unix time, trace)
        self._gaps: dict[str, dict[tuple[str, str], float]] = {}  # connector -> (topic, partition) -> records
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self._families))

    def watch_executor(self, executor: Any) -> None:
        """Report how the executor hosts task pairs: slot waits (``job``), hosts and their load (``shared``)."""
        self._executor = executor

    def _executor_families(self) -> list:
        executor = self._executor
        if executor is None:
            return []
        waits = GaugeMetricFamily("connect_slot_wait_seconds", "How long the connector's current epoch has waited "
                                  "for free task slots (worker.pair.hosting=job); 0 when it waits for none.",
                                  labels=["connector"])
        waited = CounterMetricFamily("connect_slot_waited_seconds", "Seconds the connector's epochs waited for free "
                                     "task slots, in all (worker.pair.hosting=job).", labels=["connector"])
        now = executor.slot_waits()
        for who, seconds in sorted(executor.gate.waited_s.items()):
            waits.add_metric([who], now.get(who, 0.0))
            waited.add_metric([who], seconds)
        hosts = executor.hosts()
        count = GaugeMetricFamily("connect_pair_hosts", "Hosts running task pairs (worker.pair.hosting=shared).")
        count.add_metric([], len(hosts))
        pairs = GaugeMetricFamily("connect_pair_host_pairs", "Task pairs placed on the host.", labels=["host"])
        load = GaugeMetricFamily("connect_pair_host_load_cores", "CPU the host's pairs used, in cores (moving "
                                 "average of their epochs).", labels=["host"])
        moves = CounterMetricFamily("connect_pair_moves", "Task pairs moved to another host (each restarts there "
                                    "from its committed offsets).")
        moves.add_metric([], executor.pool.moves if getattr(executor, "pool", None) is not None else 0)
        for h in hosts:
            pairs.add_metric([h["host"]], len(h["pairs"]))
            load.add_metric([h["host"]], h["load"])
        return [waits, waited, count, pairs, load, moves]

    # -- feeding -------------------------------------------------------------------------------
    def epoch(self, connector: str, result: EpochResult) -> None:
        """Add one epoch of one task pair (``result.stats`` are that epoch's deltas)."""
        stats = result.stats or {}
        key = (connector, int(result.task))
        duration = result.duration
        latency_samples = int(_delta(stats.get("latency_samples")))
        has_ack = "acknowledged" in stats
        has_ack_latency = any(k in stats for k in ("ack_latency_ms_max", "ack_latency_ms_sum", "ack_latency_samples"))
        ack_samples = int(_delta(stats.get("ack_latency_samples")))
        with self._lock:
            series = self._tasks.get(key)
            if series is None:
                series = self._tasks[key] = _TaskSeries()
            for name, stat, _ in _STAT_COUNTERS:
                series.counters[name] += _delta(stats.get(stat))
            if has_ack:
                series.acknowledged = (series.acknowledged or 0.0) + _delta(stats["acknowledged"])
            series.epochs += 1
            if result.state == FAILED:
                series.failed += 1
            if result.restarted:
                series.restarts += 1
            series.observe_duration(duration)
            series.rate = _delta(stats.get("records")) / duration if duration > 0 else None
            series.reported = {str(k): v for k, v in (getattr(result, "metrics", None) or {}).items()
                               if _number(v) is not None}
            series.partition_lag = {_partition_label(k): (float(v[0]), float(v[1]))
                                    for k, v in (getattr(result, "partition_lag", None) or {}).items()
                                    if len(v) == 2 and _number(v[0]) is not None and _number(v[1]) is not None}

            self._keep_failures(connector, result, stats)
            series.set_gauge("in_flight", stats.get("in_flight"))
            series.set_gauge("lag", result.lag)
            series.set_gauge("gap", result.gap_s)
            series.set_gauge("ended_at", result.ended_at)
            series.observe_latency(series.latency, "latency", stats, latency_samples)
            if latency_samples and "latency_max" in series.gauges:
                series.latency_seen = (series.epochs, series.gauges["latency_max"])
            if has_ack_latency and series.ack_latency is None:
                series.ack_latency = [0.0, 0]
            series.observe_latency(series.ack_latency, "ack", stats, ack_samples if has_ack_latency else 0)

    def _keep_failures(self, connector: str, result: EpochResult, stats: Mapping[str, Any]) -> None:
        """Failure reasons summed per connector (bounded) and the last FAILED trace (the caller holds the lock)."""
        reasons = stats.get("failure_reasons")
        if isinstance(reasons, dict) and reasons:
            kept = self._reasons.setdefault(connector, {})
            for reason, n in reasons.items():
                reason = str(reason)[:REASON_SHOWN]
                if reason not in kept and len(kept) >= REASONS_KEPT:
                    reason = OTHER_REASONS
                kept[reason] = kept.get(reason, 0) + int(_delta(n))
        if result.state == FAILED and result.trace:
            self._last_failure[connector] = (int(result.task), float(result.ended_at), str(result.trace))

    def lag(self, connector: str, task: int, behind: tuple[int, float] | None,
            partitions: Mapping[str, tuple[int, float]], keys: Iterable[str]) -> None:
        """Set a task pair's lag while it runs no epoch (paused, failing): from the committed
        offsets, as the driver measures it (``worker.telemetry.lag``); left as it was when unknown."""
        if behind is None:
            return
        with self._lock:
            series = self._tasks.get((connector, int(task)))
            if series is None:
                series = self._tasks[(connector, int(task))] = _TaskSeries()
            series.set_gauge("lag", behind[0])
            series.partition_lag = {_partition_label(k): (float(partitions[k][0]), float(partitions[k][1]))
                                    for k in keys if k in partitions}

    def task_state(self, connector: str, task: int, state: str) -> None:
        """Set a task pair's state (one of :data:`STATES`; ValueError otherwise)."""
        name = _state(state)
        with self._lock:
            self._task_states[(connector, int(task))] = name

    def connector_state(self, connector: str, state: str) -> None:
        """Set a connector's state (one of :data:`STATES`; ValueError otherwise)."""
        name = _state(state)
        with self._lock:
            self._connector_states[connector] = name

    def connector_summary(self, connector: str) -> dict[str, Any]:
        """One connector's figures over its tasks (replicator stats, PIP-18): records polled and
        acknowledged, records per second in the last epoch, lag (records behind, None when no task
        knows), failures (permanent record errors + transient failures) and failed epochs."""
        with self._lock:
            series = [s for (c, _t), s in self._tasks.items() if c == connector]
            lags = [s.gauges["lag"] for s in series if "lag" in s.gauges]
            rates = [s.rate for s in series if s.rate is not None]
            return {
                "records": sum(s.counters["connect_records_polled"] for s in series),
                "acknowledged": sum(s.acknowledged or 0.0 for s in series),
                "records_per_second": sum(rates) if rates else None,
                "lag": sum(lags) if lags else None,
                "failures": sum(s.counters["connect_record_errors"] + s.counters["connect_transient_failures"]
                                for s in series),
                "failed_epochs": sum(s.failed for s in series),
                "tasks": len(series),
            }

    def remove(self, connector: str) -> None:
        """Drop every series of ``connector`` (it was deleted)."""
        with self._lock:
            for key in [k for k in self._tasks if k[0] == connector]:
                del self._tasks[key]
            for key in [k for k in self._task_states if k[0] == connector]:
                del self._task_states[key]
            self._connector_states.pop(connector, None)
            self._reasons.pop(connector, None)
            self._last_failure.pop(connector, None)
            self._gaps.pop(connector, None)

    def figures(self, connectors: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
        """Per connector (every one with series, or those named), its figures for the console in one
        pass under the lock: counters summed over its task pairs (``records``, ``acknowledged``,
        ``committed``, ``errors``, ``transient``, ``dead_lettered``, ``skipped``, ``dismissed``,
        ``customer_handled``, ``filtered``), ``lag`` (None when no pair knows), the largest
        replication latency of the last epochs (seconds), per task its own gauges (``reported``) and
        its lag per partition label, the failure reasons and the last FAILED trace."""
        wanted = None if connectors is None else set(connectors)
        keys = {"records": "connect_records_polled", "committed": "connect_records_committed",
                "errors": "connect_record_errors", "transient": "connect_transient_failures",
                "dead_lettered": "connect_records_dead_lettered", "skipped": "connect_records_skipped",
                "dismissed": "connect_records_dismissed", "customer_handled": "connect_records_customer_handled",
                "filtered": "connect_records_filtered"}
        out: dict[str, dict[str, Any]] = {}
        with self._lock:
            for (name, task), s in self._tasks.items():
                if wanted is not None and name not in wanted:
                    continue
                f = out.get(name)
                if f is None:
                    f = out[name] = {**dict.fromkeys(keys, 0.0), "acknowledged": 0.0, "lag": None, "latency_max": None,
                                     "tasks": {}}
                for key, metric in keys.items():
                    f[key] += s.counters[metric]
                f["acknowledged"] += s.acknowledged or 0.0
                if "lag" in s.gauges:
                    f["lag"] = (f["lag"] or 0.0) + s.gauges["lag"]
                if s.latency_seen is not None:  # the last epoch that timed records, however long ago
                    f["latency_max"] = max(f["latency_max"] or 0.0, s.latency_seen[1])
                    f["latency_mark"] = f.get("latency_mark", 0) + s.latency_seen[0]  # changes with each such epoch
                f["tasks"][task] = {"reported": dict(s.reported), "partition_lag": dict(s.partition_lag),
                                    "epochs": s.epochs, "failed_epochs": s.failed}
            for name, f in out.items():
                f["failure_reasons"] = dict(self._reasons.get(name, {}))
                last = self._last_failure.get(name)
                f["last_failure"] = None if last is None else {"task": last[0], "at": last[1], "trace": last[2]}
        return out

    def remove_task(self, connector: str, task: int) -> None:
        """Drop every series of one task pair (gone after a reconfiguration)."""
        key = (connector, int(task))
        with self._lock:
            self._tasks.pop(key, None)
            self._task_states.pop(key, None)

    def sync(self, runtimes: Iterable[Any]) -> None:
        """Take states from the driver's :class:`~worker.runtime.driver.PipelineRuntime` objects.

        A task pair is RESTARTING when FAILED with an automatic restart scheduled, else its
        ``TaskState.state``; a connector is RUNNING while some pair runs or will be restarted
        (``alive()``), else FAILED (its epoch loop has ended). Series of task pairs the connector
        no longer has are dropped.
        """
        for rt in runtimes:
            tasks = list(rt.tasks)
            current = {int(t.task) for t in tasks}
            states = {int(t.task): RESTARTING if t.state == FAILED and t.restart_at is not None else _state(t.state)
                      for t in tasks}
            connector = RUNNING if rt.alive() else FAILED
            stored = getattr(rt, "stored_offsets", None)
            if stored is not None:
                self.set_gaps(rt.name, gap_totals(stored()))
            with self._lock:
                for key in [k for k in (*self._tasks, *self._task_states) if k[0] == rt.name and k[1] not in current]:
                    self._tasks.pop(key, None)
                    self._task_states.pop(key, None)
                for task, state in states.items():
                    self._task_states[(rt.name, task)] = state
                self._connector_states[rt.name] = connector

    def set_gaps(self, connector: str, totals: Mapping[tuple[str, str], float]) -> None:
        """Records counted in the connector's source gaps, per (topic, partition) (``worker.runtime.gapledger``)."""
        with self._lock:
            if totals:
                self._gaps[connector] = dict(totals)
            else:
                self._gaps.pop(connector, None)

    def on_epoch(self, epoch: int, results: list[EpochResult], runtimes: list[Any]) -> None:
        """The driver's ``on_epoch`` hook: record ``results``, then :meth:`sync` the runtimes."""
        for result in results:
            self.epoch(result.connector, result)
        self.sync(runtimes)

    # -- exposition ----------------------------------------------------------------------------
    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type (for an HTTP ``/metrics`` answer)."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST

    def _families(self) -> list:
        with self._lock:
            return self._build()

    def _build(self) -> list:
        out: list = [InfoMetricFamily("connect_worker", "Worker build information.", value=self._info)]
        out += self._state_families()
        out += self._task_families(sorted(self._tasks.items()))
        out.append(self._gap_family())
        out.extend(self._executor_families())
        return out

    def _state_families(self) -> list:
        """Connectors by state, and each connector's and task pair's state."""
        connectors = GaugeMetricFamily("connect_connectors", "Connectors by state.", labels=["state"])
        for state in STATES:
            connectors.add_metric([state], sum(1 for s in self._connector_states.values() if s == state))

        connector_state = GaugeMetricFamily("connect_connector_state", "1 for the connector's current state, else 0.",
                                            labels=["connector", "state"])
        for name, current in sorted(self._connector_states.items()):
            for state in STATES:
                connector_state.add_metric([name, state], 1.0 if state == current else 0.0)

        task_state = GaugeMetricFamily("connect_task_state", "1 for the task pair's current state, else 0.",
                                       labels=[*_TASK_LABELS, "state"])
        for (name, task), current in sorted(self._task_states.items()):
            for state in STATES:
                task_state.add_metric([name, str(task), state], 1.0 if state == current else 0.0)
        return [connectors, connector_state, task_state]

    def _task_families(self, tasks: list) -> list:
        """The counters, histograms, summaries and gauges of each task pair."""
        out: list = []
        for metric, _, doc in _STAT_COUNTERS:
            family = CounterMetricFamily(metric, doc, labels=_TASK_LABELS)
            for (name, task), series in tasks:
                family.add_metric([name, str(task)], series.counters[metric])
            out.append(family)
        acknowledged = CounterMetricFamily("connect_records_acknowledged",
                                           "Records whose delivery the destination confirmed.", labels=_TASK_LABELS)
        epochs = CounterMetricFamily("connect_epochs", "Epochs run.", labels=_TASK_LABELS)
        failed = CounterMetricFamily("connect_epochs_failed", "Epochs that ended FAILED.", labels=_TASK_LABELS)
        restarts = CounterMetricFamily("connect_task_restarts", "Epochs in which the worker process had to (re)start "
                                       "the pair's tasks.", labels=_TASK_LABELS)
        duration = HistogramMetricFamily("connect_epoch_duration_seconds", "Epoch duration.", labels=_TASK_LABELS)
        latency = SummaryMetricFamily("connect_replication_latency_seconds",
                                      "Record age (put time - record timestamp), over all records put.", labels=_TASK_LABELS)
        ack_latency = SummaryMetricFamily("connect_ack_latency_seconds", "Acknowledgement time - record timestamp, "
                                          "over all acknowledged records timed.", labels=_TASK_LABELS)
        gauges = {key: GaugeMetricFamily(metric, doc, labels=_TASK_LABELS) for metric, key, doc in _GAUGES}
        lag_records = GaugeMetricFamily("connect_partition_lag_records", "Records behind the source's end, per "
                                        "source partition or queue, at epoch end.", labels=[*_TASK_LABELS, "partition"])
        lag_seconds = GaugeMetricFamily("connect_partition_lag_seconds", "Age of the newest acknowledged record while "
                                        "records remain to copy (0 when caught up), per source partition or queue.",
                                        labels=[*_TASK_LABELS, "partition"])
        reported = GaugeMetricFamily("connect_task_metric", "A gauge the task pair reports itself at epoch end "
                                     "(e.g. heartbeat.<alias>.latency_ms of the heartbeat monitor).",
                                     labels=[*_TASK_LABELS, "name"])
        for (name, task), series in tasks:
            labels = [name, str(task)]
            if series.acknowledged is not None:
                acknowledged.add_metric(labels, series.acknowledged)
            epochs.add_metric(labels, series.epochs)
            failed.add_metric(labels, series.failed)
            restarts.add_metric(labels, series.restarts)
            cumulative, buckets = 0, []
            for bound, count in zip((*DURATION_BUCKETS, math.inf), series.buckets, strict=True):
                cumulative += count
                buckets.append((floatToGoString(bound), cumulative))
            duration.add_metric(labels, buckets, series.duration_sum)
            latency.add_metric(labels, series.latency[1], series.latency[0])
            if series.ack_latency is not None:
                ack_latency.add_metric(labels, series.ack_latency[1], series.ack_latency[0])
            for key, value in series.gauges.items():
                gauges[key].add_metric(labels, value)
            for key, value in sorted(series.reported.items()):
                reported.add_metric([*labels, key], value)
            for part, (records, seconds) in sorted(series.partition_lag.items()):
                lag_records.add_metric([*labels, part], records)
                lag_seconds.add_metric([*labels, part], seconds)
        out += [acknowledged, epochs, failed, restarts, duration, latency, ack_latency, *gauges.values(), reported,
                lag_records, lag_seconds]
        return out

    def _gap_family(self) -> CounterMetricFamily:
        """Records each connector's source dropped, per source partition."""
        gaps = CounterMetricFamily("connect_source_gap_records", "Records the source dropped before they were "
                                   "copied (retention, DeleteRecords; 0 for a gap that cannot be counted, e.g. a "
                                   "re-created topic), per source partition; see GET /connectors/{name}/gaps.",
                                   labels=["connector", "topic", "partition"])
        for name, totals in sorted(self._gaps.items()):
            for (topic, part), records in sorted(totals.items()):
                gaps.add_metric([name, topic, part], records)
        return gaps
