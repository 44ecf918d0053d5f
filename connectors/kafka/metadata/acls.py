"""Topic ACLs as events carry them, and MirrorMaker 2's rules for copying one."""

from __future__ import annotations

import hashlib
from typing import Any, Mapping, NamedTuple

import orjson
from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

__all__ = ["acl_data", "acl_id", "AclDecision", "target_acl", "acl_binding"]


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
