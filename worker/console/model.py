"""The operator console's data: a bounded history of every connector, and the views ``/ui`` polls.

The console (``/ui``, static files in ``worker/console/assets``) is a page that polls two JSON
documents, both behind the REST API's authentication:

- ``GET /console/summary``: the worker (id, version, uptime, generation) and every connector as a
  *flow* between two *clusters*, with its state, health, records/s, acknowledged/s and lag - one
  request for all connectors, whatever their number;
- ``GET /console/connectors/{name}``: one flow in full - tasks and their states, records/s and
  acknowledged/s over the last 15 minutes, lag per partition with the committed offsets, heartbeat
  latency p50/p99, checkpoint counters, failures by reason with the last trace, dead-letter counts.

One node per cluster (:mod:`worker.console.clusters`): sides that share an alias, a broker
address, or (Kafka) the cluster id the cluster reports are one cluster, labelled by its alias(es),
else its addresses; a heartbeat side (an emitter's source, a monitor's sink) is the other side's
cluster, drawn as a loop.

A link page tells apart the *record age* (now - record timestamp when put: how old the records
were, backlog and old timestamps included) and the link's *replication latency* (what heartbeats
from the source cluster took to reach a heartbeat monitor in the target cluster; unknown without
one); a PAUSED or STOPPED connector still moving records is *draining* its last epoch; the
actions that apply to the state are listed (:func:`actions`).

Health of a flow, first match wins: ``failing`` (the connector or a task pair FAILED or restarting
after a failure, a pair retrying transient trouble, or an open source gap: records the source
dropped before they were copied, not yet acknowledged), ``paused``, ``stopped``, ``starting``
(UNASSIGNED, RESTARTING), ``stale`` (a heartbeat monitor in its target cluster says the heartbeats
from its source cluster are older than the monitor's ``timeout.ms``), ``lagging`` (what is left to
deliver would take more than :data:`LAGGING_S` seconds at the rate it acknowledges now; with
nothing acknowledged, more than :data:`LAGGING_S` records), else ``running``.

History (:mod:`worker.console.history`): :class:`ConsoleHistory` samples the worker's metrics every :data:`SAMPLE_S` seconds in a
thread of its own and keeps, per connector, the last :data:`WINDOW_S` seconds (at most
:data:`SLOTS` samples of four numbers each, and at most :data:`HEARTBEAT_SAMPLES` heartbeat
latencies for each of at most :data:`HEARTBEAT_ALIASES` origins): memory is bounded per
connector, and a deleted connector's history goes at the next sample. It is in memory only: a
restarted worker starts a new history (the console shows the restart as uptime and generation).

Nothing secret leaves: configs are shown masked (``Herder.masked_config``), traces and reasons were
masked by the executors and are masked again here by the herder's redactor, as ``/metrics`` is.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from connect.records import partition_key
from connect.secrets import MASK
from worker.console.clusters import Clusters, KafkaClusterIds, Side, endpoints, group, sides
from worker.console.history import (
    HEARTBEAT_ALIASES,
    HEARTBEAT_SAMPLES,
    SAMPLE_S,
    SLOTS,
    WINDOW_S,
    ConsoleHistory,
    _percentile,
)
from worker.console.reasons import readable_reason
from worker.herder import ConnectorNotFound
from worker.telemetry.metrics import _partition_label

__all__ = ["ConsoleHistory", "ConsoleViews", "SAMPLE_S", "WINDOW_S", "SLOTS", "LAGGING_S", "LOOKUP_WAIT_S", "flow_ends",
           "actions", "draining", "HEARTBEAT_ALIASES", "HEARTBEAT_SAMPLES", "_percentile"]

LAGGING_S = 30.0
LOOKUP_WAIT_S = 1.5  # how long a document waits for Kafka clusters it has not asked for their id before


def flow_ends(config: dict[str, str]) -> tuple[str, str, str, str]:
    """(source cluster, target cluster, source kind, target kind) of one (masked) connector config
    on its own (the console groups every connector's sides together: :func:`worker.console.clusters.group`)."""
    pair = sides(config)
    source, target = group({"": pair}).ends[""]
    return source, target, pair[0].kind, pair[1].kind


def actions(state: str) -> dict[str, bool]:
    """The actions that apply to a connector in ``state``: pause what runs, resume what is paused
    or stopped, restart what is not stopped, stop what is not stopped."""
    return {"pause": state in ("RUNNING", "UNASSIGNED", "RESTARTING"), "resume": state in ("PAUSED", "STOPPED"),
            "restart": state != "STOPPED", "stop": state != "STOPPED"}


def draining(state: str, records_rate: float | None) -> bool:
    """A PAUSED or STOPPED connector still moving records: its last epoch drains."""
    return state in ("PAUSED", "STOPPED") and bool(records_rate and records_rate > 0)


def _open_gaps(status: dict[str, Any]) -> int:
    return int((status["connector"].get("gaps") or {}).get("open") or 0)


def _health(state: str, tasks: list[dict[str, Any]], stale: bool, lag: float | None,
            acked_rate: float | None, open_gaps: int = 0) -> str:
    if state == "FAILED" or open_gaps or any(t["state"] in ("FAILED", "RESTARTING") or t.get("retrying") for t in tasks):
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


def _stale_links(configs: dict[str, dict[str, str]], figures: dict[str, dict[str, Any]],
                 clusters: Clusters) -> set[tuple[str, str]]:
    """(source cluster, target cluster) pairs whose heartbeats a monitor reports unhealthy: a monitor
    reads the heartbeat topic of its own (source) cluster, and ``heartbeat.<alias>.healthy`` = 0
    there says the link from the cluster ``alias`` names to it is stale."""
    stale = set()
    for name, config in configs.items():
        if config.get("sink.connector.class", "").removesuffix("-sink") != "heartbeat":
            continue
        here = clusters.ends[name][0]
        for task in figures.get(name, {}).get("tasks", {}).values():
            for key, value in task["reported"].items():
                if key.startswith("heartbeat.") and key.endswith(".healthy") and value == 0:
                    alias = key[len("heartbeat."):-len(".healthy")]
                    stale.add((clusters.alias_node(alias) or alias, here))
    return stale


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def _lookup_settings(side: Side, index: int, resolved: tuple[dict, dict] | None, masked: dict[str, str]) -> dict:
    """The client settings of a side's Kafka cluster: its running pipeline's resolved config, else
    (no runtime: never started, stopped) the masked config when nothing in it is masked or a
    provider reference (a checkpoint source's upstream keys are prefixed ``upstream.``)."""
    if resolved is not None:
        settings = dict(resolved[index])
    else:
        prefix = ("source." if index == 0 else "sink.")
        settings = {k[len(prefix):]: v for k, v in masked.items() if k.startswith(prefix)}
        if any(v == MASK or "${" in str(v) for v in settings.values()):
            return {}
    if side.kind == "checkpoint":
        return {k[len("upstream."):]: v for k, v in settings.items() if k.startswith("upstream.")}
    return settings


class ConsoleViews:
    """The two documents the console polls, built from the herder, the metrics and the history."""

    def __init__(self, herder: Any, metrics: Any, history: ConsoleHistory, worker: Callable[[], dict[str, Any]],
                 cluster_ids: KafkaClusterIds | None = None):
        self.herder = herder
        self.metrics = metrics
        self.history = history
        self._worker = worker  # the worker's identity: id, version, started_at, generation, pid
        self.cluster_ids = cluster_ids or KafkaClusterIds()

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

    def clusters(self, configs: dict[str, dict[str, str]]) -> Clusters:
        """Every connector's two clusters, one node per cluster: Kafka clusters asked for their id
        (with the running pipeline's own client settings), waiting at most :data:`LOOKUP_WAIT_S`
        for clusters not asked before."""
        pairs = {name: sides(config) for name, config in configs.items()}
        keys = []
        for name, pair in pairs.items():
            kafka = [(i, s) for i, s in enumerate(pair) if s.broker == "kafka" and s.address and s.own_cluster]
            if not kafka:
                continue
            try:
                resolved = self.herder.side_configs(name) if hasattr(self.herder, "side_configs") else None
            except ConnectorNotFound:
                resolved = None
            for i, s in kafka:
                key = endpoints(s.address)
                settings = _lookup_settings(s, i, resolved, configs[name])
                if key and settings.get("bootstrap.servers"):
                    self.cluster_ids.request(key, settings)
                keys.append(key)
        self.cluster_ids.wait(keys, LOOKUP_WAIT_S)
        return group(pairs, self.cluster_ids.tokens)

    def summary(self) -> dict[str, Any]:
        connectors = self._connectors()
        configs = {n: c for n, (_, c) in connectors.items()}
        figures = self.metrics.figures(connectors) if self.metrics is not None else {}
        clusters = self.clusters(configs)
        stale = _stale_links(configs, figures, clusters)
        flows = []
        for name, (status, _config) in connectors.items():
            source, target = clusters.ends[name]
            tasks = status["tasks"]
            state = status["connector"]["state"]
            records_rate, acked_rate = self.history.recent_rate(name)
            lag = status["connector"].get("lag")
            f = figures.get(name, {})
            flows.append({
                "name": name, "source": source, "target": target, "state": state,
                "health": _health(state, tasks, (source, target) in stale, lag["records"] if lag else None, acked_rate,
                                  _open_gaps(status)),
                "gaps": status["connector"].get("gaps"),
                "draining": draining(state, records_rate),
                "tasks": {"total": len(tasks), "running": sum(t["state"] == "RUNNING" for t in tasks),
                          "failed": sum(t["state"] == "FAILED" for t in tasks)},
                "records_per_second": _round(records_rate), "acknowledged_per_second": _round(acked_rate),
                "lag": lag, "errors": f.get("errors", 0.0), "dead_lettered": f.get("dead_lettered", 0.0),
                "slot_wait_s": status["connector"].get("slot_wait_s")})
        return {"worker": self._worker_view(), "clusters": sorted(clusters.nodes.values(), key=lambda c: c["id"]),
                "flows": flows}

    def _link_latency(self, name: str, source: str, target: str, configs: dict[str, dict[str, str]],
                      clusters: Clusters) -> dict[str, Any] | None:
        """Replication latency of the link source -> target: the heartbeats from ``source`` that a
        heartbeat monitor in ``target`` saw (p50/p99 over the history's window), the monitor with
        the most heartbeats; None without such a monitor."""
        best = None
        for monitor, config in configs.items():
            if config.get("sink.connector.class", "").removesuffix("-sink") != "heartbeat":
                continue
            if clusters.ends[monitor][0] != target:
                continue
            for alias, seen in self.history.heartbeat_latency(monitor).items():
                if (clusters.alias_node(alias) or alias) == source and seen["heartbeats"] and (
                        best is None or seen["heartbeats"] > best["heartbeats"]):
                    best = {**seen, "monitor": monitor, "origin": alias}
        return best

    def detail(self, name: str) -> dict[str, Any]:
        status = self.herder.status(name)  # ConnectorNotFound: 404
        config = self.herder.info(name)["config"]
        offsets = self.herder.offsets(name)["offsets"]
        f = (self.metrics.figures([name]) if self.metrics is not None else {}).get(name, {})
        configs = {n: c for n, (_, c) in self._connectors().items()}
        configs[name] = config
        clusters = self.clusters(configs)
        source, target = clusters.ends[name]
        source_kind, target_kind = (s.kind for s in sides(config))
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
        stale = _stale_links({name: config}, {name: f}, clusters) if f else set()
        lag = status["connector"].get("lag")
        state = status["connector"]["state"]
        return {
            "worker": self._worker_view(), "name": name, "source": source, "target": target,
            "source_kind": source_kind, "target_kind": target_kind, "status": status,
            "health": _health(state, status["tasks"], bool(stale), lag["records"] if lag else None, acked_rate,
                              _open_gaps(status)),
            "draining": draining(state, records_rate), "actions": actions(state),
            "records_per_second": _round(records_rate), "acknowledged_per_second": _round(acked_rate),
            "chart": self.history.chart(name), "heartbeat": self.history.heartbeat_latency(name),
            # now - record timestamp when put: how old the records were, backlog and old timestamps
            # included; the link's replication latency is what its heartbeats took
            "record_age": self.history.record_age(name),
            "replication_latency": self._link_latency(name, source, target, configs, clusters),
            "partitions": sorted(partitions.values(), key=lambda p: p["partition"]),
            "checkpoints": checkpoints,
            "counts": {k: f.get(k, 0.0) for k in ("records", "acknowledged", "committed", "errors", "transient",
                                                   "dead_lettered", "skipped", "dismissed", "customer_handled",
                                                   "filtered")},
            "dead_letter_topic": config.get("errors.deadletterqueue.topic.name") or None,
            "failure_reasons": [{"reason": r, "text": readable_reason(r), "records": n} for r, n in
                                sorted(f.get("failure_reasons", {}).items(), key=lambda x: -x[1])],
            "last_failure": f.get("last_failure"),
            "config": config,
        }
