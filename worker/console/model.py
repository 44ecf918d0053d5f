"""The operator console's data: a bounded history of every connector, and the views ``/ui`` polls.

The console (``/ui``, static files in ``worker/console/assets``) is a page that polls two JSON
documents, both behind the REST API's authentication:

- ``GET /console/summary``: the worker (id, version, uptime, generation) and every connector as a
  *flow* between two *clusters*, with its state, health, records/s, acknowledged/s and lag - one
  request for all connectors, whatever their number;
- ``GET /console/connectors/{name}``: one flow in full - tasks and their states, records/s and
  acknowledged/s over the last 15 minutes, lag per partition with the committed offsets, heartbeat
  latency p50/p99, checkpoint counters, failures by reason with the last trace, dead-letter counts.

A cluster is named by the side's ``cluster.alias`` (``source.cluster.alias``,
``sink.cluster.alias``, or ``target.cluster.alias``), else ``alias`` (heartbeat emitters), else
its address (``bootstrap.servers``, ``service.url``, ``namesrv.addr``); a side without any (a
heartbeat monitor's sink) is the other side's cluster, drawn as a loop.

Health of a flow, first match wins: ``failing`` (the connector or a task pair FAILED or restarting
after a failure, or a pair retrying transient trouble), ``paused``, ``stopped``, ``starting``
(UNASSIGNED, RESTARTING), ``stale`` (a heartbeat monitor in its target cluster says the heartbeats
from its source cluster are older than the monitor's ``timeout.ms``), ``lagging`` (what is left to
deliver would take more than :data:`LAGGING_S` seconds at the rate it acknowledges now; with
nothing acknowledged, more than :data:`LAGGING_S` records), else ``running``.

History: :class:`ConsoleHistory` samples the worker's metrics every :data:`SAMPLE_S` seconds in a
thread of its own and keeps, per connector, the last :data:`WINDOW_S` seconds (at most
:data:`SLOTS` samples of four numbers each, and at most :data:`HEARTBEAT_SAMPLES` heartbeat
latencies for each of at most :data:`HEARTBEAT_ALIASES` origins): memory is bounded per
connector, and a deleted connector's history goes at the next sample. It is in memory only: a
restarted worker starts a new history (the console shows the restart as uptime and generation).

Nothing secret leaves: configs are shown masked (``Herder.masked_config``), traces and reasons were
masked by the executors and are masked again here by the herder's redactor, as ``/metrics`` is.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from typing import Any, Callable

from connect.records import partition_key
from worker.herder import ConnectorNotFound
from worker.telemetry.metrics import _partition_label

__all__ = ["ConsoleHistory", "ConsoleViews", "SAMPLE_S", "WINDOW_S", "SLOTS", "LAGGING_S", "flow_ends"]

log = logging.getLogger(__name__)

SAMPLE_S = 2.0
WINDOW_S = 900.0
SLOTS = int(WINDOW_S / SAMPLE_S) + 1
HEARTBEAT_SAMPLES = 450
HEARTBEAT_ALIASES = 16
LAGGING_S = 30.0
RATE_SAMPLES = 5  # the rates shown on the topology: over the last 5 samples (10 s)

_ADDRESS_KEYS = ("bootstrap.servers", "service.url", "namesrv.addr")


class _History:
    """One connector's samples: (monotonic time, records, acknowledged, lag or NaN), oldest first."""

    __slots__ = ("samples", "heartbeats", "counts")

    def __init__(self) -> None:
        self.samples: deque[tuple[float, float, float, float]] = deque(maxlen=SLOTS)
        self.heartbeats: dict[str, deque[tuple[float, float]]] = {}  # origin alias -> (time, latency ms)
        self.counts: dict[str, float] = {}  # origin alias -> heartbeats seen, at the last sample

    def add_heartbeats(self, now: float, reported: dict[str, float]) -> None:
        """Keep a heartbeat latency when the monitor saw a new heartbeat since the last sample
        (its ``count`` grew), so a link's percentile is over heartbeats, not over samples."""
        for key, count in reported.items():
            if not (key.startswith("heartbeat.") and key.endswith(".count")):
                continue
            alias = key[len("heartbeat."):-len(".count")]
            latency = reported.get(f"heartbeat.{alias}.latency_ms")
            if latency is None or count == self.counts.get(alias):
                continue
            self.counts[alias] = count
            kept = self.heartbeats.get(alias)
            if kept is None:
                if len(self.heartbeats) >= HEARTBEAT_ALIASES:
                    continue
                kept = self.heartbeats[alias] = deque(maxlen=HEARTBEAT_SAMPLES)
            kept.append((now, float(latency)))


def _rates(samples: list[tuple[float, float, float, float]]) -> list[tuple[float, float | None, float | None]]:
    """(time, records/s, acknowledged/s) between consecutive samples; None where a counter went back
    (the connector was deleted and created again)."""
    out = []
    for (t0, r0, a0, _), (t1, r1, a1, _) in zip(samples, samples[1:], strict=False):
        dt = t1 - t0
        if dt <= 0:
            continue
        out.append((t1, (r1 - r0) / dt if r1 >= r0 else None, (a1 - a0) / dt if a1 >= a0 else None))
    return out


def _percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank percentile ``q`` (0-100) of ``values``; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(math.ceil(q / 100 * len(ordered)) - 1, 0)]


class ConsoleHistory:
    """Samples the metrics of every connector every ``interval`` seconds (a daemon thread)."""

    def __init__(self, metrics: Any, names: Callable[[], list[str]], *, interval: float = SAMPLE_S,
                 clock: Callable[[], float] = time.monotonic):
        self._metrics = metrics
        self._names = names
        self.interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._series: dict[str, _History] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sampled_at = -math.inf

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="console-history", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - the history is informational: never end the thread
                log.exception("console history: sample failed")
            self._stop.wait(self.interval)

    def sample_if_due(self) -> None:
        """A sample when the last one is an interval old (a history without its thread, in tests and
        embedders, is then sampled by the console's own requests)."""
        if self._clock() - self._sampled_at >= self.interval:
            self.sample()

    def sample(self) -> None:
        """Take one sample of every connector (and forget connectors that are gone)."""
        names = set(self._names())
        figures = self._metrics.figures(names) if self._metrics is not None else {}
        now = self._clock()
        with self._lock:
            previous, self._sampled_at = self._sampled_at, now
            for gone in [n for n in self._series if n not in names]:
                del self._series[gone]
            for name in names:
                f = figures.get(name)
                if f is None:
                    continue
                h = self._series.get(name)
                if h is None:
                    h = self._series[name] = _History()
                    if previous > -math.inf:
                        # It had no figures at the last sample, so nothing moved yet then: what it
                        # moved since counts as its first rate (an epoch's records arrive at once).
                        h.samples.append((previous, 0.0, 0.0, math.nan))
                lag = f["lag"]
                h.samples.append((now, f["records"], f["acknowledged"], math.nan if lag is None else float(lag)))
                for task in f["tasks"].values():
                    h.add_heartbeats(now, task["reported"])

    def rates(self, name: str, last: int | None = None) -> list[tuple[float, float | None, float | None]]:
        with self._lock:
            h = self._series.get(name)
            samples = list(h.samples) if h is not None else []
        if last is not None:
            samples = samples[-(last + 1):]
        return _rates(samples)

    def recent_rate(self, name: str) -> tuple[float | None, float | None]:
        """(records/s, acknowledged/s) over the last :data:`RATE_SAMPLES` samples; None when unknown."""
        with self._lock:
            h = self._series.get(name)
            samples = list(h.samples)[-(RATE_SAMPLES + 1):] if h is not None else []
        if len(samples) < 2:
            return None, None
        (t0, r0, a0, _), (t1, r1, a1, _) = samples[0], samples[-1]
        dt = t1 - t0
        if dt <= 0:
            return None, None
        return ((r1 - r0) / dt if r1 >= r0 else None), ((a1 - a0) / dt if a1 >= a0 else None)

    def chart(self, name: str) -> dict[str, list]:
        """The last :data:`WINDOW_S` seconds: seconds before now, records/s, acknowledged/s, lag."""
        now = self._clock()
        with self._lock:
            h = self._series.get(name)
            samples = list(h.samples) if h is not None else []
        rates = _rates(samples)
        lag = {t: None if math.isnan(v) else v for t, _, _, v in samples}
        return {"ago_s": [round(now - t, 1) for t, _, _ in rates],
                "records_per_second": [None if r is None else round(r, 2) for _, r, _ in rates],
                "acknowledged_per_second": [None if a is None else round(a, 2) for _, _, a in rates],
                "lag": [lag.get(t) for t, _, _ in rates]}

    def heartbeat_latency(self, name: str) -> dict[str, dict[str, Any]]:
        """Per origin alias: p50 and p99 of the heartbeat latencies seen in the window, and their count."""
        cutoff = self._clock() - WINDOW_S
        with self._lock:
            h = self._series.get(name)
            kept = {a: [ms for t, ms in d if t >= cutoff] for a, d in h.heartbeats.items()} if h is not None else {}
        return {alias: {"p50_ms": _percentile(v, 50), "p99_ms": _percentile(v, 99), "heartbeats": len(v)}
                for alias, v in sorted(kept.items())}

    def size(self) -> tuple[int, int]:
        """(connectors, samples) held: what the bound in the module docstring limits."""
        with self._lock:
            return len(self._series), sum(len(h.samples) + sum(len(d) for d in h.heartbeats.values())
                                          for h in self._series.values())


def _side_cluster(config: dict[str, str], side: str) -> tuple[str | None, str]:
    """(cluster id, kind) of one side of a connector config (``side``: source or sink)."""
    kind = config.get(f"{side}.connector.class", "?").removesuffix(f"-{side}")
    alias = config.get(f"{side}.cluster.alias", "").strip()
    if not alias and side == "sink":
        alias = config.get("target.cluster.alias", "").strip()
    if not alias:
        alias = config.get(f"{side}.alias", "").strip()  # a heartbeat emitter names its cluster so
    if alias:
        return alias, kind
    for key in _ADDRESS_KEYS:
        address = config.get(f"{side}.{key}", "").strip()
        if address:
            return address, kind
    return None, kind


def flow_ends(config: dict[str, str]) -> tuple[str, str, str, str]:
    """(source cluster, target cluster, source kind, target kind) of a (masked) connector config."""
    source, source_kind = _side_cluster(config, "source")
    target, target_kind = _side_cluster(config, "sink")
    source = source or target or "?"
    return source, target or source, source_kind, target_kind


def _health(state: str, tasks: list[dict[str, Any]], stale: bool, lag: float | None,
            acked_rate: float | None) -> str:
    if state == "FAILED" or any(t["state"] in ("FAILED", "RESTARTING") or t.get("retrying") for t in tasks):
        return "failing"
    if state == "PAUSED":
        return "paused"
    if state == "STOPPED":
        return "stopped"
    if state in ("UNASSIGNED", "RESTARTING"):
        return "starting"
    if stale:
        return "stale"
    if lag and lag / max(acked_rate or 0.0, 1.0) > LAGGING_S:
        return "lagging"
    return "running"


def _stale_links(configs: dict[str, dict[str, str]], figures: dict[str, dict[str, Any]]) -> set[tuple[str, str]]:
    """(source cluster, target cluster) pairs whose heartbeats a monitor reports unhealthy: a monitor
    reads the heartbeat topic of its own (source) cluster, and ``heartbeat.<alias>.healthy`` = 0
    there says the link from ``alias`` to it is stale."""
    stale = set()
    for name, config in configs.items():
        if config.get("sink.connector.class", "").removesuffix("-sink") != "heartbeat":
            continue
        here, _, _, _ = flow_ends(config)
        for task in figures.get(name, {}).get("tasks", {}).values():
            for key, value in task["reported"].items():
                if key.startswith("heartbeat.") and key.endswith(".healthy") and value == 0:
                    stale.add((key[len("heartbeat."):-len(".healthy")], here))
    return stale


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


class ConsoleViews:
    """The two documents the console polls, built from the herder, the metrics and the history."""

    def __init__(self, herder: Any, metrics: Any, history: ConsoleHistory, worker: Callable[[], dict[str, Any]]):
        self.herder = herder
        self.metrics = metrics
        self.history = history
        self._worker = worker  # the worker's identity: id, version, started_at, generation, pid

    def _worker_view(self) -> dict[str, Any]:
        info = dict(self._worker())
        started = info.get("started_at")
        info["uptime_s"] = round(time.time() - started, 1) if started else None
        info["sample_interval_s"] = self.history.interval
        # how task pairs are hosted (issue 23): hosts and their load (shared), slot waits (job)
        executor = getattr(self.herder, "executor", None)
        hosts = executor.hosts() if executor is not None and hasattr(executor, "hosts") else []
        info["hosts"] = [{"host": h["host"], "pairs": len(h["pairs"]), "load_cores": h["load"]} for h in hosts]
        waits = executor.slot_waits() if executor is not None and hasattr(executor, "slot_waits") else {}
        info["slot_waits_s"] = {name: round(seconds, 1) for name, seconds in sorted(waits.items())}
        return info

    def _connectors(self) -> dict[str, tuple[dict[str, Any], dict[str, str]]]:
        """name -> (status, masked config), skipping connectors deleted meanwhile."""
        out = {}
        for name in self.herder.connector_names():
            try:
                out[name] = (self.herder.status(name), self.herder.info(name)["config"])
            except ConnectorNotFound:
                continue
        return out

    def summary(self) -> dict[str, Any]:
        connectors = self._connectors()
        figures = self.metrics.figures(connectors) if self.metrics is not None else {}
        stale = _stale_links({n: c for n, (_, c) in connectors.items()}, figures)
        clusters: dict[str, dict[str, Any]] = {}
        flows = []
        for name, (status, config) in connectors.items():
            source, target, source_kind, target_kind = flow_ends(config)
            for cluster, kind in ((source, source_kind), (target, target_kind)):
                entry = clusters.setdefault(cluster, {"id": cluster, "kinds": []})
                if kind not in entry["kinds"] and kind != "?":
                    entry["kinds"].append(kind)
            tasks = status["tasks"]
            records_rate, acked_rate = self.history.recent_rate(name)
            lag = status["connector"].get("lag")
            f = figures.get(name, {})
            flows.append({
                "name": name, "source": source, "target": target, "state": status["connector"]["state"],
                "health": _health(status["connector"]["state"], tasks, (source, target) in stale,
                                  lag["records"] if lag else None, acked_rate),
                "tasks": {"total": len(tasks), "running": sum(t["state"] == "RUNNING" for t in tasks),
                          "failed": sum(t["state"] == "FAILED" for t in tasks)},
                "records_per_second": _round(records_rate), "acknowledged_per_second": _round(acked_rate),
                "lag": lag, "errors": f.get("errors", 0.0), "dead_lettered": f.get("dead_lettered", 0.0),
                "slot_wait_s": status["connector"].get("slot_wait_s")})
        return {"worker": self._worker_view(), "clusters": sorted(clusters.values(), key=lambda c: c["id"]),
                "flows": flows}

    def detail(self, name: str) -> dict[str, Any]:
        status = self.herder.status(name)  # ConnectorNotFound: 404
        config = self.herder.info(name)["config"]
        offsets = self.herder.offsets(name)["offsets"]
        f = (self.metrics.figures([name]) if self.metrics is not None else {}).get(name, {})
        source, target, source_kind, target_kind = flow_ends(config)
        records_rate, acked_rate = self.history.recent_rate(name)
        tasks = f.get("tasks", {})
        partitions: dict[str, dict[str, Any]] = {}
        for entry in offsets:
            label = _partition_label(partition_key(entry["partition"]))
            partitions[label] = {"partition": label, "offset": entry["offset"], "records": None, "seconds": None}
        for task, task_figures in tasks.items():
            for label, (records, seconds) in task_figures["partition_lag"].items():
                row = partitions.setdefault(label, {"partition": label, "offset": None})
                row.update(records=records, seconds=round(seconds, 1), task=task)
        checkpoints = {}
        for _task, task_figures in sorted(tasks.items()):
            for key, value in task_figures["reported"].items():
                if key.startswith("checkpoint."):
                    checkpoints[key] = checkpoints.get(key, 0.0) + value
        stale = _stale_links({name: config}, {name: f}) if f else set()
        lag = status["connector"].get("lag")
        return {
            "worker": self._worker_view(), "name": name, "source": source, "target": target,
            "source_kind": source_kind, "target_kind": target_kind, "status": status,
            "health": _health(status["connector"]["state"], status["tasks"], bool(stale),
                              lag["records"] if lag else None, acked_rate),
            "records_per_second": _round(records_rate), "acknowledged_per_second": _round(acked_rate),
            "chart": self.history.chart(name), "heartbeat": self.history.heartbeat_latency(name),
            "replication_latency_max_s": f.get("latency_max"),
            "partitions": sorted(partitions.values(), key=lambda p: p["partition"]),
            "checkpoints": checkpoints,
            "counts": {k: f.get(k, 0.0) for k in ("records", "acknowledged", "committed", "errors", "transient",
                                                   "dead_lettered", "skipped", "dismissed", "customer_handled",
                                                   "filtered")},
            "dead_letter_topic": config.get("errors.deadletterqueue.topic.name") or None,
            "failure_reasons": [{"reason": r, "records": n} for r, n in
                                sorted(f.get("failure_reasons", {}).items(), key=lambda x: -x[1])],
            "last_failure": f.get("last_failure"),
            "config": config,
        }
