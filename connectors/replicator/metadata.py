"""Metadata change events: what the config and metadata connectors exchange (PIP-136's
``MetadataChangeEvent``, extended from tenants and namespaces to topics, groups and ACLs).

A *metadata source* watches one cluster (Kafka topics, partitions, configs and ACLs; RocketMQ topic
configs and subscription groups; Pulsar tenants, namespaces and partitioned topics) and emits an
event per change it sees - and, every ``snapshot.interval.ms``, every resource it knows (PIP-136's
snapshot sync, so a new or lagging cluster converges). The events are ordinary records (key
``<resource>/<resourceName>``, value the event as JSON), so they go to an event topic like any data
and are mirrored between clusters like any topic, origin chain included. A *metadata sink* applies
the events to its cluster.

Event JSON (PIP-136's field names)::

    {"type": "Created|Modified|Deleted", "resource": "Tenants|Namespaces|Topics|SubscriptionGroups|Acls",
     "resourceName": "...", "data": {...}, "sourceCluster": "A", "updateTime": 1700000000000}

``data`` is a JSON object (PIP-136 has bytes: here they are always JSON), the resource's state as
its source broker describes it; ``Topics`` data always holds ``partitions`` (Kafka partitions,
RocketMQ write queues, Pulsar partitions - 0 for a non-partitioned topic) so any broker's sink can
map the structure (see ``connectors.replicator.mapping``).

Last writer wins (PIP-136): each resource carries ``lastUpdatedBy`` / ``lastUpdatedTime`` where the
cluster can store them; an event replaces what a cluster holds only if it is newer, and equal times
are broken by the lexicographic order of the source cluster names - the *smaller* name wins (PIP-136:
region A's value is kept over region B's), identically in every cluster, so concurrent updates
converge to one value everywhere. Stale and duplicate events change nothing.
"""

from __future__ import annotations

from typing import Any, Mapping

import attrs
import orjson

from connect.records import ConnectRecord, make_record

__all__ = ["MetadataChangeEvent", "EVENT_TYPES", "RESOURCES", "newer", "Stamp", "diff_events"]

EVENT_TYPES = ("Created", "Modified", "Deleted")
RESOURCES = ("Tenants", "Namespaces", "Topics", "SubscriptionGroups", "Acls")

Stamp = tuple[int, str]  # (lastUpdatedTime, lastUpdatedBy)


def newer(candidate: Stamp, held: Stamp | None) -> bool:
    """Whether a change stamped ``candidate`` replaces what is stamped ``held`` (None: nothing held)."""
    if held is None:
        return True
    if candidate[0] != held[0]:
        return candidate[0] > held[0]
    return candidate[1] < held[1]  # equal times: the lexicographically smaller cluster name wins


@attrs.frozen
class MetadataChangeEvent:
    type: str
    resource: str
    resource_name: str
    data: Mapping[str, Any] | None
    source_cluster: str
    update_time: int

    @property
    def stamp(self) -> Stamp:
        return (self.update_time, self.source_cluster)

    @property
    def key(self) -> str:
        return f"{self.resource}/{self.resource_name}"

    def to_json(self) -> bytes:
        return orjson.dumps({"type": self.type, "resource": self.resource, "resourceName": self.resource_name,
                             "data": self.data, "sourceCluster": self.source_cluster, "updateTime": self.update_time})

    def to_record(self, topic: str, source_partition: Mapping[str, Any], source_offset: Mapping[str, Any]
                  ) -> ConnectRecord:
        return make_record(topic, self.key.encode(), self.to_json(), None, self.update_time, source_partition,
                           source_offset, 0)

    @classmethod
    def from_json(cls, value: bytes | str | None) -> MetadataChangeEvent:
        """The event a record carries; ValueError naming the field that is wrong otherwise."""
        if value is None:
            raise ValueError("no value (a tombstone is not an event)")
        try:
            doc = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise ValueError(f"$: a JSON object expected, got {type(doc).__name__}")
        kind, resource = doc.get("type"), doc.get("resource")
        if kind not in EVENT_TYPES:
            raise ValueError(f"$.type: {kind!r} is not one of {', '.join(EVENT_TYPES)}")
        if resource not in RESOURCES:
            raise ValueError(f"$.resource: {resource!r} is not one of {', '.join(RESOURCES)}")
        name, cluster, when, data = doc.get("resourceName"), doc.get("sourceCluster"), doc.get("updateTime"), doc.get("data")
        if not isinstance(name, str) or not name:
            raise ValueError(f"$.resourceName: a non-empty string expected, got {name!r}")
        if not isinstance(cluster, str) or not cluster:
            raise ValueError(f"$.sourceCluster: a non-empty string expected, got {cluster!r}")
        if not isinstance(when, int) or isinstance(when, bool) or when < 0:
            raise ValueError(f"$.updateTime: epoch milliseconds expected, got {when!r}")
        if data is not None and not isinstance(data, dict):
            raise ValueError(f"$.data: a JSON object or null expected, got {type(data).__name__}")
        if kind != "Deleted" and data is None:
            raise ValueError(f"$.data: a {kind} event needs the resource's data")
        return cls(kind, resource, name, data, cluster, when)


def diff_events(before: Mapping[tuple[str, str], Mapping[str, Any]], after: Mapping[tuple[str, str], Mapping[str, Any]],
                cluster: str, now_ms: int, stamps: Mapping[tuple[str, str], Stamp] | None = None
                ) -> list[MetadataChangeEvent]:
    """Events turning ``before`` into ``after`` (both ``(resource, name) -> data``). A resource whose
    stamp is known (``stamps``: it carries lastUpdatedBy/Time, e.g. it was applied from another
    cluster's event) keeps that stamp, so its echo changes nothing anywhere; others are stamped
    (``now_ms``, ``cluster``)."""
    stamps = stamps or {}
    out = []
    for key, data in after.items():
        held = before.get(key)
        if held == data:
            continue
        when, by = stamps.get(key, (now_ms, cluster))
        out.append(MetadataChangeEvent("Created" if held is None else "Modified", key[0], key[1], dict(data), by, when))
    for key in before.keys() - after.keys():
        out.append(MetadataChangeEvent("Deleted", key[0], key[1], None, cluster, now_ms))
    return out
