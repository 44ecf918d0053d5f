"""Kafka config connector: MirrorMaker 2's topic, config and ACL sync as metadata change events.

``kafka-metadata`` *source* (:class:`KafkaMetadataSourceConnector`): every ``poll.interval.ms`` one
task describes the cluster - topics named in ``topics``, or matched by ``topics.regex`` less
``topics.exclude``, their partition counts and configs, and (``sync.acls.enabled``) the literal
and prefixed TOPIC ACLs of those topics - and emits a :class:`~connectors.replicator.metadata.MetadataChangeEvent`
per change (``diff_events``); every ``snapshot.interval.ms``, and at start, it emits every resource
(PIP-136's snapshot sync). Events are records of the topic ``topic`` (key ``<resource>/<name>``,
value the event JSON), source partition ``{"metadata": <cluster.name>}``, offset ``{"ts": <ms>}``;
a restart begins with a snapshot, so nothing is replayed from offsets.

- ``Topics/<topic>``: ``{"broker": "kafka", "partitions": N, "configs": {name: value}}``. Configs are
  MM2's ``targetConfig`` selection: not read-only, not sensitive, not static broker configs, not
  matched by ``configs.exclude`` (MM2's DefaultConfigPropertyFilter list by default), and not
  defaults (``use.defaults.from=target``, MM2's default; ``source`` copies the source's defaults too).
- ``Acls/<topic>/<digest>``: ``{"broker": "kafka", "topic", "principal", "host", "operation",
  "permission", "patternType"}`` - every literal TOPIC binding of a watched topic and every prefixed
  one whose prefix is watched or starts a watched topic, DENY included; which of them a cluster
  takes is the sink's decision.

``kafka-metadata`` *sink* (:class:`KafkaMetadataSinkConnector`, synchronous) applies events to its
cluster; events of its own ``cluster.name`` are skipped (the echo of its own changes), and an event
older than the last one applied for the same resource changes nothing (PIP-136's last writer wins;
stamps are held in memory, Kafka topics cannot store them).

- Topics Created/Modified: the topic (named by ``topic.template`` from the source name; a Pulsar name
  ``persistent://t/ns/x`` gives ``x``) is created with the mapped partition count
  (``connectors.replicator.mapping.target_units``) or grown to it, never shrunk. Configs are copied
  only from Kafka sources (created with the topic, then kept equal with IncrementalAlterConfigs:
  values set, target overrides the source no longer has deleted - MM2's incremental mode);
  ``configs.exclude`` names are never set nor deleted. Other brokers' configs do not map (logged once).
- Topics Deleted: ignored, as MM2 never deletes; ``sync.topic.deletes=true`` deletes the target.
- Acls (MM2's rules, prefixed bindings too): literal and prefixed TOPIC bindings (a prefix is named
  by ``topic.template`` as a topic is, so only a template ending in ``{topic}`` can name one; else
  the binding is skipped); ALLOW WRITE is not copied (only the replicator
  writes to replicated topics), ALLOW ALL becomes READ, everything else - DENY bindings included -
  is copied as it is. ACLs are never deleted (MM2 neither).
- Tenants, Namespaces and SubscriptionGroups have no Kafka counterpart here (groups are the
  checkpoint connector's): counted as ignored.

A record that is not a valid event, or that the cluster refuses, is reported with a
:class:`~connect.errors.ConnectError` naming its position and JSON path; an unreachable or busy
cluster with a :class:`~connect.errors.RetriableError` (the event, and those after it, are re-sent
in order). ``metrics()`` counts both sides' work (``metadata.source.*``, ``metadata.sink.*``).
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import logging
import re
import time
from typing import Any, Mapping, NamedTuple, Sequence

import orjson
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from connect import patterns
from connect.config import ConfigDef, Importance, Type, at_least, non_empty, one_of, valid_regex
from connect.connector import SinkConnector, SourceConnector
from connect.errors import ConfigError, ConfigIssue, ConnectError, RetriableError
from connect.records import ConnectRecord
from connect.sink import SinkTask
from connect.sink.routing import check_template, render_template
from connect.source import SourceTask
from connect.source.partitioned import topic_selection_issues
from connectors.kafka.clients import POOL, client_config
from connectors.replicator.mapping import target_units
from connectors.replicator.metadata import MetadataChangeEvent, diff_events, newer

__all__ = ["KafkaMetadataSourceConnector", "KafkaMetadataSourceTask", "KafkaMetadataSinkConnector",
           "KafkaMetadataSinkTask", "DEFAULT_CONFIGS_EXCLUDE", "topic_configs", "acl_data", "acl_id", "target_acl",
           "config_ops", "local_topic_name"]

log = logging.getLogger(__name__)

# MirrorMaker 2's DefaultConfigPropertyFilter (config.properties.exclude), as one regex.
DEFAULT_CONFIGS_EXCLUDE = ("follower\\.replication\\.throttled\\.replicas|leader\\.replication\\.throttled\\.replicas|"
                           "message\\.timestamp\\.difference\\.max\\.ms|message\\.timestamp\\.type|"
                           "unclean\\.leader\\.election\\.enable|min\\.insync\\.replicas")
BROKERS = ("kafka", "rocketmq", "pulsar")
_LEGAL_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
_TRANSIENT = {KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError.REQUEST_TIMED_OUT, KafkaError._ALL_BROKERS_DOWN,
              KafkaError.NOT_CONTROLLER, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.BROKER_NOT_AVAILABLE,
              KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.NETWORK_EXCEPTION, KafkaError.THROTTLING_QUOTA_EXCEEDED}
# DescribeAcls answers meaning "this cluster has no ACLs to tell": ACL sync skipped, nothing deleted.
_NO_ACLS = {KafkaError.SECURITY_DISABLED, KafkaError._UNSUPPORTED_FEATURE, KafkaError.UNSUPPORTED_VERSION,
            KafkaError.CLUSTER_AUTHORIZATION_FAILED}

_CLIENT_PREFIXES = (("client.override.", "librdkafka settings for every client of the connector (e.g. security)."),
                    ("admin.override.", "librdkafka settings for the admin client (all this connector uses)."))


def _common() -> ConfigDef:
    cfg = (
        ConfigDef()
        .define("bootstrap.servers", Type.STRING, doc="Cluster bootstrap servers, host:port[,host:port].",
                importance=Importance.HIGH, validator=non_empty)
        .define("cluster.name", Type.STRING, doc="Name of this cluster in metadata events (their sourceCluster).",
                importance=Importance.HIGH, validator=non_empty)
        .define("configs.exclude", Type.STRING, DEFAULT_CONFIGS_EXCLUDE,
                "Regex of topic config names never copied (full match); default MM2's DefaultConfigPropertyFilter.",
                validator=valid_regex)
        .define("request.timeout.ms", Type.INT, 10_000, "Longest single admin request.", validator=at_least(100))
    )
    for prefix, doc in _CLIENT_PREFIXES:
        cfg.define_prefix(prefix, doc)
    return cfg


SOURCE_CONFIG = _common().merge(
    ConfigDef()
    .define("topics", Type.LIST, [], "Topics to watch (comma-separated); or use topics.regex.", importance=Importance.HIGH)
    .define("topics.regex", Type.STRING, "", "Regex of topics to watch (full match).", validator=valid_regex)
    .define("topics.exclude", Type.STRING, r"__.*|.*\.internal", "Regex of topics topics.regex never picks (full "
            "match); a topic named in topics is watched as named.", validator=valid_regex)
    .define("use.defaults.from", Type.STRING, "target",
            "Configs at their default value: target (not copied, MM2's default) or source (copied too).",
            validator=one_of("target", "source"))
    .define("sync.acls.enabled", Type.BOOLEAN, True, "Emit the literal TOPIC ACLs of the watched topics.")
    .define("topic", Type.STRING, "metadata-events", "Topic the event records carry (the sink may rename it).",
            validator=non_empty)
    .define("poll.interval.ms", Type.INT, 5_000, "Time between two looks at the cluster.", validator=at_least(10))
    .define("snapshot.interval.ms", Type.INT, 60_000,
            "Time between full snapshots (every resource emitted); 0: only the one at start.", validator=at_least(0))
)

SINK_CONFIG = _common().merge(
    ConfigDef()
    .define("topic.template", Type.STRING, "{topic}", "Target topic name from the source topic's name, e.g. "
            "'backup.{topic}' (a Pulsar name persistent://t/ns/x gives x).", validator=check_template)
    .define("replication.factor", Type.INT, -1, "Replication factor of created topics; -1: broker default.")
    .define("sync.topic.deletes", Type.BOOLEAN, False,
            "Delete the target topic when the source topic is deleted (MM2 never does: default false).")
)


# -- pure rules (unit-tested) --------------------------------------------------------------------------------------


def _source(entry: ConfigEntry) -> ConfigSource | None:
    """The entry's config source as the enum: a described entry holds the wire's int (confluent-kafka
    does not convert it), an entry built in code may hold the enum."""
    try:
        return ConfigSource(entry.source)
    except ValueError:
        return None


def topic_configs(entries: Mapping[str, ConfigEntry] | Sequence[ConfigEntry], exclude: str,
                  source_defaults: bool = False) -> dict[str, str]:
    """The configs of a described topic that are copied (MM2's ``targetConfig``): not read-only, not
    sensitive, not static broker configs, not matched by ``exclude``, and not defaults unless
    ``source_defaults`` (``use.defaults.from=source``)."""
    out = {}
    for e in (entries.values() if isinstance(entries, Mapping) else entries):
        if e.is_read_only or e.is_sensitive or e.value is None or _source(e) == ConfigSource.STATIC_BROKER_CONFIG:
            continue
        if (e.is_default or _source(e) == ConfigSource.DEFAULT_CONFIG) and not source_defaults:
            continue
        if exclude and patterns.fullmatch(exclude, e.name):
            continue
        out[e.name] = e.value
    return dict(sorted(out.items()))


def config_ops(wanted: Mapping[str, str], current: Mapping[str, ConfigEntry], exclude: str) -> dict[str, str | None]:
    """Incremental changes making the target's topic configs ``wanted``: name -> value to SET, or
    None to DELETE (a target override, ``DYNAMIC_TOPIC_CONFIG``, the source no longer has). Names
    matched by ``exclude`` are never touched."""
    def excluded(name: str) -> bool:
        return bool(exclude) and patterns.fullmatch(exclude, name)

    ops: dict[str, str | None] = {}
    for name, value in sorted(wanted.items()):
        held = current.get(name)
        if not excluded(name) and (held is None or held.value != value):
            ops[name] = value
    for name, held in sorted(current.items()):
        if name not in wanted and _source(held) == ConfigSource.DYNAMIC_TOPIC_CONFIG and not excluded(name):
            ops[name] = None
    return ops


def acl_data(binding: AclBinding) -> dict[str, Any]:
    """An ACL binding as an event's data."""
    return {"broker": "kafka", "topic": binding.name, "principal": binding.principal, "host": binding.host,
            "operation": binding.operation.name, "permission": binding.permission_type.name,
            "patternType": binding.resource_pattern_type.name}


def acl_id(data: Mapping[str, Any]) -> str:
    """A stable resource name for an ACL binding: ``<topic>/<digest of principal, host, operation, permission
    and, unless LITERAL, pattern type>`` (a literal and a prefixed binding of one name are two)."""
    fields = [data["principal"], data["host"], data["operation"], data["permission"]]
    pattern = str(data.get("patternType", "LITERAL")).upper()
    digest = hashlib.sha256(orjson.dumps(fields if pattern == "LITERAL" else [*fields, pattern]))
    return f"{data['topic']}/{digest.hexdigest()[:16]}"


class AclDecision(NamedTuple):
    operation: str | None  # the operation to grant in the target; None: not copied
    reason: str  # why not, when not


def target_acl(data: Mapping[str, Any]) -> AclDecision:
    """MirrorMaker 2's rules for copying a topic ACL (literal and prefixed bindings): ALLOW WRITE is not copied
    (only the replicator writes to replicated topics); ALLOW ALL is downgraded to READ; every other
    binding - DENY ones included, so a denial is never lost and access never widens - is copied as
    it is. ValueError (with the JSON path) for data that is not an ACL binding."""
    for field in ("topic", "principal", "host", "operation", "permission"):
        if not isinstance(data.get(field), str) or (field != "host" and not data[field]):
            raise ValueError(f"$.data.{field}: a non-empty string expected, got {data.get(field)!r}")
    operation, permission = data["operation"].upper(), data["permission"].upper()
    if operation not in AclOperation.__members__ or operation in ("ANY", "UNKNOWN"):
        raise ValueError(f"$.data.operation: {data['operation']!r} is not an ACL operation")
    if permission not in ("ALLOW", "DENY"):
        raise ValueError(f"$.data.permission: {data['permission']!r} is not ALLOW or DENY")
    pattern = str(data.get("patternType", "LITERAL")).upper()
    if pattern not in ("LITERAL", "PREFIXED"):
        return AclDecision(None, f"{pattern} pattern (only literal and prefixed ACLs are copied)")
    if permission == "DENY":
        return AclDecision(operation, "")
    if operation == "WRITE":
        return AclDecision(None, "ALLOW WRITE (only the replicator writes to the target)")
    return AclDecision("READ" if operation == "ALL" else operation, "")


def acl_binding(data: Mapping[str, Any], operation: str, topic: str) -> AclBinding:
    """The target's binding for a copied ACL on ``topic`` (a prefix for a PREFIXED one): ``operation``
    as ``target_acl`` decided, the source binding's own permission (a DENY stays a DENY) and pattern."""
    pattern = ResourcePatternType[str(data.get("patternType", "LITERAL")).upper()]
    return AclBinding(ResourceType.TOPIC, topic, pattern, data["principal"], data["host"],
                      AclOperation[operation], AclPermissionType[str(data["permission"]).upper()])


def local_topic_name(name: str) -> str:
    """A source topic name as a Kafka cluster names it: a Pulsar ``persistent://t/ns/x`` (or ``t/ns/x``)
    is ``x``; Kafka and RocketMQ names are kept."""
    return name.rsplit("/", 1)[-1]


# -- admin helpers -------------------------------------------------------------------------------------------------


def _error(exc: BaseException) -> KafkaError | None:
    return exc.args[0] if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError) else None


def _result(future, timeout: float, what: str, accept: Sequence[int] = ()) -> Any:
    """A future's result, or the KafkaError when its code is in ``accept``; RetriableError when the
    cluster did not answer or answered with a transient error; KafkaException for the others."""
    try:
        return future.result(timeout=timeout + 1)
    except KafkaException as exc:
        err = _error(exc)
        if err is not None and err.code() in accept:
            return err
        if err is not None and (err.retriable() or err.code() in _TRANSIENT):
            raise RetriableError(f"cannot {what} now: {err.str()}") from exc
        raise
    except concurrent.futures.TimeoutError as exc:
        raise RetriableError(f"cannot {what} now: no answer in {timeout:.1f} s") from exc


def _permanent(exc: KafkaException, what: str) -> ConnectError:
    err = _error(exc)
    return ConnectError(f"cannot {what}: {err.str() if err else exc}")


class _Admin:
    """The task's pooled admin client and its time budget (the epoch's time left, capped)."""

    def __init__(self, config: Mapping[str, Any], owner: str, context, request_timeout_ms: int):
        self.conf = client_config(config, "admin")
        self.owner = owner
        self.context = context
        self.cap = request_timeout_ms / 1000
        self.client = POOL.acquire("admin", owner, self.conf)

    def timeout(self) -> float:
        left = min(self.context.time_left(), self.cap)
        if left <= 0.05:
            raise RetriableError("no time left in this epoch for an admin request")
        return left

    def close(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            POOL.release("admin", self.owner, self.conf, client)


# -- source --------------------------------------------------------------------------------------------------------


class KafkaMetadataSourceTask(SourceTask):
    def start(self, config: Mapping[str, Any], context) -> None:
        cfg = SOURCE_CONFIG.parse(config)
        self.context = context
        self._cfg = cfg
        self._cluster = cfg["cluster.name"]
        self._partition = {"metadata": self._cluster}
        self._interval = cfg["poll.interval.ms"] / 1000
        self._snapshot_every = cfg["snapshot.interval.ms"] / 1000
        self._admin = _Admin(config, f"metadata-{context.task_id}", context, cfg["request.timeout.ms"])
        self._known: dict[tuple[str, str], dict] = {}
        self._next_poll = self._next_snapshot = time.monotonic()
        self._acl_note: str | None = None
        self._counts = {"events": 0, "snapshots": 0, "topics": 0, "acls": 0}

    def _matches(self, topic: str) -> bool:
        if self._cfg["topics"]:  # named on purpose: watched whatever topics.exclude says (as the Kafka source)
            return topic in self._cfg["topics"]
        if patterns.fullmatch(self._cfg["topics.exclude"], topic):
            return False
        return bool(self._cfg["topics.regex"]) and patterns.fullmatch(self._cfg["topics.regex"], topic)

    def poll(self) -> Sequence[ConnectRecord]:
        wait = self._next_poll - time.monotonic()
        if wait > 0:
            time.sleep(max(min(wait, 0.1, self.context.time_left()), 0))
            return []
        if self.context.time_left() < 0.2:
            return []  # too little time to ask the cluster: the next epoch will
        current = self._describe()
        now = time.monotonic()
        self._next_poll = now + self._interval
        now_ms = int(time.time() * 1000)
        events = diff_events(self._known, current, self._cluster, now_ms)
        if now >= self._next_snapshot:
            changed = {(e.resource, e.resource_name) for e in events}
            events += [MetadataChangeEvent("Modified", kind, name, dict(data), self._cluster, now_ms)
                       for (kind, name), data in current.items() if (kind, name) not in changed]
            self._next_snapshot = now + self._snapshot_every if self._snapshot_every else float("inf")
            self._counts["snapshots"] += 1
        self._known = current
        self._counts["events"] += len(events)
        self._counts["topics"] = sum(1 for kind, _ in current if kind == "Topics")
        self._counts["acls"] = sum(1 for kind, _ in current if kind == "Acls")
        offset = {"ts": now_ms}
        return [e.to_record(self._cfg["topic"], self._partition, offset) for e in events]

    def _describe(self) -> dict[tuple[str, str], dict]:
        """Every watched resource now: ``(resource, name) -> data``; RetriableError if the cluster
        cannot be asked (the state held is kept)."""
        admin = self._admin.client
        try:
            md = admin.list_topics(timeout=self._admin.timeout())
        except KafkaException as exc:
            raise RetriableError(f"cannot list topics on {self._cfg['bootstrap.servers']}: {exc}") from exc
        counts = {name: len(t.partitions) for name, t in md.topics.items() if t.error is None and self._matches(name)}
        current: dict[tuple[str, str], dict] = {}
        configs = self._configs(sorted(counts)) if counts else {}
        for name in sorted(counts):
            if name in configs:  # else deleted meanwhile
                current[("Topics", name)] = {"broker": "kafka", "partitions": counts[name], "configs": configs[name]}
        if self._cfg["sync.acls.enabled"]:
            acls = self._acls(counts)
            if acls is None:  # not described: keep what is known, delete nothing
                acls = {key: data for key, data in self._known.items() if key[0] == "Acls"}
            current.update(acls)
        return current

    def _configs(self, topics: list[str]) -> dict[str, dict[str, str]]:
        timeout = self._admin.timeout()
        futures = self._admin.client.describe_configs([ConfigResource(ResourceType.TOPIC, t) for t in topics],
                                                      request_timeout=timeout)
        exclude, source_defaults = self._cfg["configs.exclude"], self._cfg["use.defaults.from"] == "source"
        out = {}
        for resource, future in futures.items():
            what = f"describe the configs of topic {resource.name}"
            try:
                entries = _result(future, timeout, what, accept=(KafkaError.UNKNOWN_TOPIC_OR_PART,))
            except KafkaException as exc:
                raise RetriableError(f"cannot {what}: {exc}") from exc
            if not isinstance(entries, KafkaError):  # else deleted since it was listed
                out[resource.name] = topic_configs(entries, exclude, source_defaults)
        return out

    def _acls(self, topics: Sequence[str]) -> dict[tuple[str, str], dict] | None:
        """Literal TOPIC bindings of watched topics and prefixed ones that are watched names or
        prefixes of ``topics`` (the watched topics now); None when they cannot be described."""
        timeout = self._admin.timeout()
        wanted = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
        try:
            bindings = _result(self._admin.client.describe_acls(wanted, request_timeout=timeout), timeout, "describe ACLs")
        except KafkaException as exc:
            err = _error(exc)
            note = err.str() if err is not None else str(exc)
            if note != self._acl_note:
                level = logging.INFO if err is not None and err.code() == KafkaError.SECURITY_DISABLED else logging.WARNING
                log.log(level, "ACLs of %s not synced: %s%s", self._cluster, note,
                        " (no authorizer; set sync.acls.enabled=false)" if level == logging.INFO else "")
                self._acl_note = note
            if err is None or err.code() not in _NO_ACLS:
                log.debug("DescribeAcls failed", exc_info=True)
            return None
        out = {}
        for b in bindings:
            if b.restype == ResourceType.TOPIC and self._watched_acl(b, topics):
                data = acl_data(b)
                out[("Acls", acl_id(data))] = data
        return dict(sorted(out.items()))

    def _watched_acl(self, binding: AclBinding, topics: Sequence[str]) -> bool:
        if binding.resource_pattern_type == ResourcePatternType.LITERAL:
            return self._matches(binding.name)
        return binding.resource_pattern_type == ResourcePatternType.PREFIXED and (
            self._matches(binding.name) or any(t.startswith(binding.name) for t in topics))

    def metrics(self) -> Mapping[str, float]:
        return {f"metadata.source.{k}": float(v) for k, v in self._counts.items()}

    def stop(self) -> None:
        if getattr(self, "_admin", None) is not None:
            self._admin.close()


class KafkaMetadataSourceConnector(SourceConnector):
    @classmethod
    def config_def(cls) -> ConfigDef:
        return SOURCE_CONFIG

    @classmethod
    def validate(cls, config: Mapping[str, Any]) -> list[ConfigIssue]:
        return super().validate(config) + topic_selection_issues(config)

    @classmethod
    def task_class(cls) -> type:
        return KafkaMetadataSourceTask

    def task_configs(self, max_tasks: int) -> list[dict[str, Any]]:
        return [dict(self.config)]  # one watcher per cluster

    def source_topics(self) -> Mapping[str, int]:
        return {SOURCE_CONFIG.parse(self.config)["topic"]: 1}


# -- sink ----------------------------------------------------------------------------------------------------------


_SINK_COUNTS = ("events", "topics_created", "partitions_added", "configs_set", "configs_deleted", "topics_deleted",
                "acls_applied", "acls_skipped", "skipped_own_cluster", "skipped_stale", "ignored", "failed", "retried")


class KafkaMetadataSinkTask(SinkTask):
    def start(self, config: Mapping[str, Any], context) -> None:
        if config.get("topic"):
            raise ConfigError([ConfigIssue("topic", config["topic"], "the metadata sink applies events, it writes no "
                                           "records: a dead-letter or offset-syncs topic needs a data sink")])
        cfg = SINK_CONFIG.parse(config)
        self.context = context
        self._cfg = cfg
        self._cluster = cfg["cluster.name"]
        self._exclude = cfg["configs.exclude"]
        self._admin = _Admin(config, f"metadata-{context.task_id}", context, cfg["request.timeout.ms"])
        self._stamps: dict[str, tuple[int, str]] = {}
        self._partitions: dict[str, int] | None = None  # target topics' partition counts, read once per put
        self._noted: set[str] = set()
        self._counts = dict.fromkeys(_SINK_COUNTS, 0)

    def _note_once(self, key: str, message: str, *args: Any) -> None:
        if key not in self._noted:
            self._noted.add(key)
            log.info(message, *args)

    def put(self, records: Sequence[ConnectRecord]) -> None:
        report = self.context.errant_record_reporter.report
        self._partitions = None
        transient: RetriableError | None = None
        for record in records:
            if transient is not None:  # keep the order: what follows a transient failure is re-sent after it
                report(record, RetriableError(f"metadata event at {record.position()}: waits for an earlier one ({transient})"))
                self._counts["retried"] += 1
                continue
            try:
                self._apply(record)
            except RetriableError as exc:
                transient = RetriableError(f"metadata event at {record.position()}: {exc}")
                report(record, transient)
                self._counts["retried"] += 1
            except ConnectError as exc:
                report(record, ConnectError(f"metadata event at {record.position()}: {exc}"))
                self._counts["failed"] += 1

    def _apply(self, record: ConnectRecord) -> None:
        value = record.value
        if isinstance(value, (dict, list)):  # a json value converter decoded it
            value = orjson.dumps(value)
        try:
            event = MetadataChangeEvent.from_json(value)
        except ValueError as exc:
            raise ConnectError(f"not a metadata change event: {exc}") from None
        self._counts["events"] += 1
        if event.source_cluster == self._cluster:
            self._counts["skipped_own_cluster"] += 1
            return
        if not newer(event.stamp, self._stamps.get(event.key)):
            self._counts["skipped_stale"] += 1
            return
        if event.resource == "Topics":
            self._topic(event)
        elif event.resource == "Acls":
            self._acl(event)
        else:
            self._note_once(event.resource, "%s events have no Kafka counterpart here: ignored", event.resource)
            self._counts["ignored"] += 1
        self._stamps[event.key] = event.stamp

    def _target(self, name: str) -> str:
        target = render_template(self._cfg["topic.template"], local_topic_name(name))
        if not _LEGAL_TOPIC.fullmatch(target) or target in (".", ".."):
            raise ConnectError(f"$.resourceName: {name!r} gives the topic name {target!r}, which Kafka does not allow "
                               "(1 to 249 of a-z A-Z 0-9 . _ -); change topic.template or exclude it at the source")
        return target

    def _partition_counts(self) -> dict[str, int]:
        if self._partitions is None:
            try:
                md = self._admin.client.list_topics(timeout=self._admin.timeout())
            except KafkaException as exc:
                raise RetriableError(f"cannot list topics on {self._cfg['bootstrap.servers']}: {exc}") from exc
            self._partitions = {n: len(t.partitions) for n, t in md.topics.items() if t.error is None}
        return self._partitions

    # topics

    def _topic(self, event: MetadataChangeEvent) -> None:
        name = self._target(event.resource_name)
        if event.type == "Deleted":
            if self._cfg["sync.topic.deletes"]:
                self._delete(name)
            else:
                self._counts["ignored"] += 1
            return
        data = event.data or {}
        broker, partitions = data.get("broker"), data.get("partitions")
        if broker not in BROKERS:
            raise ConnectError(f"$.data.broker: {broker!r} is not one of {', '.join(BROKERS)}")
        if not isinstance(partitions, int) or isinstance(partitions, bool) or partitions < 0:
            raise ConnectError(f"$.data.partitions: a count >= 0 expected, got {partitions!r}")
        configs = self._event_configs(broker, data.get("configs"))
        current = self._partition_counts().get(name)
        wanted = target_units(broker, partitions, "kafka", current)
        if current is None and self._create(name, max(wanted or 1, 1), configs):
            return
        current = self._partition_counts().get(name, current)
        wanted = target_units(broker, partitions, "kafka", current)
        problems = []
        for step, args in ((self._sync_configs, (name, configs)), (self._grow, (name, current, wanted))):
            try:
                step(*args)
            except RetriableError:
                raise
            except ConnectError as exc:
                problems.append(str(exc))
        if problems:
            raise ConnectError("; ".join(problems))

    def _event_configs(self, broker: str, configs: Any) -> dict[str, str] | None:
        """The configs to copy (None: none, as the source is another broker)."""
        if broker != "kafka":
            if configs:
                self._note_once(f"configs:{broker}", "topic configs of %s topics are not copied to Kafka (configs do "
                                "not map across brokers; only Kafka to Kafka)", broker)
            return None
        if configs is None:
            return {}
        if not isinstance(configs, dict):
            raise ConnectError(f"$.data.configs: a JSON object expected, got {type(configs).__name__}")
        for key, value in configs.items():
            if not isinstance(value, str):
                raise ConnectError(f"$.data.configs.{key}: a string expected, got {value!r}")
        return {k: v for k, v in configs.items() if not (self._exclude and patterns.fullmatch(self._exclude, k))}

    def _create(self, name: str, partitions: int, configs: Mapping[str, str] | None) -> bool:
        """Create the topic with ``configs`` (MM2 does so: a compacted topic is compacted from its first
        record); False when it existed already. Configs the target refuses at creation: the topic is
        created without them, then they are set (and their refusal reported)."""
        if configs:
            created = self._new_topic(name, partitions, configs, refused_ok=True)
            if created is not None:
                self._counts["configs_set"] += len(configs) if created else 0
                return created
        if not self._new_topic(name, partitions, {}):
            return False
        if configs:
            self._sync_configs(name, configs)
        return True

    def _new_topic(self, name: str, partitions: int, configs: Mapping[str, str], refused_ok: bool = False) -> bool | None:
        """True: created; False: it exists; None: its configs were refused (``refused_ok``)."""
        timeout = self._admin.timeout()
        what = f"create topic {name} with {partitions} partition(s)" + (f" and configs {dict(configs)}" if configs else "")
        topic = NewTopic(name, partitions, self._cfg["replication.factor"], config=dict(configs))
        refusals = (KafkaError.INVALID_CONFIG, KafkaError.POLICY_VIOLATION) if refused_ok else ()
        try:
            err = _result(self._admin.client.create_topics([topic], request_timeout=timeout)[name], timeout, what,
                          accept=(KafkaError.TOPIC_ALREADY_EXISTS, *refusals))
        except KafkaException as exc:
            raise _permanent(exc, what) from exc
        if isinstance(err, KafkaError):
            if err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                self._partitions = None  # created meanwhile (by a data connector?): read it again
                return False
            log.warning("cannot %s (%s): creating it without configs, then setting them", what, err.str())
            return None
        log.info("%s: done", what)
        self._counts["topics_created"] += 1
        self._partition_counts()[name] = partitions
        return True

    def _grow(self, name: str, current: int | None, wanted: int | None) -> None:
        if wanted is None or current is None:
            return
        timeout = self._admin.timeout()
        what = f"grow topic {name} from {current} to {wanted} partitions"
        try:
            err = _result(self._admin.client.create_partitions([NewPartitions(name, wanted)], request_timeout=timeout)[name],
                          timeout, what, accept=(KafkaError.INVALID_PARTITIONS,))
        except KafkaException as exc:
            raise _permanent(exc, what) from exc
        if isinstance(err, KafkaError):  # it has that many already (a concurrent grow): MM2 swallows this too
            self._partitions = None
            return
        log.info("%s: done", what)
        self._counts["partitions_added"] += wanted - current
        self._partition_counts()[name] = wanted

    def _sync_configs(self, name: str, wanted: Mapping[str, str] | None) -> None:
        if wanted is None:
            return
        timeout = self._admin.timeout()
        resource = ConfigResource(ResourceType.TOPIC, name)
        try:
            current = _result(self._admin.client.describe_configs([resource], request_timeout=timeout)[resource], timeout,
                              f"describe the configs of topic {name}")
        except KafkaException as exc:
            raise _permanent(exc, f"describe the configs of topic {name}") from exc
        ops = config_ops(wanted, current, self._exclude)
        if not ops:
            return
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET if v is not None else AlterConfigOpType.DELETE)
                   for k, v in ops.items()]
        timeout = self._admin.timeout()
        what = f"alter the configs of topic {name} ({ops})"
        future = self._admin.client.incremental_alter_configs(
            [ConfigResource(ResourceType.TOPIC, name, incremental_configs=entries)], request_timeout=timeout)
        try:
            _result(next(iter(future.values())), timeout, what)
        except KafkaException as exc:
            raise _permanent(exc, what) from exc
        self._counts["configs_set"] += sum(1 for v in ops.values() if v is not None)
        self._counts["configs_deleted"] += sum(1 for v in ops.values() if v is None)

    def _delete(self, name: str) -> None:
        if name not in self._partition_counts():
            return
        timeout = self._admin.timeout()
        try:
            _result(self._admin.client.delete_topics([name], request_timeout=timeout)[name], timeout, f"delete topic {name}",
                    accept=(KafkaError.UNKNOWN_TOPIC_OR_PART,))
        except KafkaException as exc:
            raise _permanent(exc, f"delete topic {name}") from exc
        log.info("deleted topic %s (sync.topic.deletes)", name)
        self._counts["topics_deleted"] += 1
        self._partition_counts().pop(name, None)

    # ACLs

    def _acl(self, event: MetadataChangeEvent) -> None:
        if event.type == "Deleted":
            self._counts["ignored"] += 1  # MM2 never deletes ACLs
            return
        broker = (event.data or {}).get("broker", "kafka")
        if broker != "kafka":
            self._note_once(f"acls:{broker}", "ACLs of %s clusters are not copied to Kafka (ACL models differ)", broker)
            self._counts["ignored"] += 1
            return
        try:
            decision = target_acl(event.data or {})
        except ValueError as exc:
            raise ConnectError(str(exc)) from None
        if decision.operation is None:
            self._counts["acls_skipped"] += 1
            log.debug("ACL %s not copied: %s", event.resource_name, decision.reason)
            return
        name = event.data["topic"]
        template = self._cfg["topic.template"]
        if str(event.data.get("patternType", "LITERAL")).upper() == "PREFIXED" and \
                (not template.endswith("{topic}") or template.count("{topic}") != 1):
            self._counts["acls_skipped"] += 1
            self._note_once("acls:prefix", "prefixed ACLs are not copied: topic.template %r puts text after {topic},"
                            " so a prefix has no target prefix", template)
            return
        binding = acl_binding(event.data, decision.operation, self._target(name))
        timeout = self._admin.timeout()
        what = f"create the ACL {binding}"
        try:
            _result(self._admin.client.create_acls([binding], request_timeout=timeout)[binding], timeout, what)
        except KafkaException as exc:
            err = _error(exc)
            hint = " (the target has no authorizer: set sync.acls.enabled=false on the metadata source)" \
                if err is not None and err.code() == KafkaError.SECURITY_DISABLED else ""
            raise ConnectError(f"cannot {what}: {err.str() if err else exc}{hint}") from exc
        self._counts["acls_applied"] += 1

    def flush(self, offsets) -> None:
        return None  # every put is applied (or reported) before it returns

    def metrics(self) -> Mapping[str, float]:
        return {f"metadata.sink.{k}": float(v) for k, v in self._counts.items()}

    def stop(self) -> None:
        if getattr(self, "_admin", None) is not None:
            self._admin.close()


class KafkaMetadataSinkConnector(SinkConnector):
    @classmethod
    def config_def(cls) -> ConfigDef:
        return SINK_CONFIG

    @classmethod
    def task_class(cls) -> type:
        return KafkaMetadataSinkTask

    def task_configs(self, max_tasks: int) -> list[dict[str, Any]]:
        return [dict(self.config)]  # events apply in order: one task
