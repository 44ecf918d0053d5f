"""Pulsar metadata sync (PIP-136): tenants and namespaces kept alike in Pulsar clusters that share no
metadata store, through the admin REST API and an ordinary event topic.

Each cluster runs three ordinary pipelines (see :mod:`connectors.replicator.metadata` for the event
format and last-writer-wins):

1. ``pulsar-metadata`` source (the *watcher*, one task) -> a sink writing the cluster's event topic;
2. mirrors carrying the event topics between clusters (``cluster.alias`` on both sides, so the
   origin chain stops loops);
3. a source reading the cluster's event topic -> ``pulsar-metadata`` sink (the *applier*).

**Watcher.** The admin REST API has no watch, so every ``poll.interval.ms`` the source reads the
tenants (``tenants`` regex minus ``tenants.exclude``: the system tenants ``pulsar`` and ``sample``
by default), their TenantInfo, their namespaces and each one's Policies, and emits the differences
(:func:`~connectors.replicator.metadata.diff_events`): resource ``Tenants`` (name the tenant, data
the TenantInfo) and ``Namespaces`` (name ``tenant/ns``, data the Policies). Every
``snapshot.interval.ms`` (and once at start: nothing is replayed, a restart snapshots) it also
publishes every resource as ``Modified`` with its stamp, so a new or lagging cluster converges.
Records go to ``topic`` (default ``metadata-events``: a short name, which a Pulsar sink completes
as ``persistent://public/default/metadata-events`` and a Kafka or RocketMQ sink takes as it is),
source partition ``{"metadata": <cluster.name>}``, offset ``{"ts": <ms>}``.

**Stamps** (``lastUpdatedBy`` / ``lastUpdatedTime``, PIP-136's names) live in the resource itself:
for a tenant at the top of its TenantInfo JSON; for a namespace in its Policies' ``properties``
map (``PUT .../properties``: top-level Policies fields of an existing namespace cannot be set
through the REST API); a Policies JSON that carries them at its top (a Pulsar storing PIP-136's
fields) is read too, the newer of the two winning. Data is always compared and carried without
them, so a change of the stamp alone is never an event. A change the watcher sees whose stamp
changed with it was applied from another cluster and keeps that stamp; any other change is
local: it is stamped (now, ``cluster.name``) and the watcher writes that stamp into the resource
(as a PIP-136 broker stamps its local updates), so the applier of this cluster compares later
events against it. A resource that carries no stamp when the watcher starts is stamped
(0, ``cluster.name``): older than any stamped change, so a cluster's pre-existing (or default)
state never overrides a real change elsewhere, and two unstamped versions converge to the
smaller cluster name's. Limits: the stamp write-back races with an applier writing the same
resource between the watcher's read and its write (the watcher reads again just before writing,
which narrows the window to milliseconds); a local change made while the watcher is stopped is
published with the stamp the resource already carries (it loses to any newer one). An applier
updates a namespace with several requests (a ``lastUpdatedPending`` marker, the fields, the stamp,
then the marker removed); the watcher leaves a namespace carrying a fresh marker as it last read it,
so a half-applied event is never taken for a local change (two appliers of one cluster writing the
same namespace at once, or one that died mid-way and whose event never comes again, fall back to
that: the marker is ignored after 30 s). A stock
Pulsar drops unknown TenantInfo fields, so tenant stamps need a Pulsar that stores them.

**Applier.** A synchronous sink. Per event: bad JSON or fields are reported (never dropped) with
the record position and the JSON path; events of this cluster (``sourceCluster`` =
``cluster.name``) are skipped; the resource's stamp is read and the event applied only if
:func:`~connectors.replicator.metadata.newer` says it is newer (equal stamp: duplicate; older:
stale). ``Created`` / ``Modified`` create or update, with the event's stamp written along;
``Deleted`` deletes. A tenant that allows this cluster keeps it allowed (an event from another
cluster names that one: independent clusters each allow their tenants on themselves, ``public``
first of all). Namespaces are applied field by field, for the fields in
:data:`NAMESPACE_FIELDS` (``retention_policies`` via ``/retention``, ``message_ttl_in_seconds`` via
``/messageTTL``, ``properties`` via ``/properties``; a field the event's data does not hold is left
as it is, a null one removed); other Policies fields whose value differs from this cluster's are
ignored, counted (``metadata.fields.ignored``) and logged once per field. A namespace is created
with those fields only (Policies such as bundles or replication clusters name things of the
source cluster). Deletions are remembered (at most ``deletions.max``, oldest forgotten first, and
not across restarts) so an older ``Created`` arriving after a newer ``Deleted`` does not bring the
resource back; past that limit it may. ``Topics`` events, from any broker's metadata source
(data ``partitions`` and ``broker``), create or grow a partitioned topic as
:mod:`connectors.replicator.mapping` says; counts only grow and topics are never deleted by
metadata. Transient admin failures (connection, timeout, 5xx) report the event and every one
after it in the batch with a :class:`~connect.errors.RetriableError` (re-sent in order); a refusal
(4xx) reports that event as permanent. Gauges: ``metadata.applied``, ``.stale``, ``.duplicate``,
``.own``, ``.invalid``, ``.failed``, ``.retried``, ``.unsupported``, ``.fields.ignored``,
``.topics.unchanged``, ``.topics.deletes.ignored``.
"""

from __future__ import annotations

import collections
import logging
import re
import time
from typing import Any, Callable, Mapping, Sequence
from urllib.parse import quote

import httpx

from connect import patterns
from connect.config import ConfigDef, Importance, Type, at_least, non_empty, one_of, valid_regex
from connect.connector import SinkConnector, SourceConnector
from connect.errors import ConfigIssue, ConnectError, RetriableError
from connect.records import ConnectRecord
from connect.sink import SinkTask
from connect.source import SourceTask
from connectors.replicator.mapping import target_units
from connectors.replicator.metadata import MetadataChangeEvent, Stamp, diff_events, newer

__all__ = ["PulsarAdmin", "AdminError", "PulsarMetadataSourceConnector", "PulsarMetadataSourceTask",
           "PulsarMetadataSinkConnector", "PulsarMetadataSinkTask", "NAMESPACE_FIELDS", "stamp_of", "strip_stamp",
           "namespace_data"]

log = logging.getLogger(__name__)

BY, TIME = "lastUpdatedBy", "lastUpdatedTime"
#: A namespace property an applier holds while it writes a namespace with several requests (its
#: value the wall-clock ms it started): the watcher of the cluster leaves such a namespace as it last
#: read it until the marker is gone, so a half-applied event is never taken for a local change. A
#: marker older than PENDING_MAX_MS (an applier that died mid-way) is ignored.
PENDING = "lastUpdatedPending"
PENDING_MAX_MS = 30_000
NAMESPACE_FIELDS = ("retention_policies", "message_ttl_in_seconds", "properties")
BROKERS = ("kafka", "pulsar", "rocketmq")


# -- the admin REST client ----------------------------------------------------------------------
class _Deferred(Exception):
    """An event that cannot apply yet and will come again (in the next snapshot): not counted as applied."""


class AdminError(ConnectError):
    """Pulsar's admin API refused a request (a 4xx answer); ``status`` is the HTTP status."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


_NAME_PART = re.compile(r"[A-Za-z0-9_.=:-]+")


def check_resource_name(resource: str, name: str) -> None:
    """A tenant (``t``), namespace (``t/ns``) or topic (``persistent://t/ns/x``) name, each part
    made of the characters Pulsar allows and never ``.`` or ``..`` (which would address other admin
    endpoints); ValueError with the JSON path otherwise."""
    body = name.split("://", 1)[1] if resource == "Topics" and "://" in name else name
    parts = body.split("/")
    wanted = {"Tenants": 1, "Namespaces": 2, "Topics": 3}[resource]
    if len(parts) != wanted or any(p in (".", "..") or not _NAME_PART.fullmatch(p) for p in parts):
        shape = {"Tenants": "tenant", "Namespaces": "tenant/namespace", "Topics": "persistent://tenant/namespace/topic"}
        raise ValueError(f"$.resourceName: {name!r} is not a {shape[resource]} name (letters, digits and _.=:- "
                         "only, no '.' or '..' parts)")


def _seg(name: str) -> str:
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"$.resourceName: {name!r} has an empty, '.' or '..' part")
    return "/".join(quote(part, safe="") for part in parts)


def _topic_path(topic: str) -> str:
    domain, _, rest = topic.partition("://")
    return f"/admin/v2/{domain}/{_seg(rest)}"


class PulsarAdmin:
    """The few Pulsar admin v2 calls metadata sync needs. Connection trouble, timeouts and 5xx (and
    408/429) raise :class:`RetriableError`; other 4xx raise :class:`AdminError`, except a 404 where
    the call says it means "not there" (it then returns None). Messages name the method, URL and
    status, and Pulsar's ``reason``."""

    def __init__(self, url: str, token: str = "", timeout_s: float = 10.0,
                 time_left: Callable[[], float] | None = None):
        self.url = url.rstrip("/")
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._timeout = timeout_s
        self._time_left = time_left
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s, follow_redirects=True)

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any], time_left: Callable[[], float] | None = None) -> PulsarAdmin:
        token = ""
        if cfg["auth.plugin"] == "token":
            token = cfg["auth.token"]
            if not token and cfg["auth.token.file"]:
                with open(cfg["auth.token.file"]) as f:
                    token = f.read().strip()
        return cls(cfg["admin.url"], token, cfg["admin.timeout.ms"] / 1000, time_left)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> PulsarAdmin:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def request(self, method: str, path: str, body: Any = None, *, missing: bool = False, answer: bool = True) -> Any:
        """``answer`` False: the answer's body is not read (Pulsar answers some calls with plain text,
        e.g. a removed property's old value)."""
        url = self.url + path
        timeout = self._timeout if self._time_left is None else min(self._timeout, max(self._time_left(), 0.5))
        try:
            resp = self._http.request(method, path, json=body, timeout=timeout)
        except httpx.HTTPError as exc:
            raise RetriableError(f"Pulsar admin {method} {url} failed: {type(exc).__name__}: {exc}") from exc
        status = resp.status_code
        if status == 404 and missing:
            return None
        if status >= 400:
            try:
                reason = resp.json().get("reason")
            except (ValueError, AttributeError):
                reason = None
            text = f"Pulsar admin {method} {url}: HTTP {status} ({reason or resp.text[:200] or resp.reason_phrase})"
            if status >= 500 or status in (408, 429):
                raise RetriableError(text)
            raise AdminError(text, status)
        if not resp.content or not answer:
            return None
        try:
            return resp.json()
        except ValueError:
            raise RetriableError(f"Pulsar admin {method} {url} answered {resp.text[:200]!r}, not JSON") from None

    def _doc(self, path: str) -> dict | None:
        doc = self.request("GET", path, missing=True)
        if doc is not None and not isinstance(doc, dict):
            raise RetriableError(f"{self.url}{path} answered {str(doc)[:200]!r}, not a JSON object")
        return doc

    def _names(self, path: str) -> list[str]:
        names = self.request("GET", path, missing=True)
        if names is None:
            return []
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise RetriableError(f"{self.url}{path} answered {str(names)[:200]!r}, not a JSON list of names")
        return names

    # tenants: TenantInfo {"adminRoles": [...], "allowedClusters": [...]}
    def tenants(self) -> list[str]:
        return self._names("/admin/v2/tenants")

    def tenant(self, tenant: str) -> dict | None:
        return self._doc(f"/admin/v2/tenants/{_seg(tenant)}")

    def create_tenant(self, tenant: str, info: Mapping[str, Any]) -> None:
        self.request("PUT", f"/admin/v2/tenants/{_seg(tenant)}", dict(info))

    def update_tenant(self, tenant: str, info: Mapping[str, Any]) -> None:
        self.request("POST", f"/admin/v2/tenants/{_seg(tenant)}", dict(info))

    def delete_tenant(self, tenant: str) -> None:
        self.request("DELETE", f"/admin/v2/tenants/{_seg(tenant)}", missing=True)

    # namespaces ("tenant/ns"): Policies JSON
    def namespaces(self, tenant: str) -> list[str]:
        return self._names(f"/admin/v2/namespaces/{_seg(tenant)}")

    def policies(self, namespace: str) -> dict | None:
        return self._doc(f"/admin/v2/namespaces/{_seg(namespace)}")

    def create_namespace(self, namespace: str, policies: Mapping[str, Any]) -> None:
        self.request("PUT", f"/admin/v2/namespaces/{_seg(namespace)}", dict(policies))

    def delete_namespace(self, namespace: str) -> None:
        self.request("DELETE", f"/admin/v2/namespaces/{_seg(namespace)}", missing=True)

    def set_retention(self, namespace: str, retention: Mapping[str, Any] | None) -> None:
        path = f"/admin/v2/namespaces/{_seg(namespace)}/retention"
        if retention is None:
            self.request("DELETE", path)
        else:
            self.request("POST", path, {"retentionTimeInMinutes": retention["retentionTimeInMinutes"],
                                        "retentionSizeInMB": retention["retentionSizeInMB"]})

    def set_message_ttl(self, namespace: str, seconds: int | None) -> None:
        path = f"/admin/v2/namespaces/{_seg(namespace)}/messageTTL"
        if seconds is None:
            self.request("DELETE", path)
        else:
            self.request("POST", path, int(seconds))

    def set_properties(self, namespace: str, properties: Mapping[str, str]) -> None:
        """Adds or replaces these namespace properties (others stay), as Pulsar's PUT does."""
        self.request("PUT", f"/admin/v2/namespaces/{_seg(namespace)}/properties", dict(properties))

    def remove_property(self, namespace: str, key: str) -> None:
        self.request("DELETE", f"/admin/v2/namespaces/{_seg(namespace)}/property/{quote(key, safe='')}", missing=True,
                     answer=False)

    # partitioned topics ("persistent://tenant/ns/topic")
    def partitions(self, topic: str) -> int | None:
        """Partitions of ``topic``: 0 when it is not partitioned (Pulsar also answers 0 for a topic
        that does not exist), None on a 404."""
        doc = self._doc(f"{_topic_path(topic)}/partitions")
        if doc is None:
            return None
        n = doc.get("partitions")
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise RetriableError(f"{self.url}{_topic_path(topic)}/partitions answered {doc!r}, no partition count")
        return n

    def create_partitions(self, topic: str, partitions: int) -> None:
        self.request("PUT", f"{_topic_path(topic)}/partitions", int(partitions))

    def grow_partitions(self, topic: str, partitions: int) -> None:
        self.request("POST", f"{_topic_path(topic)}/partitions", int(partitions))


# -- stamps -------------------------------------------------------------------------------------
def _stamp(by: Any, when: Any) -> Stamp | None:
    if not isinstance(by, str) or not by:
        return None
    if isinstance(when, str) and when.isdigit():
        when = int(when)
    if not isinstance(when, int) or isinstance(when, bool) or when < 0:
        return None
    return (when, by)


def stamp_of(doc: Mapping[str, Any]) -> Stamp | None:
    """The stamp a TenantInfo or Policies JSON carries (top level, or a namespace's ``properties``;
    the newer of the two), or None."""
    found = _stamp(doc.get(BY), doc.get(TIME))
    props = doc.get("properties")
    if isinstance(props, dict):
        other = _stamp(props.get(BY), props.get(TIME))
        if other is not None and (found is None or newer(other, found)):
            found = other
    return found


def strip_stamp(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` without its stamp fields (at the top and in ``properties``)."""
    out = {k: v for k, v in doc.items() if k not in (BY, TIME)}
    props = out.get("properties")
    if isinstance(props, dict) and (BY in props or TIME in props or PENDING in props):
        out["properties"] = {k: v for k, v in props.items() if k not in (BY, TIME, PENDING)}
    return out


def applying(policies: Mapping[str, Any] | None, now_ms: int | None = None) -> bool:
    """Whether an applier of this cluster is writing this namespace right now (a fresh :data:`PENDING`)."""
    props = (policies or {}).get("properties")
    started = props.get(PENDING) if isinstance(props, dict) else None
    if not isinstance(started, str) or not started.isdigit():
        return False
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    return now_ms - int(started) < PENDING_MAX_MS


def namespace_data(policies: Mapping[str, Any]) -> dict[str, Any]:
    """A namespace's Policies as events carry and the watcher compares them: without the stamp, the
    synced fields always there (null when unset, as Pulsar's Policies JSON has them) and
    ``properties`` always a map, so writing the first stamp into a namespace without properties
    is a change of the stamp alone, and an unset field is carried as unset (a sink removes it)."""
    doc = strip_stamp(policies)
    for field in NAMESPACE_FIELDS:
        doc.setdefault(field, None)
    if not isinstance(doc["properties"], dict):
        doc["properties"] = {}
    return doc


# -- configuration ------------------------------------------------------------------------------
def _http_url(value: Any) -> str | None:
    return None if str(value).startswith(("http://", "https://")) else "must be an http:// or https:// URL"


ADMIN_CONFIG = (
    ConfigDef()
    .define("admin.url", Type.STRING, doc="The cluster's admin REST URL (http[s]://host:port).",
            importance=Importance.HIGH, validator=_http_url)
    .define("cluster.name", Type.STRING, doc="This cluster's name: the sourceCluster of its events, and what "
            "last-writer-wins compares on equal times (the smaller name wins).", importance=Importance.HIGH,
            validator=non_empty)
    .define("auth.plugin", Type.STRING, "none", "Admin API authentication: none or token (a bearer token).",
            validator=one_of("none", "token"))
    .define("auth.token", Type.PASSWORD, "", "With auth.plugin=token: the token (or set auth.token.file).")
    .define("auth.token.file", Type.STRING, "", "With auth.plugin=token: a file holding the token.")
    .define("admin.timeout.ms", Type.INT, 10_000, "Timeout of each admin request.", validator=at_least(100))
)

SOURCE_CONFIG = ADMIN_CONFIG.merge(
    ConfigDef()
    .define("tenants", Type.STRING, ".*", "Regex (full match) of the tenants synced.", validator=valid_regex)
    .define("tenants.exclude", Type.STRING, "pulsar|sample", "Regex (full match) of tenants never synced "
            "(Pulsar's system tenants by default).", validator=valid_regex)
    .define("topic", Type.STRING, "metadata-events", "Event topic the records carry (a Pulsar sink completes "
            "a short name as persistent://public/default/<name>).", validator=non_empty)
    .define("poll.interval.ms", Type.INT, 1000, "How often the cluster's metadata is read and compared (the "
            "admin REST API has no watch).", validator=at_least(10))
    .define("snapshot.interval.ms", Type.LONG, 60_000, "How often every resource is published with its stamp "
            "(PIP-136's snapshot sync); 0: only when the task starts.", validator=at_least(0))
)

SINK_CONFIG = ADMIN_CONFIG.merge(
    ConfigDef()
    .define("topics.namespace", Type.STRING, "public/default", "tenant/namespace completing short topic names "
            "of Topics events.")
    .define("deletions.max", Type.INT, 10_000, "Deletion stamps remembered, so an older Created arriving after a "
            "newer Deleted does not bring the resource back.", validator=at_least(0))
)


def _auth_issues(config: Mapping[str, Any]) -> list[ConfigIssue]:
    if str(config.get("auth.plugin", "none")).lower() == "token" and not (config.get("auth.token")
                                                                           or config.get("auth.token.file")):
        return [ConfigIssue("auth.token", None, "auth.plugin=token needs auth.token or auth.token.file")]
    return []


# -- the watcher --------------------------------------------------------------------------------
Key = tuple[str, str]
_ORDER = {"Tenants": 0, "Namespaces": 1}


def _event_order(ev: MetadataChangeEvent) -> tuple:
    """Tenants before their namespaces, except deletions: namespaces before their tenant."""
    rank = _ORDER.get(ev.resource, 2)
    return (1, -rank, ev.resource_name) if ev.type == "Deleted" else (0, rank, ev.resource_name)


class PulsarMetadataSourceTask(SourceTask):
    def start(self, config: Mapping[str, Any], context) -> None:
        cfg = SOURCE_CONFIG.parse(config)
        self.cluster = cfg["cluster.name"]
        self.topic = cfg["topic"]
        self.poll_s = cfg["poll.interval.ms"] / 1000
        self.snapshot_s = cfg["snapshot.interval.ms"] / 1000
        self._include = patterns.compile(cfg["tenants"])
        self._exclude = patterns.compile(cfg["tenants.exclude"]) if cfg["tenants.exclude"] else None
        self.admin = PulsarAdmin.from_config(cfg, time_left=context.time_left)
        self.partition = {"metadata": self.cluster}
        self._data: dict[Key, dict] | None = None  # what the last read saw (stamps stripped); None: not read yet
        self._carried: dict[Key, Stamp | None] = {}  # the stamp each resource carried then
        self._stamps: dict[Key, Stamp] = {}  # the stamp each resource was last published with
        self._unwritten: dict[Key, Stamp] = {}  # local changes whose stamp is not written into the resource yet
        self._next_poll = time.monotonic()
        self._next_snapshot = 0.0
        self.counts = {"metadata.resources": 0, "metadata.events": 0, "metadata.snapshots": 0,
                       "metadata.stamps.written": 0, "metadata.pending.skipped": 0}

    def _read(self) -> tuple[dict[Key, dict], dict[Key, Stamp | None]]:
        data: dict[Key, dict] = {}
        carried: dict[Key, Stamp | None] = {}
        for tenant in sorted(self.admin.tenants()):
            if not self._include.fullmatch(tenant) or (self._exclude and self._exclude.fullmatch(tenant)):
                continue
            info = self.admin.tenant(tenant)
            if info is None:
                continue  # deleted since it was listed
            data[("Tenants", tenant)], carried[("Tenants", tenant)] = strip_stamp(info), stamp_of(info)
            for ns in sorted(self.admin.namespaces(tenant)):
                policies = self.admin.policies(ns)
                key = ("Namespaces", ns)
                if applying(policies):  # half-applied: as last read until the applier is done
                    self.counts["metadata.pending.skipped"] += 1
                    if self._data is not None and key in self._data:
                        data[key], carried[key] = self._data[key], self._carried.get(key)
                    continue
                if policies is not None:
                    data[("Namespaces", ns)], carried[("Namespaces", ns)] = namespace_data(policies), stamp_of(policies)
        return data, carried

    def poll(self) -> Sequence[ConnectRecord]:
        now_mono = time.monotonic()
        if now_mono < self._next_poll:
            time.sleep(max(min(self._next_poll - now_mono, 0.1, self.context.time_left()), 0))
            return []
        self._next_poll = now_mono + self.poll_s
        data, carried = self._read()
        now = int(time.time() * 1000)
        events = self._changes(data, carried, now)
        self._write_stamps(data)
        if now_mono >= self._next_snapshot:
            self._next_snapshot = now_mono + self.snapshot_s if self.snapshot_s else float("inf")
            changed = {(ev.resource, ev.resource_name) for ev in events}
            for key, doc in data.items():
                if key not in changed:
                    when, by = self._stamps.get(key, (0, self.cluster))
                    events.append(MetadataChangeEvent("Modified", key[0], key[1], doc, by, when))
            self.counts["metadata.snapshots"] += 1
        events.sort(key=_event_order)
        self.counts["metadata.resources"] = len(data)
        self.counts["metadata.events"] += len(events)
        offset = {"ts": now}
        return [ev.to_record(self.topic, self.partition, offset) for ev in events]

    def _changes(self, data: dict[Key, dict], carried: dict[Key, Stamp | None], now: int) -> list[MetadataChangeEvent]:
        """The events since the last read; remembers stamps, and which local changes need theirs written."""
        first = self._data is None
        before = self._data or {}
        kept: dict[Key, Stamp] = {}  # changes that keep the stamp their resource carries
        for key, doc in data.items():
            held = carried[key]
            if key not in before:
                if held is not None:
                    kept[key] = held
                elif first:  # there before the watcher: older than any stamped change
                    kept[key] = (0, self.cluster)
                    self._unwritten[key] = kept[key]
            elif doc != before[key]:
                if held is not None and held != self._carried.get(key):
                    kept[key] = held  # applied from another cluster, with its stamp
            elif held is not None and key not in self._unwritten:  # unchanged, or a change of the stamp alone
                self._stamps[key] = held
        events = [] if first else diff_events(before, data, self.cluster, now, kept)
        for ev in events:
            key = (ev.resource, ev.resource_name)
            if ev.type == "Deleted":
                self._stamps.pop(key, None)
                self._unwritten.pop(key, None)
                continue
            self._stamps[key] = ev.stamp
            if key in kept:
                self._unwritten.pop(key, None)
            else:
                self._unwritten[key] = ev.stamp  # a local change: its stamp goes into the resource
        if first:
            self._stamps.update(kept)
        self._data, self._carried = data, dict(carried)
        return events

    def _write_stamps(self, data: dict[Key, dict]) -> None:
        """Write the stamps of local changes into their resources (as a PIP-136 broker does when it is
        updated), each only if the resource is still as read; failures are retried at the next read."""
        for key, stamp in list(self._unwritten.items()):
            resource, name = key
            written = False
            try:
                if resource == "Tenants":
                    current = self.admin.tenant(name)
                    if written := current is not None and strip_stamp(current) == data.get(key):
                        self.admin.update_tenant(name, {**current, BY: stamp[1], TIME: stamp[0]})
                else:
                    current = self.admin.policies(name)
                    if written := current is not None and namespace_data(current) == data.get(key):
                        self.admin.set_properties(name, {BY: stamp[1], TIME: str(stamp[0])})
            except ConnectError as exc:
                log.warning("[%s] cannot stamp %s %s yet: %s", self.context.task_id, resource, name, exc)
                continue
            del self._unwritten[key]  # written, or changed again since it was read (the next read sees to it)
            if written:
                self._carried[key] = stamp  # its own stamp, so a later local change is not taken for a remote one
                self.counts["metadata.stamps.written"] += 1

    def metrics(self) -> Mapping[str, float]:
        return {**{k: float(v) for k, v in self.counts.items()}, "metadata.stamps.unwritten": float(len(self._unwritten))}

    def stop(self) -> None:
        self.admin.close()


class PulsarMetadataSourceConnector(SourceConnector):
    @classmethod
    def config_def(cls) -> ConfigDef:
        return SOURCE_CONFIG

    @classmethod
    def validate(cls, config: Mapping[str, Any]) -> list[ConfigIssue]:
        return super().validate(config) + _auth_issues(config)

    @classmethod
    def task_class(cls) -> type:
        return PulsarMetadataSourceTask

    def task_configs(self, max_tasks: int) -> list[dict[str, Any]]:
        return [dict(self.config)]  # one watcher per cluster

    def source_topics(self) -> Mapping[str, int]:
        return {SOURCE_CONFIG.parse(self.config)["topic"]: 1}


# -- the applier --------------------------------------------------------------------------------
class InvalidEvent(ValueError):
    """An event this sink cannot apply as it is; the message starts with the JSON path."""


def _check_names(data: Mapping[str, Any], field: str) -> None:
    value = data.get(field)
    if value is None:
        return
    if not isinstance(value, list):
        raise InvalidEvent(f"$.data.{field}: a list of names expected, got {type(value).__name__}")
    for i, v in enumerate(value):
        if not isinstance(v, str):
            raise InvalidEvent(f"$.data.{field}[{i}]: a string expected, got {v!r}")


def _check_int(value: Any, path: str, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InvalidEvent(f"{path}: an integer >= {minimum} expected, got {value!r}")


def _check_namespace(data: Mapping[str, Any]) -> None:
    retention = data.get("retention_policies")
    if retention is not None:
        if not isinstance(retention, dict):
            raise InvalidEvent(f"$.data.retention_policies: an object or null expected, got {type(retention).__name__}")
        for field in ("retentionTimeInMinutes", "retentionSizeInMB"):
            _check_int(retention.get(field), f"$.data.retention_policies.{field}", -1)
    if data.get("message_ttl_in_seconds") is not None:
        _check_int(data["message_ttl_in_seconds"], "$.data.message_ttl_in_seconds", 0)
    props = data.get("properties")
    if props is not None:
        if not isinstance(props, dict):
            raise InvalidEvent(f"$.data.properties: an object or null expected, got {type(props).__name__}")
        for k, v in props.items():
            if not isinstance(v, str):
                raise InvalidEvent(f"$.data.properties.{k}: a string expected, got {v!r}")


class PulsarMetadataSinkTask(SinkTask):
    def start(self, config: Mapping[str, Any], context) -> None:
        cfg = SINK_CONFIG.parse(config)
        self.cluster = cfg["cluster.name"]
        self.namespace = cfg["topics.namespace"]
        self.admin = PulsarAdmin.from_config(cfg, time_left=context.time_left)
        self._deletions: collections.OrderedDict[Key, Stamp] = collections.OrderedDict()
        self._max_deletions = cfg["deletions.max"]
        self._warned: set[str] = set()
        self.counts = dict.fromkeys(
            ("metadata.applied", "metadata.stale", "metadata.duplicate", "metadata.own", "metadata.invalid",
             "metadata.failed", "metadata.retried", "metadata.unsupported", "metadata.fields.ignored", "metadata.deferred",
             "metadata.topics.unchanged", "metadata.topics.deletes.ignored"), 0)

    def put(self, records: Sequence[ConnectRecord]) -> None:
        report = self.context.errant_record_reporter.report
        transient: RetriableError | None = None
        for r in records:
            if transient is None and self.context.time_left() <= 0:
                transient = RetriableError("the epoch ended before this metadata event was applied")
            if transient is not None:  # keep the order: every event after a transient failure is re-sent
                self.counts["metadata.retried"] += 1
                report(r, transient)
                continue
            try:
                self._apply(MetadataChangeEvent.from_json(r.value))
            except RetriableError as exc:
                transient = RetriableError(f"metadata event at {r.position()} not applied yet: {exc}")
                self.counts["metadata.retried"] += 1
                report(r, transient)
            except ValueError as exc:  # from_json's and InvalidEvent: the message starts with the JSON path
                self.counts["metadata.invalid"] += 1
                path = "" if str(exc).startswith("$") else "$: "
                report(r, ConnectError(f"invalid metadata event at {r.position()}: {path}{exc}"))
            except ConnectError as exc:
                self.counts["metadata.failed"] += 1
                report(r, ConnectError(f"metadata event at {r.position()} refused: {exc}"))

    def flush(self, offsets) -> None:
        return None

    def _apply(self, ev: MetadataChangeEvent) -> None:
        if ev.source_cluster == self.cluster:
            self.counts["metadata.own"] += 1
            return
        if ev.resource == "Topics":
            self._apply_topic(ev)
            return
        if ev.resource not in _ORDER:
            self.counts["metadata.unsupported"] += 1  # SubscriptionGroups, Acls: no Pulsar counterpart here
            return
        check_resource_name(ev.resource, ev.resource_name)
        if ev.data is not None:
            if ev.resource == "Tenants":
                _check_names(ev.data, "adminRoles")
                _check_names(ev.data, "allowedClusters")
            else:
                _check_namespace(ev.data)
        key = (ev.resource, ev.resource_name)
        current = self.admin.tenant(ev.resource_name) if ev.resource == "Tenants" else self.admin.policies(ev.resource_name)
        held = stamp_of(current) if current is not None else self._deletions.get(key)
        unfinished = held == ev.stamp and applying(current)  # its marker left: applied half-way, finish it
        if held == ev.stamp and not unfinished:
            self.counts["metadata.duplicate"] += 1
            return
        if not unfinished and not newer(ev.stamp, held):
            self.counts["metadata.stale"] += 1
            return
        if ev.type == "Deleted":
            if current is not None:
                (self.admin.delete_tenant if ev.resource == "Tenants" else self.admin.delete_namespace)(ev.resource_name)
            self._remember_deletion(key, ev.stamp)
        elif ev.resource == "Tenants":
            self._upsert_tenant(ev, current)
        else:
            try:
                self._upsert_namespace(ev, current)
            except _Deferred:
                return
        self.counts["metadata.applied"] += 1

    def _remember_deletion(self, key: Key, stamp: Stamp) -> None:
        if self._max_deletions <= 0:
            return
        self._deletions[key] = stamp
        self._deletions.move_to_end(key)
        while len(self._deletions) > self._max_deletions:
            self._deletions.popitem(last=False)

    def _upsert_tenant(self, ev: MetadataChangeEvent, current: dict | None) -> None:
        body = {**strip_stamp(ev.data or {}), BY: ev.source_cluster, TIME: ev.update_time}
        allowed = list(body.get("allowedClusters") or [])
        if current is not None and self.cluster in (current.get("allowedClusters") or []) and self.cluster not in allowed:
            # Independent clusters each allow a tenant on themselves: another cluster's TenantInfo
            # would take this cluster out, and it would refuse every new namespace of the tenant.
            body["allowedClusters"] = sorted([*allowed, self.cluster])
        self._deletions.pop(("Tenants", ev.resource_name), None)
        if current is None:
            try:
                self.admin.create_tenant(ev.resource_name, body)
                return
            except AdminError as exc:
                if exc.status != 409:
                    raise
        self.admin.update_tenant(ev.resource_name, body)  # exists (or was created meanwhile: 409)

    def _upsert_namespace(self, ev: MetadataChangeEvent, current: dict | None) -> None:
        ns, data = ev.resource_name, strip_stamp(ev.data or {})
        stamp = {BY: ev.source_cluster, TIME: str(ev.update_time)}
        self._deletions.pop(("Namespaces", ns), None)
        if current is None:
            body = {f: data[f] for f in NAMESPACE_FIELDS if data.get(f) is not None and f != "properties"}
            body["properties"] = {**(data.get("properties") or {}), **stamp}
            try:
                self.admin.create_namespace(ns, body)
                # Compared with what this cluster made of it (a broker fills every Policies field with
                # its defaults), not with nothing: only fields that really differ are left unsynced.
                self._count_ignored(ns, data, self.admin.policies(ns) or {})
                return
            except AdminError as exc:
                if exc.status == 404 and self.admin.tenant(ns.split("/", 1)[0]) is None:
                    # Its tenant is not here yet (a reader that joined mid-snapshot, events of two
                    # clusters interleaved): the next snapshot brings the tenant first, then this
                    # namespace again. Holding the event instead would block that snapshot behind it.
                    self.counts["metadata.deferred"] += 1
                    log.info("[%s] namespace %s waits for its tenant (the next snapshot brings both)",
                             self.context.task_id, ns)
                    raise _Deferred from None
                if exc.status != 409:
                    raise
            current = self.admin.policies(ns) or {}  # created meanwhile: update it
        self._count_ignored(ns, data, current)
        have = strip_stamp(current)
        # Several requests follow: the marker keeps this cluster's watcher from reading them half done.
        self.admin.set_properties(ns, {PENDING: str(int(time.time() * 1000))})
        if "retention_policies" in data and data["retention_policies"] != have.get("retention_policies"):
            self.admin.set_retention(ns, data["retention_policies"])
        if "message_ttl_in_seconds" in data and data["message_ttl_in_seconds"] != have.get("message_ttl_in_seconds"):
            self.admin.set_message_ttl(ns, data["message_ttl_in_seconds"])
        wanted = dict(stamp)
        if "properties" in data:
            props = data["properties"] or {}
            for gone in sorted(set(have.get("properties") or {}) - set(props)):
                self.admin.remove_property(ns, gone)
            wanted = {**props, **stamp}
        self.admin.set_properties(ns, wanted)  # the stamp last: a failure before it makes the event apply again
        self.admin.remove_property(ns, PENDING)

    def _count_ignored(self, ns: str, data: Mapping[str, Any], current: Mapping[str, Any]) -> None:
        for field, value in data.items():
            if field in NAMESPACE_FIELDS or value == current.get(field):
                continue
            self.counts["metadata.fields.ignored"] += 1
            if field not in self._warned:
                self._warned.add(field)
                log.warning("[%s] namespace policy %s is not synced (only %s are): %s keeps its own value",
                            self.context.task_id, field, ", ".join(NAMESPACE_FIELDS), ns)

    def _topic_name(self, name: str) -> str:
        if "://" in name:
            return name
        return f"persistent://{name}" if name.count("/") == 2 else f"persistent://{self.namespace}/{name}"

    def _apply_topic(self, ev: MetadataChangeEvent) -> None:
        if ev.type == "Deleted":
            self.counts["metadata.topics.deletes.ignored"] += 1  # metadata never deletes a topic (and its data)
            return
        check_resource_name("Topics", self._topic_name(ev.resource_name))
        data = ev.data or {}
        _check_int(data.get("partitions"), "$.data.partitions", 0)
        broker = data.get("broker")
        if broker not in BROKERS:
            raise InvalidEvent(f"$.data.broker: {broker!r} is not one of {', '.join(BROKERS)}")
        topic = self._topic_name(ev.resource_name)
        current = self.admin.partitions(topic)
        wanted = target_units(broker, data["partitions"], "pulsar", current)
        if broker == "pulsar" and data["partitions"] == 0 and not current:
            wanted = None  # a non-partitioned topic: Pulsar creates it on first use
        if wanted is None:
            self.counts["metadata.topics.unchanged"] += 1
            return
        try:
            if current:
                self.admin.grow_partitions(topic, wanted)
            else:
                self.admin.create_partitions(topic, wanted)
        except AdminError as exc:
            if exc.status == 409 and not current:  # created meanwhile: look again
                raise RetriableError(f"{topic} appeared while it was being created: {exc}") from exc
            raise
        self.counts["metadata.applied"] += 1

    def metrics(self) -> Mapping[str, float]:
        return {k: float(v) for k, v in self.counts.items()}

    def stop(self) -> None:
        self.admin.close()


class PulsarMetadataSinkConnector(SinkConnector):
    @classmethod
    def config_def(cls) -> ConfigDef:
        return SINK_CONFIG

    @classmethod
    def validate(cls, config: Mapping[str, Any]) -> list[ConfigIssue]:
        return super().validate(config) + _auth_issues(config)

    @classmethod
    def task_class(cls) -> type:
        return PulsarMetadataSinkTask
