"""PIP-136 stamps as they sit in a Pulsar resource (top of a TenantInfo, or a namespace's
``properties``), the applier's pending marker, and the namespace data events carry
(see "Stamps" in :mod:`connectors.pulsar.metadata`)."""

from __future__ import annotations

import time
from typing import Any, Mapping

from connectors.replicator.metadata import Stamp, newer

__all__ = ["BY", "TIME", "PENDING", "PENDING_MAX_MS", "NAMESPACE_FIELDS", "Key", "ORDER", "stamp_of", "strip_stamp",
           "applying", "namespace_data"]


BY, TIME = "lastUpdatedBy", "lastUpdatedTime"
#: A namespace property an applier holds while it writes a namespace with several requests (its
#: value the wall-clock ms it started): the watcher of the cluster leaves such a namespace as it last
#: read it until the marker is gone, so a half-applied event is never taken for a local change. A
#: marker older than PENDING_MAX_MS (an applier that died mid-way) is ignored.
PENDING = "lastUpdatedPending"
PENDING_MAX_MS = 30_000
NAMESPACE_FIELDS = ("retention_policies", "message_ttl_in_seconds", "properties")

#: a resource: (resource type, name)
Key = tuple[str, str]
#: the resource types synced here, a tenant ranked before its namespaces
ORDER = {"Tenants": 0, "Namespaces": 1}


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
