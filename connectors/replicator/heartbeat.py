"""Heartbeats: is a replication link alive, and how far behind is it? (RIP-45's
RocketMQHeartbeatConnector, MirrorMaker 2's MirrorHeartbeatConnector.)

Three pieces, each an ordinary pipeline, so they work for any pair of brokers:

1. ``heartbeat`` source (in the *source* cluster's pipeline): every ``interval.ms`` it emits one
   record ``{"alias": <alias>, "ts": <ms>, "seq": <n>}`` (key = the alias, timestamp = ts); its sink
   is the source cluster's own connector, writing the heartbeat topic there
   (``rmq_sys_replicator_heartbeat`` in RIP-45, ``heartbeats`` in MM2).
2. The replication flow (a mirror) carries the heartbeat topic like any other topic: a heartbeat
   reaching the target went the same way and waited in the same queues as the data.
3. ``heartbeat`` sink (the *monitor*, in the target cluster's pipeline reading the heartbeat
   topic there): per origin alias it keeps the last heartbeat and reports, as the task's own
   gauges (``connect_task_metric`` and the task's REST status):

   - ``heartbeat.<alias>.latency_ms``: arrival at the monitor - emission (the link's replication
     latency; clocks of the two hosts);
   - ``heartbeat.<alias>.age_ms``: now - emission of the newest heartbeat seen (grows while the link
     is paused or broken);
   - ``heartbeat.<alias>.open_gaps``: open source gaps of the flows the newest heartbeat went
     through (records those flows' sources dropped before they were copied, not acknowledged yet:
     ``connect.source.gaps``; a replication flow marks what it copies while it has any,
     ``GAPS_HEADER``);
   - ``heartbeat.<alias>.healthy``: 1 while ``age_ms`` < ``timeout.ms`` and ``open_gaps`` is 0, else 0;
   - ``heartbeat.<alias>.hops``: copies the last heartbeat went through (its origin chain's length);
   - ``heartbeat.<alias>.count``: heartbeats seen by this task.

Round trip: an emitter given ``inbound.type`` (and the ``inbound.*`` client keys of its own
cluster) also reads the heartbeat topic of its own cluster, where the other clusters' heartbeats
arrive, and puts the latency it sees from each of them into its own beats
(``"inbound": {<alias>: <ms>}``). A monitor told its own cluster's ``alias`` then reports
``heartbeat.<alias>.round_trip_ms``: the latency of the other cluster's beats to here plus the
latency of this cluster's beats to there, as that cluster measured it - both directions of an
active-active link, with each leg timed against one host's clock on each side.

Offsets: the source's position is the last emission time (nothing to replay: a restart emits
afresh); the monitor is a synchronous sink that keeps nothing, so its source's offsets advance.
"""

from __future__ import annotations

import time
from typing import Any, Mapping, Sequence

import orjson

from connect.config import ConfigDef, Importance, Type, at_least, non_empty, one_of
from connect.connector import SinkConnector, SourceConnector
from connect.records import ConnectRecord, make_record
from connect.sink import SinkTask
from connect.source import SourceTask
from connect.tasks.origin import DEFAULT_ORIGIN_PROPERTY, chain_of
from connect.tasks.replication import open_gaps_of
from connectors.replicator.groups import GROUP_BACKENDS
from connectors.replicator.tail import TopicTail, side_keys

__all__ = ["HeartbeatSourceConnector", "HeartbeatSourceTask", "HeartbeatSinkConnector", "HeartbeatSinkTask"]

SOURCE_CONFIG = (
    ConfigDef()
    .define("alias", Type.STRING, doc="Alias of the cluster the heartbeats are emitted into (born in).",
            importance=Importance.HIGH, validator=non_empty)
    .define("topic", Type.STRING, "heartbeats", "Topic the heartbeat records carry (the sink may rename it).",
            validator=non_empty)
    .define("interval.ms", Type.INT, 1000, "Time between heartbeats.", validator=at_least(10))
    .define("inbound.type", Type.STRING, "", "To report round trips: the broker of this cluster (kafka, pulsar or "
            "rocketmq), whose heartbeat topic is read for the other clusters' latency to here; empty: not read.",
            validator=one_of("", *GROUP_BACKENDS))
    .define("inbound.topic", Type.STRING, "", "Heartbeat topic of this cluster (default: topic).")
    .define_prefix("inbound.", "Client keys of this cluster (bootstrap.servers, service.url or namesrv.addr...).")
)

SINK_CONFIG = (
    ConfigDef()
    .define("timeout.ms", Type.INT, 5000, "A link is unhealthy once its newest heartbeat is older than this.",
            validator=at_least(1))
    .define("origin.property", Type.STRING, DEFAULT_ORIGIN_PROPERTY, "Header holding the origin chain.",
            validator=non_empty)
    .define("alias", Type.STRING, "", "Alias of the cluster this monitor runs in: with it, round trips are reported "
            "for the clusters whose emitters read their inbound heartbeats.")
)


class HeartbeatSourceTask(SourceTask):
    def start(self, config: Mapping[str, Any], context) -> None:
        cfg = SOURCE_CONFIG.parse(config)
        self.alias = cfg["alias"]
        self.topic = cfg["topic"]
        self.interval = cfg["interval.ms"] / 1000
        self.partition = {"heartbeat": self.alias}
        self.seq = 0
        self.next_at = time.monotonic()
        self.inbound: dict[str, float] = {}  # origin alias -> latency of its newest heartbeat to here
        self._newest: dict[str, float] = {}
        self.tail = None
        if cfg["inbound.type"]:
            client = side_keys(config, "inbound.", "type", "topic")
            self.tail = TopicTail(cfg["inbound.type"], client, cfg["inbound.topic"] or self.topic,
                                  f"{context.task_id}-inbound", start="latest")

    def _read_inbound(self) -> None:
        arrived = time.time() * 1000
        for r in self.tail.poll(time.monotonic() + min(0.05, self.context.time_left())):
            beat = _beat(r.value)
            if beat is None or beat[0] == self.alias or beat[1] <= self._newest.get(beat[0], 0.0):
                continue
            self._newest[beat[0]] = beat[1]
            self.inbound[beat[0]] = max(arrived - beat[1], 0.0)
        # A link that stopped delivering has no current latency to echo (the monitor there then
        # stops reporting a round trip instead of repeating an old one).
        stale = arrived - max(10 * self.interval * 1000, 30_000)
        for alias in [a for a, ts in self._newest.items() if ts < stale]:
            self.inbound.pop(alias, None)

    def poll(self) -> Sequence[ConnectRecord]:
        if self.tail is not None:
            self._read_inbound()
        wait = self.next_at - time.monotonic()
        if wait > 0:
            time.sleep(min(wait, 0.1, self.context.time_left()))
            return []
        self.next_at = max(self.next_at + self.interval, time.monotonic())
        now = int(time.time() * 1000)
        self.seq += 1
        beat: dict[str, Any] = {"alias": self.alias, "ts": now, "seq": self.seq}
        if self.inbound:
            beat["inbound"] = dict(self.inbound)
        value = orjson.dumps(beat)
        return [make_record(self.topic, self.alias.encode(), value, None, now, self.partition, {"ts": now}, 0)]

    def stop(self) -> None:
        if self.tail is not None:
            self.tail.close()


def _beat(value) -> tuple[str, float, dict] | None:
    """(alias, emission time, inbound latencies) of a heartbeat record; None if it is none."""
    try:
        beat = orjson.loads(value)
        inbound = beat.get("inbound") or {}
        return str(beat["alias"]), float(beat["ts"]), inbound if isinstance(inbound, dict) else {}
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
        return None


class HeartbeatSourceConnector(SourceConnector):
    @classmethod
    def config_def(cls) -> ConfigDef:
        return SOURCE_CONFIG

    @classmethod
    def task_class(cls) -> type:
        return HeartbeatSourceTask

    @classmethod
    def named_topics(cls, config: Mapping[str, Any]) -> list[str] | None:
        return None if SOURCE_CONFIG.validate(config) else [SOURCE_CONFIG.parse(config)["topic"]]

    def task_configs(self, max_tasks: int) -> list[dict[str, Any]]:
        return [dict(self.config)]  # one emitter per cluster

    def source_topics(self) -> Mapping[str, int]:
        return {SOURCE_CONFIG.parse(self.config)["topic"]: 1}


class HeartbeatSinkTask(SinkTask):
    def start(self, config: Mapping[str, Any], context) -> None:
        cfg = SINK_CONFIG.parse(config)
        self.timeout_ms = cfg["timeout.ms"]
        self.prop = cfg["origin.property"]
        self.alias = cfg["alias"]
        self.links: dict[str, dict[str, float]] = {}

    def put(self, records: Sequence[ConnectRecord]) -> None:
        arrived = time.time() * 1000
        for r in records:
            beat = _beat(r.value)
            if beat is None:
                continue  # not a heartbeat (another writer shares the topic): nothing to measure
            alias, ts, inbound = beat
            link = self.links.setdefault(alias, {"ts": 0.0, "latency_ms": 0.0, "count": 0, "hops": 0, "gaps": 0})
            link["count"] += 1
            if ts > link["ts"]:  # a copy of a heartbeat seen already (a slower path) measures nothing new
                link["ts"] = ts
                link["latency_ms"] = max(arrived - ts, 0.0)
                link["hops"] = len(chain_of(r.headers, self.prop))
                link["gaps"] = open_gaps_of(r.headers)
                back = inbound.get(self.alias) if self.alias else None
                if isinstance(back, (int, float)):
                    link["round_trip_ms"] = link["latency_ms"] + float(back)
                else:  # the other side no longer hears from here: no round trip to report
                    link.pop("round_trip_ms", None)

    def flush(self, offsets) -> None:
        return None

    def metrics(self) -> Mapping[str, float]:
        now = time.time() * 1000
        out: dict[str, float] = {}
        for alias, link in self.links.items():
            age = max(now - link["ts"], 0.0)
            out[f"heartbeat.{alias}.latency_ms"] = link["latency_ms"]
            out[f"heartbeat.{alias}.age_ms"] = age
            out[f"heartbeat.{alias}.open_gaps"] = float(link["gaps"])
            out[f"heartbeat.{alias}.healthy"] = 1.0 if age < self.timeout_ms and not link["gaps"] else 0.0
            out[f"heartbeat.{alias}.hops"] = float(link["hops"])
            out[f"heartbeat.{alias}.count"] = float(link["count"])
            if "round_trip_ms" in link:
                out[f"heartbeat.{alias}.round_trip_ms"] = link["round_trip_ms"]
        return out


class HeartbeatSinkConnector(SinkConnector):
    @classmethod
    def config_def(cls) -> ConfigDef:
        return SINK_CONFIG

    @classmethod
    def task_class(cls) -> type:
        return HeartbeatSinkTask
