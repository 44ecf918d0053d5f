"""Request bodies the herder takes (connector configs, offsets), read into what it stores;
anything else is a :class:`~worker.herding.model.BadRequest` naming the JSON path."""

from __future__ import annotations

import math
from typing import Any

from connect.records import partition_key
from connect.source.gaps import is_bookkeeping_key
from worker.herding.model import BadRequest

__all__ = ["strings", "offset_changes"]


def strings(config: Any, path: str) -> dict[str, str]:
    """A submitted config as strings, as stored: numbers and booleans are converted (the docs allow
    them); anything else is a BadRequest naming the key."""
    if not isinstance(config, dict):
        raise BadRequest(f"{path}: must be an object of string keys to string values")
    out: dict[str, str] = {}
    for key, value in config.items():
        if isinstance(value, bool):
            out[key] = "true" if value else "false"
        elif isinstance(value, (str, int)) or (isinstance(value, float) and math.isfinite(value)):
            out[key] = str(value)
        else:
            raise BadRequest(f'{path}["{key}"]: must be a string, number or boolean, not '
                             f"{'null' if value is None else type(value).__name__}")
    return out


def offset_changes(body: Any) -> dict[str, dict[str, Any] | None]:
    """``{"offsets": [{"partition": {...}, "offset": {...} | null}, ...]}`` as store changes; BadRequest
    naming the JSON path of the first problem."""
    if not isinstance(body, dict) or not isinstance(body.get("offsets"), list):
        raise BadRequest('$.offsets: must be a list of {"partition": {...}, "offset": {...} or null}')
    unknown = sorted(set(body) - {"offsets"})
    if unknown:
        raise BadRequest(f"$.{unknown[0]}: unknown field")
    if not body["offsets"]:
        raise BadRequest("$.offsets: must name at least one partition")
    changes: dict[str, dict[str, Any] | None] = {}
    for i, entry in enumerate(body["offsets"]):
        where = f"$.offsets[{i}]"
        if not isinstance(entry, dict):
            raise BadRequest(f"{where}: must be an object with 'partition' and 'offset'")
        extra = sorted(set(entry) - {"partition", "offset"})
        if extra:
            raise BadRequest(f"{where}.{extra[0]}: unknown field")
        partition = entry.get("partition")
        if not isinstance(partition, dict) or not partition:
            raise BadRequest(f"{where}.partition: must be a non-empty object (as GET .../offsets shows it)")
        if "offset" not in entry:
            raise BadRequest(f"{where}.offset: missing (an object, or null to remove the partition's offset)")
        offset = entry["offset"]
        if offset is not None and (not isinstance(offset, dict) or not offset):
            raise BadRequest(f"{where}.offset: must be a non-empty object, or null")
        key = partition_key(partition)
        if is_bookkeeping_key(key):  # the worker's gap bookkeeping (connect.source.gaps), not a source partition
            raise BadRequest(f"{where}.partition: names the worker's source-gap bookkeeping, not a source partition "
                             "(acknowledge gaps through POST /connectors/<name>/gaps/acknowledge)")
        changes[key] = offset
    return changes
