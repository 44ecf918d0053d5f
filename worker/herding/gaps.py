"""A connector's source gaps (``connect.source.gaps``): shown, and acknowledged by an operator.

``GET /connectors/{name}/gaps`` lists them (also in ``GET .../status``); ``POST
/connectors/{name}/gaps/acknowledge`` with ``{"by": "<who>"}`` marks every open gap acknowledged by
that operator, now. A pair that stopped at a gap (``source.gap.policy=fail``) has its partition
moved past the gap in the same write (``worker.runtime.gapledger``) and its failed task pairs
restarted: they resume at the first record the source still holds.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from worker.herding.model import BadRequest
from worker.herding.registry import Registry
from worker.runtime.gapledger import acknowledge_writes, gaps_view
from worker.stores.store import OffsetBackend

__all__ = ["ConnectorGaps", "acknowledger"]

MAX_BY = 200  # characters of the operator's name kept


def acknowledger(body: Any) -> str:
    """Who acknowledges, from the request body ``{"by": "<who>"}``."""
    if not isinstance(body, dict) or not isinstance(body.get("by"), str) or not body["by"].strip():
        raise BadRequest('$.by: say who acknowledges the gap, e.g. {"by": "alice"} (a non-empty string)')
    by = body["by"].strip()
    if len(by) > MAX_BY or any(ord(ch) < 32 for ch in by):
        raise BadRequest(f"$.by: at most {MAX_BY} printable characters")
    return by


class ConnectorGaps:
    def __init__(self, registry: Registry, offsets: OffsetBackend, restart_failed: Callable[[str], Any]):
        self._registry = registry
        self._offsets = offsets
        self._restart_failed = restart_failed

    def stored(self, name: str) -> dict[str, Any]:
        """The connector's offsets as its running pairs see them, else as stored."""
        with self._registry.lock:
            c = self._registry.get(name)
            rt = c.runtime
        return rt.stored_offsets() if rt is not None else self._offsets.load(name)

    def gaps(self, name: str) -> dict[str, Any]:
        return {"gaps": gaps_view(self.stored(name))}

    def acknowledge(self, name: str, body: Any) -> dict[str, Any]:
        by = acknowledger(body)
        with self._registry.mutate:
            c = self._registry.get(name)
            rt = c.runtime
            if rt is not None:
                count = rt.acknowledge_gaps(by)
            else:
                writes, count = acknowledge_writes(self._offsets.load(name), by, time.time())
                if writes:
                    self._offsets.commit(name, writes)
        if count:
            self._restart_failed(name)
        return {"acknowledged": count, "by": by, "gaps": gaps_view(self.stored(name))}
