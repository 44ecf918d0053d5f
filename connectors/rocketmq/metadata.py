"""RocketMQ config sync as metadata change events (RIP-45's RocketMQConfigConnector; the event
format is :mod:`connectors.replicator.metadata`'s).

**Source** (``RocketMQMetadataSourceConnector``, one task): every ``poll.interval.ms`` it reads the
cluster - GET_BROKER_CLUSTER_INFO, then on every master GET_ALL_TOPIC_CONFIG and
GET_ALL_SUBSCRIPTIONGROUP_CONFIG - and emits one event per change (``diff_events``), and every
``snapshot.interval.ms`` every resource again (``Modified``, with the stamp of its last change:
a snapshot lets a new or lagging cluster converge and never overrides a newer change elsewhere).
The first scan of a task emits everything (``Created``).

- ``Topics`` (name = the topic): ``{"broker": "rocketmq", "partitions", "readQueueNums",
  "writeQueueNums", "perm", "order", "topicFilterType", "topicSysFlag"}`` - ``partitions`` is the
  topic's write queues over every broker holding it (its ``writeQueueNums`` on a one-broker
  cluster); the other fields are its ``TopicConfig`` (queue numbers: the largest over its brokers;
  the rest: the first broker's, by name).
- ``SubscriptionGroups`` (name = the group): ``{"broker": "rocketmq", ...}`` plus every field of
  the group's ``SubscriptionGroupConfig`` but ``groupName`` (consumeEnable, consumeFromMinEnable,
  consumeBroadcastEnable, retryQueueNums, retryMaxTimes, brokerId, whichBrokerWhenConsumeSlowly,
  notifyConsumerIdsChangedEnable; 5.x brokers add more, copied as they are).
- Left out: topics not matching ``topics.regex`` and RocketMQ's own (:func:`is_system_topic`),
  groups not matching ``groups.regex`` and RocketMQ's own (``groups.is_system_group``).
- A topic or group is only reported deleted when every broker that held it answered and no longer
  lists it: a broker without a master (restarting, failing over) deletes nothing.
- ACLs are not synced: the plain-ACL listing (GET_BROKER_CLUSTER_ACL_CONFIG) is deprecated and
  answers with every account's secret key, which the events would carry in clear; RocketMQ 5.3's
  ACL 2.0 has other requests, and the embedded broker serves neither.

Source partition ``{"metadata": <cluster.name>}``, offset ``{"ts": <scan time>}``: nothing to
replay, a restarted task emits a full snapshot first.

**Sink** (``RocketMQMetadataSinkConnector``, synchronous) applies ``Topics`` and
``SubscriptionGroups`` events from any broker's metadata source to the brokers of its cluster
(``brokers``, default every master in the cluster info):

- events whose ``sourceCluster`` is ``cluster.name`` are skipped (its own changes, come back);
  an event older than the last one applied to the same resource is skipped (last writer wins,
  ``connectors.replicator.metadata.newer``);
- names: a Pulsar topic ``persistent://tenant/ns/x`` becomes ``x``, then ``topic.template``
  (``{topic}``) applies, then each character RocketMQ refuses in a topic name (anything but
  ``[%|a-zA-Z0-9_-]``, e.g. the dots of Kafka names) becomes ``_``, with a warning
  (:func:`local_topic_name`); group names are mapped the same way, without template;
- ``Topics`` Created/Modified: UPDATE_AND_CREATE_TOPIC on each broker, only where the config
  differs. From a RocketMQ source the queue numbers, perm, order, filter type and sys flag follow
  the source (RIP-45), queue numbers never shrinking; from another broker the topic gets
  ``mapping.target_units`` queues in all, spread evenly over the brokers (never shrinking either),
  perm read+write unless it exists. Deleted: only with ``sync.topic.deletes``
  (DELETE_TOPIC_IN_BROKER on each broker, then DELETE_TOPIC_IN_NAMESRV);
- ``SubscriptionGroups`` Created/Modified: UPDATE_AND_CREATE_SUBSCRIPTIONGROUP on each broker
  where the config differs (a RocketMQ source's fields copied; another broker's groups get
  RocketMQ's defaults). Deleted: only with ``sync.group.deletes`` (DELETE_SUBSCRIPTIONGROUP);
- other resources (Tenants, Namespaces, Acls) and RocketMQ's own topics and groups are ignored;
- a record that is not a valid event is reported (``ConnectError`` naming its position and the
  JSON path at fault); a broker's refusal is reported for that record; a transient failure
  (no answer, SYSTEM_BUSY...) reports it and every later record of the batch with
  ``RetriableError``, so they are applied again, in order.

Gauges (``metrics()``): source ``metadata.topics``, ``metadata.groups``, ``metadata.events``,
``metadata.snapshots``; sink ``metadata.topics.created|updated|deleted``,
``metadata.groups.created|updated|deleted``, ``metadata.events.applied|unchanged|own|stale|
ignored|bad|refused|transient``.
"""

from __future__ import annotations

import collections
import logging
import time
from typing import Any, Mapping, Sequence

import orjson

from connect import patterns
from connect.config import ConfigDef, Importance, Type, at_least, non_empty, valid_regex
from connect.connector import SinkConnector, SourceConnector
from connect.errors import ConfigError, ConfigIssue, ConnectError, RetriableError
from connect.records import ConnectRecord
from connect.sink import SinkTask
from connect.sink.routing import check_template
from connect.source import SourceTask
from connectors.replicator.mapping import target_units
from connectors.replicator.metadata import RESOURCES, MetadataChangeEvent, Stamp, diff_events, newer
from connectors.rocketmq.clients import CLIENT_CONFIG, CLIENTS, client_issues, client_settings
from connectors.rocketmq.groups import is_system_group
from connectors.rocketmq.names import GROUP_MAX_LENGTH, legal_name, local_topic_name
from connectors.rocketmq.system import is_system_topic, reserved_names

__all__ = ["RocketMQMetadataSourceConnector", "RocketMQMetadataSourceTask", "RocketMQMetadataSinkConnector",
           "RocketMQMetadataSinkTask", "is_system_topic", "topic_data", "group_data", "local_topic_name",
           "plan_topic", "spread_queues", "group_config", "DEFAULT_EVENT_TOPIC"]

log = logging.getLogger(__name__)

DEFAULT_EVENT_TOPIC = "rmq_sys_replicator_metadata"  # RocketMQ topic names cannot hold dots
PERM_READ, PERM_WRITE = 4, 2

# SubscriptionGroupConfig's fields and defaults (4.9.x), and the types the sink checks.
GROUP_DEFAULTS = {"consumeEnable": True, "consumeFromMinEnable": True, "consumeBroadcastEnable": True,
                  "retryQueueNums": 1, "retryMaxTimes": 16, "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1,
                  "notifyConsumerIdsChangedEnable": True}


def topic_data(configs: Sequence[Any]) -> dict[str, Any]:
    """A ``Topics`` event's data from the topic's ``TopicConfig`` on each broker holding it (sorted
    by broker name; ``models.TopicConfig`` objects)."""
    first = configs[0]
    return {"broker": "rocketmq", "partitions": sum(c.write_queue_nums for c in configs),
            "readQueueNums": max(c.read_queue_nums for c in configs),
            "writeQueueNums": max(c.write_queue_nums for c in configs), "perm": first.perm, "order": first.order,
            "topicFilterType": first.topic_filter_type, "topicSysFlag": first.topic_sys_flag}


def group_data(config: Mapping[str, Any]) -> dict[str, Any]:
    """A ``SubscriptionGroups`` event's data from the broker's ``SubscriptionGroupConfig`` JSON."""
    return {"broker": "rocketmq", **{k: v for k, v in config.items() if k != "groupName"}}


def _int(data: Mapping[str, Any], key: str, default: int | None = None, low: int = 0) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"$.data.{key}: an integer >= {low} expected, got {value!r}")
    return value


def plan_topic(name: str, data: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, Any]:
    """Broker name -> the ``models.TopicConfig`` to give ``name`` there, for a Created/Modified
    event's ``data``; ``current``: broker name -> its config now (None: it lacks the topic).
    Brokers missing from the answer keep what they have. ValueError names the field at fault."""
    from connectors.rocketmq.models import TopicConfig

    kind = data.get("broker")
    if kind not in ("kafka", "rocketmq", "pulsar"):
        raise ValueError(f"$.data.broker: one of kafka, rocketmq, pulsar expected, got {kind!r}")
    brokers = sorted(current)
    out = {}
    if kind == "rocketmq":  # RIP-45: queue numbers, perm and flags follow the source; queues never shrink
        write = _int(data, "writeQueueNums" if "writeQueueNums" in data else "partitions", low=1)
        read = _int(data, "readQueueNums", write, low=1)
        perm, sys_flag = _int(data, "perm", PERM_READ | PERM_WRITE), _int(data, "topicSysFlag", 0)
        filter_type, order = data.get("topicFilterType") or "SINGLE_TAG", data.get("order", False)
        if not isinstance(filter_type, str) or not isinstance(order, bool):
            raise ValueError("$.data.topicFilterType / $.data.order: a string and a boolean expected")
        for b in brokers:
            cur = current[b]
            out[b] = TopicConfig(name, max(read, cur.read_queue_nums if cur else 0),
                                 max(write, cur.write_queue_nums if cur else 0), perm, filter_type, sys_flag, order)
        return out
    partitions = _int(data, "partitions", low=0 if kind == "pulsar" else 1)
    held = [c for c in current.values() if c is not None]
    wanted = target_units(kind, partitions, "rocketmq", sum(c.write_queue_nums for c in held) if held else None)
    return {} if wanted is None else spread_queues(name, wanted, current)


def spread_queues(name: str, wanted: int, current: Mapping[str, Any]) -> dict[str, Any]:
    """Broker name -> the ``models.TopicConfig`` giving ``name`` ``wanted`` write queues in all,
    spread evenly over the brokers of ``current`` (broker name -> its config now, None: it lacks
    the topic), never shrinking a broker's queues; the other fields of an existing config stay."""
    from connectors.rocketmq.models import TopicConfig

    brokers = sorted(current)
    out = {}
    for i, b in enumerate(brokers):
        share = wanted // len(brokers) + (1 if i < wanted % len(brokers) else 0)
        cur = current[b]
        if cur is None and share == 0:
            continue
        write = max(share, cur.write_queue_nums if cur else 0)
        if cur is None:
            out[b] = TopicConfig(name, write, write, PERM_READ | PERM_WRITE)
        else:
            out[b] = TopicConfig(name, max(write, cur.read_queue_nums), write, cur.perm, cur.topic_filter_type,
                                 cur.topic_sys_flag, cur.order)
    return out


def group_config(name: str, data: Mapping[str, Any]) -> dict[str, Any]:
    """The ``SubscriptionGroupConfig`` JSON to create ``name`` with: RocketMQ's defaults, updated
    with a RocketMQ source's fields. ValueError names a field of the wrong type."""
    config = {"groupName": name, **GROUP_DEFAULTS}
    if data.get("broker", "rocketmq") != "rocketmq":
        return config  # another broker's group: only its name maps
    for key, value in data.items():
        if key in ("broker", "groupName"):
            continue
        default = GROUP_DEFAULTS.get(key)
        if isinstance(default, bool) and not isinstance(value, bool):
            raise ValueError(f"$.data.{key}: a boolean expected, got {value!r}")
        if default is not None and not isinstance(default, bool) and (isinstance(value, bool)
                                                                      or not isinstance(value, int)):
            raise ValueError(f"$.data.{key}: an integer expected, got {value!r}")
        config[key] = value
    return config


def _wrap(what: str, exc: ConnectError) -> ConnectError:
    """``exc`` with ``what`` in front, keeping whether it is retriable."""
    return (RetriableError if isinstance(exc, RetriableError) else ConnectError)(f"{what}: {exc}")


def _client_cfg(defs: ConfigDef, config: Mapping[str, Any], what: str) -> dict[str, Any]:
    cfg = defs.parse(config, source=what)
    issues = client_issues(cfg)
    if issues:
        raise ConfigError(issues, source=what)
    return cfg


# -- source ---------------------------------------------------------------------------------------
SOURCE_CONFIG = CLIENT_CONFIG.merge(
    ConfigDef()
    .define("cluster.name", Type.STRING, doc="Name of this cluster: the sourceCluster of the events it emits.",
            importance=Importance.HIGH, validator=non_empty)
    .define("topics.regex", Type.STRING, ".*", "Topics to watch (full match); RocketMQ's own topics never are.",
            validator=valid_regex)
    .define("groups.regex", Type.STRING, ".*", "Subscription groups to watch (full match); RocketMQ's own never are.",
            validator=valid_regex)
    .define("topic", Type.STRING, DEFAULT_EVENT_TOPIC, "Topic the event records carry.", validator=non_empty)
    .define("poll.interval.ms", Type.INT, 5000, "Time between two reads of the cluster's configs.",
            validator=at_least(10))
    .define("snapshot.interval.ms", Type.INT, 60_000, "Time between two snapshots (every resource emitted again).",
            validator=at_least(100))
)


class RocketMQMetadataSourceTask(SourceTask):
    def start(self, config: Mapping[str, Any], context) -> None:
        cfg = _client_cfg(SOURCE_CONFIG, config, "RocketMQ metadata source")
        self._cluster, self._topic = cfg["cluster.name"], cfg["topic"]
        self._topics, self._groups = patterns.compile(cfg["topics.regex"]), patterns.compile(cfg["groups.regex"])
        self._poll_s, self._snapshot_s = cfg["poll.interval.ms"] / 1000, cfg["snapshot.interval.ms"] / 1000
        self._partition = {"metadata": self._cluster}
        self._namesrv = cfg["namesrv.addr"]
        self._settings = client_settings(cfg)
        self._client = CLIENTS.acquire(self._settings)
        self._held: dict[tuple[str, str], dict] = {}  # (resource, name) -> data, as last emitted
        self._where: dict[tuple[str, str], set[str]] = {}  # (resource, name) -> brokers that held it
        self._stamps: dict[tuple[str, str], Stamp] = {}  # (resource, name) -> stamp of its last change
        self._next_scan = time.monotonic()
        self._next_snapshot = self._next_scan + self._snapshot_s  # the first scan emits everything
        self._emitted = self._snapshots = 0

    def _scan(self) -> tuple[dict[tuple[str, str], dict], dict[tuple[str, str], set[str]], set[str]]:
        """(resource -> data, resource -> brokers holding it, brokers that answered)."""
        from connectors.rocketmq.models import TopicConfig

        try:
            brokers = self._client.cluster_info()
        except ConnectError as exc:
            raise _wrap(f"cannot list the brokers of {self._namesrv}", exc) from exc
        reserved = reserved_names(brokers)
        topics: dict[str, list[TopicConfig]] = {}
        groups: dict[str, dict] = {}
        where: dict[tuple[str, str], set[str]] = collections.defaultdict(set)
        answered = set()
        for name, broker in sorted(brokers.items()):
            addr = broker.master_addr
            if addr is None:
                log.warning("broker %s of %s has no master: its topics and groups are kept as last seen", name,
                            self._namesrv)
                continue
            try:
                configs = self._client.all_topic_configs(addr)
                group_configs = self._client.subscription_group_configs(addr)
            except ConnectError as exc:
                raise _wrap(f"cannot read the configs of broker {name} ({addr})", exc) from exc
            answered.add(name)
            for topic, tc in configs.items():
                if self._topics.fullmatch(topic) and not is_system_topic(topic, reserved):
                    topics.setdefault(topic, []).append(tc)
                    where[("Topics", topic)].add(name)
            for group, gc in group_configs.items():
                if self._groups.fullmatch(group) and not is_system_group(group):
                    groups.setdefault(group, dict(gc))
                    where[("SubscriptionGroups", group)].add(name)
        after = {("Topics", t): topic_data(c) for t, c in topics.items()}
        after.update((("SubscriptionGroups", g), group_data(c)) for g, c in groups.items())
        return after, where, answered

    def poll(self) -> Sequence[ConnectRecord]:
        now_m = time.monotonic()
        if now_m < self._next_scan:
            time.sleep(max(min(self._next_scan - now_m, 0.1, self.context.time_left()), 0))
            return []
        self._next_scan = now_m + self._poll_s
        after, where, answered = self._scan()
        for key in self._held.keys() - after.keys():  # gone only if every broker that held it answered
            if not self._where.get(key, set()) <= answered:
                after[key], where[key] = self._held[key], self._where[key]
        now = int(time.time() * 1000)
        events = diff_events(self._held, after, self._cluster, now)
        for e in events:
            key = (e.resource, e.resource_name)
            if e.type == "Deleted":
                self._stamps.pop(key, None)
            else:
                self._stamps[key] = e.stamp
        if now_m >= self._next_snapshot:
            self._next_snapshot = now_m + self._snapshot_s
            self._snapshots += 1
            changed = {(e.resource, e.resource_name) for e in events}
            for key, data in after.items():
                if key not in changed:
                    when, by = self._stamps.setdefault(key, (now, self._cluster))
                    events.append(MetadataChangeEvent("Modified", key[0], key[1], dict(data), by, when))
        self._held, self._where = after, dict(where)
        events.sort(key=lambda e: (e.type == "Deleted", RESOURCES.index(e.resource), e.resource_name))
        self._emitted += len(events)
        offset = {"ts": now}
        return [e.to_record(self._topic, self._partition, offset) for e in events]

    def metrics(self) -> Mapping[str, float]:
        return {"metadata.topics": float(sum(1 for r, _n in self._held if r == "Topics")),
                "metadata.groups": float(sum(1 for r, _n in self._held if r == "SubscriptionGroups")),
                "metadata.events": float(self._emitted), "metadata.snapshots": float(self._snapshots)}

    def stop(self) -> None:
        if getattr(self, "_client", None) is not None:
            CLIENTS.release(self._settings)
            self._client = None


class RocketMQMetadataSourceConnector(SourceConnector):
    @classmethod
    def config_def(cls) -> ConfigDef:
        return SOURCE_CONFIG

    @classmethod
    def validate(cls, config: Mapping[str, Any]) -> list[ConfigIssue]:
        return super().validate(config) + client_issues(config)

    @classmethod
    def task_class(cls) -> type:
        return RocketMQMetadataSourceTask

    def task_configs(self, max_tasks: int) -> list[dict[str, Any]]:
        return [dict(self.config)]  # one watcher per cluster

    def source_topics(self) -> Mapping[str, int]:
        return {SOURCE_CONFIG.parse(self.config)["topic"]: 1}  # one queue: events stay in order


# -- sink -----------------------------------------------------------------------------------------
SINK_CONFIG = CLIENT_CONFIG.merge(
    ConfigDef()
    .define("cluster.name", Type.STRING, doc="Name of this cluster: events it emitted itself are skipped.",
            importance=Importance.HIGH, validator=non_empty)
    .define("topic.template", Type.STRING, "{topic}", "Local topic name built from the event's (its last path "
            "segment for a Pulsar topic), e.g. 'backup_{topic}'; characters RocketMQ refuses become '_'.",
            validator=check_template)
    .define("brokers", Type.LIST, "", "Brokers (names) to create topics and groups on; empty: every master.")
    .define("sync.topic.deletes", Type.BOOLEAN, False, "Delete topics whose deletion an event reports.")
    .define("sync.group.deletes", Type.BOOLEAN, False, "Delete subscription groups whose deletion an event reports.")
)


class _Bad(ValueError):
    """The event cannot be applied as it is (a permanent failure of its record)."""


class _Target:
    """The target brokers and their topic and group configs, read once per ``put`` (lazily) and
    kept up to date with what the sink writes."""

    def __init__(self, client, wanted: Sequence[str], namesrv: str) -> None:
        self.client, self.wanted, self.namesrv = client, list(wanted), namesrv
        self._brokers: dict[str, str] | None = None
        self.topics: dict[str, dict] = {}
        self.groups: dict[str, dict] = {}

    def brokers(self) -> dict[str, str]:
        """Broker name -> master address."""
        if self._brokers is None:
            info = self.client.cluster_info()
            masters = {name: b.master_addr for name, b in info.items() if b.master_addr}
            if self.wanted:
                missing = [b for b in self.wanted if b not in masters]
                if missing:
                    raise RetriableError(f"broker(s) {', '.join(missing)} of {self.namesrv} have no master now")
                masters = {b: masters[b] for b in self.wanted}
            if not masters:
                raise RetriableError(f"no broker of {self.namesrv} has a master")
            self._brokers = dict(sorted(masters.items()))
        return self._brokers

    def topic_configs(self, broker: str) -> dict:
        if broker not in self.topics:
            self.topics[broker] = dict(self.client.all_topic_configs(self.brokers()[broker]))
        return self.topics[broker]

    def group_configs(self, broker: str) -> dict:
        if broker not in self.groups:
            self.groups[broker] = self.client.subscription_group_configs(self.brokers()[broker])
        return self.groups[broker]


class RocketMQMetadataSinkTask(SinkTask):
    def start(self, config: Mapping[str, Any], context) -> None:
        cfg = _client_cfg(SINK_CONFIG, config, "RocketMQ metadata sink")
        self._cluster, self._template, self._brokers = cfg["cluster.name"], cfg["topic.template"], cfg["brokers"]
        self._topic_deletes, self._group_deletes = cfg["sync.topic.deletes"], cfg["sync.group.deletes"]
        self._namesrv = cfg["namesrv.addr"]
        self._settings = client_settings(cfg)
        self._client = CLIENTS.acquire(self._settings)
        self._stamps: dict[str, Stamp] = {}  # event key -> stamp of the last event applied
        self._renamed: set[str] = set()
        self._counts: collections.Counter = collections.Counter()

    # -- names ------------------------------------------------------------------------------------
    def _name(self, event: MetadataChangeEvent) -> str:
        try:
            if event.resource == "Topics":
                name, changed = local_topic_name(event.resource_name, self._template)
            else:
                name, changed = legal_name(event.resource_name, "group", GROUP_MAX_LENGTH)
        except ValueError as exc:
            raise _Bad(f"$.resourceName: {exc}") from None
        if changed and event.key not in self._renamed:
            self._renamed.add(event.key)
            log.warning("%s %r holds characters RocketMQ refuses: applied as %r", event.resource, event.resource_name,
                        name)
        return name

    # -- applying ---------------------------------------------------------------------------------
    def put(self, records: Sequence[ConnectRecord]) -> None:
        target = _Target(self._client, self._brokers, self._namesrv)
        report = self.context.errant_record_reporter.report
        for i, r in enumerate(records):
            if self.context.time_left() <= 0:
                self._transient(records[i:], RetriableError("the epoch deadline came before these events were applied"))
                return
            try:
                event = _event(r.value)
            except ValueError as exc:
                self._counts["bad"] += 1
                report(r, ConnectError(f"record {r.position()}: not a metadata change event: {exc}"))
                continue
            if event.source_cluster == self._cluster:
                self._counts["own"] += 1
                continue
            held = self._stamps.get(event.key)
            if held is not None and held != event.stamp and not newer(event.stamp, held):
                self._counts["stale"] += 1
                continue
            try:
                outcome = self._apply(event, target)
            except _Bad as exc:
                self._counts["bad"] += 1
                report(r, ConnectError(f"record {r.position()}: {event.resource} {event.resource_name!r}: {exc}"))
                continue
            except RetriableError as exc:
                self._transient(records[i:], RetriableError(f"{event.resource} {event.resource_name!r} not applied "
                                                            f"to {self._namesrv}: {exc}"))
                return
            except ConnectError as exc:
                self._counts["refused"] += 1
                report(r, ConnectError(f"record {r.position()}: {event.resource} {event.resource_name!r} refused by "
                                       f"{self._namesrv}: {exc}"))
                continue
            self._counts[outcome] += 1
            self._stamps[event.key] = event.stamp

    def _transient(self, records: Sequence[ConnectRecord], error: RetriableError) -> None:
        self._counts["transient"] += len(records)
        for r in records:
            self.context.errant_record_reporter.report(r, error)

    def _apply(self, event: MetadataChangeEvent, target: _Target) -> str:
        """Applies one event; returns what it did (applied, unchanged or ignored)."""
        if event.resource not in ("Topics", "SubscriptionGroups"):
            return "ignored"
        name = self._name(event)
        if event.resource == "Topics":
            return "ignored" if is_system_topic(name) else self._apply_topic(event, name, target)
        return "ignored" if is_system_group(name) else self._apply_group(event, name, target)

    def _apply_topic(self, event: MetadataChangeEvent, name: str, target: _Target) -> str:
        brokers = target.brokers()
        current = {b: target.topic_configs(b).get(name) for b in brokers}
        if event.type == "Deleted":
            holders = [b for b, c in current.items() if c is not None]
            if not self._topic_deletes or not holders:
                return "ignored"
            for b in holders:
                self._client.delete_topic_in_broker(brokers[b], name)
                del target.topics[b][name]
            self._client.delete_topic_in_namesrv(name)
            self._counts["topics.deleted"] += 1
            log.info("topic %s deleted (%s deleted it)", name, event.source_cluster)
            return "applied"
        try:
            plan = plan_topic(name, event.data or {}, current)
        except ValueError as exc:
            raise _Bad(str(exc)) from None
        wrote = False
        for b, tc in plan.items():
            if tc == current[b]:
                continue
            self._client.create_topic(brokers[b], name, tc.read_queue_nums, tc.write_queue_nums, tc.perm,
                                      topic_filter_type=tc.topic_filter_type, topic_sys_flag=tc.topic_sys_flag,
                                      order=tc.order)
            target.topics[b][name] = tc
            self._counts["topics.created" if current[b] is None else "topics.updated"] += 1
            log.info("topic %s on %s: %d read / %d write queues, perm %d (from %s)", name, b, tc.read_queue_nums,
                     tc.write_queue_nums, tc.perm, event.source_cluster)
            wrote = True
        return "applied" if wrote else "unchanged"

    def _apply_group(self, event: MetadataChangeEvent, name: str, target: _Target) -> str:
        brokers = target.brokers()
        current = {b: target.group_configs(b).get(name) for b in brokers}
        if event.type == "Deleted":
            holders = [b for b, c in current.items() if c is not None]
            if not self._group_deletes or not holders:
                return "ignored"
            for b in holders:
                self._client.delete_subscription_group(brokers[b], name)
                del target.groups[b][name]
            self._counts["groups.deleted"] += 1
            return "applied"
        try:
            wanted = group_config(name, event.data or {})
        except ValueError as exc:
            raise _Bad(str(exc)) from None
        wrote = False
        for b, cur in current.items():
            if cur is not None and all(cur.get(k) == v for k, v in wanted.items()):
                continue
            self._client.create_subscription_group(brokers[b], wanted)
            target.groups[b][name] = {**(cur or {}), **wanted}
            self._counts["groups.created" if cur is None else "groups.updated"] += 1
            wrote = True
        return "applied" if wrote else "unchanged"

    def flush(self, offsets) -> None:
        return None  # every event is applied (or reported) in put

    def metrics(self) -> Mapping[str, float]:
        out = {f"metadata.{k}": float(self._counts[k]) for k in
               ("topics.created", "topics.updated", "topics.deleted", "groups.created", "groups.updated",
                "groups.deleted")}
        out.update((f"metadata.events.{k}", float(self._counts[k])) for k in
                   ("applied", "unchanged", "own", "stale", "ignored", "bad", "refused", "transient"))
        return out

    def stop(self) -> None:
        if getattr(self, "_client", None) is not None:
            CLIENTS.release(self._settings)
            self._client = None


def _event(value: Any) -> MetadataChangeEvent:
    """The event a record's value holds: JSON bytes or text, or the object a JSON converter made."""
    if isinstance(value, (dict, list)):
        value = orjson.dumps(value)
    elif isinstance(value, (bytearray, memoryview)):
        value = bytes(value)
    elif value is not None and not isinstance(value, (bytes, str)):
        raise ValueError(f"$: JSON bytes expected, got a {type(value).__name__}")
    return MetadataChangeEvent.from_json(value)


class RocketMQMetadataSinkConnector(SinkConnector):
    @classmethod
    def config_def(cls) -> ConfigDef:
        return SINK_CONFIG

    @classmethod
    def validate(cls, config: Mapping[str, Any]) -> list[ConfigIssue]:
        return super().validate(config) + client_issues(config)

    @classmethod
    def task_class(cls) -> type:
        return RocketMQMetadataSinkTask
