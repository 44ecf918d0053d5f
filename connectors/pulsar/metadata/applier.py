"""The applier: the ``pulsar-metadata`` sink task (see "Applier" in :mod:`connectors.pulsar.metadata`)."""

from __future__ import annotations

import collections
import logging
import time
from typing import Any, Mapping, Sequence

from connect.errors import ConnectError, RetriableError
from connect.records import ConnectRecord
from connect.sink import SinkTask
from connectors.pulsar.metadata.admin import AdminError, PulsarAdmin, check_resource_name
from connectors.pulsar.metadata.config import SINK_CONFIG
from connectors.pulsar.metadata.stamps import (
    BY,
    NAMESPACE_FIELDS,
    ORDER,
    PENDING,
    TIME,
    Key,
    applying,
    stamp_of,
    strip_stamp,
)
from connectors.replicator.mapping import target_units
from connectors.replicator.metadata import MetadataChangeEvent, Stamp, newer

__all__ = ["PulsarMetadataSinkTask", "InvalidEvent"]

log = logging.getLogger(__name__)


BROKERS = ("kafka", "pulsar", "rocketmq")


class _Deferred(Exception):
    """An event that cannot apply yet and will come again (in the next snapshot): not counted as applied."""


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
        if ev.resource not in ORDER:
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
