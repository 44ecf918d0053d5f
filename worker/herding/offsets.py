"""A connector's committed offsets: shown at any time, altered or reset only while it is STOPPED
(Kafka Connect's KIP-875), so no task pair reads them meanwhile.

Only source partitions are shown and altered: the worker's gap bookkeeping kept among the offsets
(topic identities, gap ledgers: ``connect.source.gaps``)
is left out. A reset (DELETE) removes it with the offsets: the connector starts afresh, and its
recorded gaps go too (an open gap, once acknowledged, would move a partition past the reset)."""

from __future__ import annotations

from typing import Any

import orjson

from connect.source.gaps import is_bookkeeping_key
from worker.herding.bodies import offset_changes
from worker.herding.model import STOPPED, HerdedConnector, StateConflict
from worker.herding.registry import Registry
from worker.stores.store import OffsetBackend

__all__ = ["ConnectorOffsets"]


class ConnectorOffsets:
    def __init__(self, registry: Registry, offsets: OffsetBackend):
        self._registry = registry
        self._offsets = offsets

    def offsets(self, name: str) -> dict[str, Any]:
        self._registry.get(name)
        stored = self._offsets.load(name)
        return {"offsets": [{"partition": orjson.loads(key), "offset": value} for key, value in sorted(stored.items())
                            if not is_bookkeeping_key(key)]}

    def alter(self, name: str, body: Any) -> dict[str, str]:
        with self._registry.mutate:
            c = self._registry.get(name)
            _require_stopped(c, "altered")
            changes = offset_changes(body)
            self._offsets.commit(name, changes)
        return {"message": "The offsets for this connector have been altered successfully"}

    def reset(self, name: str) -> dict[str, str]:
        with self._registry.mutate:
            c = self._registry.get(name)
            _require_stopped(c, "reset")
            self._offsets.reset(name)
        return {"message": "The offsets for this connector have been reset successfully"}


def _require_stopped(c: HerdedConnector, what: str) -> None:
    if c.target != STOPPED or c.runtime is not None or (c.thread is not None and c.state != STOPPED):
        raise StateConflict(f"Connectors must be in the STOPPED state before their offsets can be {what}; "
                            f"{c.name} is {c.state} (PUT /connectors/{c.name}/stop first)")
