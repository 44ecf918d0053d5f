"""Reading an ``mm2.properties`` as MirrorMakerConfig resolves it: a flow's ``S->T.<key>`` over the
top-level ``<key>`` over MM2's default; a cluster's client settings ``S.<key>`` over the top-level
client keys, role-specific ``S.consumer.*`` / ``S.producer.*`` / ``S.admin.*`` over both. Which keys
were read is tracked, so that the import reports every other one."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from connect import patterns
from worker.migration.mm2clients import ClientSettings, Skipped, translate_client_key
from worker.migration.mm2properties import Entry

__all__ = ["DEFAULTS", "DEFAULT_POLICY", "FLOW_KEYS", "IDENTITY_POLICY", "NOT_CARRIED", "ImportResult", "Mm2ImportError",
           "Reader", "bootstrap", "client", "clusters"]

DEFAULT_POLICY = "org.apache.kafka.connect.mirror.DefaultReplicationPolicy"
IDENTITY_POLICY = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"
# MM2's defaults (MirrorSourceConfig, MirrorCheckpointConfig, DefaultTopicFilter, DefaultGroupFilter)
DEFAULTS = {
    "topics": ".*", "topics.exclude": r".*[\-\.]internal, .*\.replica, __.*",
    "groups": ".*", "groups.exclude": "console-consumer-.*, connect-.*, __.*",
    "emit.checkpoints.enabled": "true", "emit.checkpoints.interval.seconds": "60",
    "emit.heartbeats.enabled": "true", "emit.heartbeats.interval.seconds": "1",
    "sync.group.offsets.enabled": "false", "sync.group.offsets.interval.seconds": "60",
    "sync.topic.configs.enabled": "true", "sync.topic.acls.enabled": "true",
    "replication.policy.class": DEFAULT_POLICY, "replication.policy.separator": ".",
    "emit.offset-syncs.enabled": "true",
}
FLOW_KEYS = set(DEFAULTS) | {
    "enabled", "topics.blacklist", "groups.blacklist", "refresh.topics.interval.seconds", "offset.lag.max",
    "tasks.max", "replication.factor", "config.properties.exclude", "config.properties.blacklist",
    "sync.topic.configs.interval.seconds", "checkpoints.topic.replication.factor",
    "heartbeats.topic.replication.factor", "refresh.groups.interval.seconds"}
# Java client settings MM2 applies to every cluster when given at the top level (CLIENT_CONFIG_DEF)
_CLIENT_TOP = re.compile(r"security\.protocol|sasl\..+|ssl\..+|client\.id|client\.dns\.lookup|request\.timeout\.ms|"
                         r"metadata\.max\.age\.ms|reconnect\.backoff(\.max)?\.ms|retry\.backoff\.ms|"
                         r"connections\.max\.idle\.ms|(send|receive)\.buffer\.bytes")
NOT_CARRIED = [  # (full-match regex of the key without its cluster/flow scope, reason)
    (r"(config|offset|status)\.storage\..+|offset\.flush\..+|group\.id",
     "MM2's Connect worker state: this worker keeps connector state in its own stores (worker settings)"),
    (r"(key|value|header)\.converter(\..+)?", "MM2 copies bytes with ByteArrayConverter; the mirror does too"),
    (r"(topic|group|config\.property)\.filter\.class|forwarding\.admin\.class|.*\.class",
     "a Java class: no configuration loads code here (filters are the topics/groups regexes)"),
    (r"transaction\.boundary.*",
     "each epoch of a task pair is one transaction here (exactly.once.support; its length is epoch.max.ms)"),
    (r"exactly\.once\.source\.support",
     "read for the cluster a flow writes to (T.exactly.once.source.support): no enabled flow writes to this one"),
    (r"dedicated\.mode\.enable\.internal\.rest|listeners|rest\..+|admin\.listeners",
     "a setting of MM2's own REST server: set the worker's rest.* settings"),
    (r"refresh\.topics\.enabled|refresh\.groups\.enabled",
     "topics and groups are always refreshed here (refresh.topics.interval.ms; groups every checkpoint round)"),
    (r"refresh\.groups\.interval\.seconds", "groups are listed again every checkpoint round (emit.checkpoints.interval)"),
    (r"sync\.topic\.acls\.interval\.seconds", "ACLs are checked with topic configs (sync.topic.configs.interval)"),
    (r"offset-syncs\.topic\.location", "offset syncs are kept in the target cluster here"),
    (r"offset-syncs\.topic\.replication\.factor",
     "the offset-syncs topic is created like the mirror's target topics (replication.factor)"),
    (r"replication\.policy\.internal\.topic\.separator\.enabled|heartbeats\.topic\.retention\.ms|"
     r"checkpoints\.topic\.retention\.ms", "internal topic settings this project does not take"),
    (r"consumer\..+|producer\..+|admin\..+",
     "MM2 reads client settings per cluster (<cluster>.consumer.*); a top-level one applies to no cluster"),
]
_BOOL = {"true": True, "false": False}


class Mm2ImportError(ValueError):
    """Bad input: ``problems`` lists (key, line, what is wrong)."""

    def __init__(self, problems: list[tuple[str, int, str]]):
        self.problems = problems
        super().__init__("; ".join(f"{k} (line {n}): {why}" if n else f"{k}: {why}" for k, n, why in problems))


@dataclass
class ImportResult:
    connectors: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    secrets: dict[str, str] = field(default_factory=dict)  # env variable -> the key its value comes from

    def to_json(self) -> dict[str, Any]:
        return {"connectors": self.connectors,
                "skipped": [{"key": s.key, "line": s.line, "reason": s.reason} for s in self.skipped],
                "secrets": [{"env": name, "from": key} for name, key in sorted(self.secrets.items())]}


class Reader:
    """The entries, which of them were used, and the problems found."""

    def __init__(self, entries: dict[str, Entry]):
        self.entries = entries
        self.used: set[str] = set()
        self.problems: list[tuple[str, int, str]] = []

    def raw(self, key: str) -> tuple[str, str] | None:
        if key in self.entries:
            self.used.add(key)
            return key, self.entries[key].value.strip()
        return None

    def flow(self, s: str, t: str, key: str) -> tuple[str, str]:
        """(the key that gave the value, the value) for flow s->t: flow-scoped, top-level, default."""
        found = self.raw(f"{s}->{t}.{key}") or self.raw(key)
        return found or (key, DEFAULTS.get(key, ""))

    def line(self, key: str) -> int:
        return self.entries[key].line if key in self.entries else 0

    def bad(self, key: str, why: str) -> None:
        self.problems.append((key, self.line(key), why))

    def boolean(self, s: str, t: str, key: str) -> bool:
        name, value = self.flow(s, t, key)
        if value.lower() not in _BOOL:
            self.bad(name, "must be true or false")
            return False
        return _BOOL[value.lower()]

    def number(self, s: str, t: str, key: str, minimum: int = 0) -> int | None:
        name, value = self.flow(s, t, key)
        if not value:
            return None
        try:
            number = int(value)
        except ValueError:
            self.bad(name, "must be a whole number")
            return None
        if number < minimum:
            self.bad(name, f"must be at least {minimum}")
            return None
        return number

    def regexes(self, s: str, t: str, key: str, legacy: str | None = None) -> str:
        """A comma list of Java regexes as one alternation ('' when empty)."""
        name, value = self.flow(s, t, key)
        if legacy and name == key and key not in self.entries:
            name, value = self.flow(s, t, legacy) if (legacy in self.entries or f"{s}->{t}.{legacy}" in self.entries) \
                else (name, value)
        items = [p.strip() for p in value.split(",") if p.strip()]
        for item in items:
            if problem := patterns.problem(item):
                self.bad(name, f"regex {item!r}: {problem}")
        return "|".join(f"(?:{p})" for p in items)


def clusters(reader: Reader) -> list[str]:
    found = reader.raw("clusters")
    if not found or not found[1]:
        reader.bad("clusters", "missing: name the clusters (clusters=A, B) and give each A.bootstrap.servers")
        return []
    names = [c.strip() for c in found[1].split(",") if c.strip()]
    for name in names:
        if not re.fullmatch(r"[A-Za-z0-9._\-]+", name):
            reader.bad("clusters", f"cluster alias {name!r}: use letters, digits, '.', '_' and '-'")
    return names


def client(reader: Reader, cluster: str, role: str) -> ClientSettings:
    """librdkafka settings of ``cluster`` for ``role`` (consumer, producer, admin), MM2's precedence."""
    java: dict[str, tuple[str, str]] = {}  # key -> (the file's key, value)
    for key in reader.entries:
        if _CLIENT_TOP.fullmatch(key):
            java[key] = (key, reader.entries[key].value.strip())
    for prefix in (f"{cluster}.", f"{cluster}.{role}."):
        for key, entry in reader.entries.items():
            rest = key[len(prefix):]
            if key.startswith(prefix) and rest and rest != "bootstrap.servers" and not _scoped_elsewhere(rest, prefix) \
                    and not _worker_key(rest):
                java[rest] = (key, entry.value.strip())
    out = ClientSettings()
    siblings = {k: v for k, (_n, v) in java.items()}
    for key, (name, value) in sorted(java.items()):
        reader.used.add(name)
        translate_client_key(out, cluster if name.startswith(cluster + ".") else "", key, value, reader.line(name),
                             name, siblings)
    return out


def _worker_key(rest: str) -> bool:
    """A cluster-scoped key that is no client setting (``A.offset.storage.topic``): reported, not probed."""
    return any(re.fullmatch(pattern, rest) for pattern, _why in NOT_CARRIED[:-1])


def _scoped_elsewhere(rest: str, prefix: str) -> bool:
    """``A.consumer.x`` read as ``A.``'s general ``consumer.x``: not a client key of every role."""
    return prefix.count(".") == 1 and rest.split(".", 1)[0] in ("consumer", "producer", "admin")


def bootstrap(reader: Reader, cluster: str) -> str:
    found = reader.raw(f"{cluster}.bootstrap.servers")
    if not found or not found[1]:
        reader.problems.append((f"{cluster}.bootstrap.servers", 0, f"missing: cluster {cluster} is used by a flow"))
        return ""
    return found[1]


