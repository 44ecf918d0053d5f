"""A connector's committed offsets: shown at any time, altered or reset only while it is STOPPED
(Kafka Connect's KIP-875), so no task pair reads them meanwhile.

Only source partitions are shown and altered: the worker's gap bookkeeping kept among the offsets
(topic identities, gap ledgers: ``connect.source.gaps``)
is left out. A reset (DELETE) removes it with the offsets: the connector starts afresh, and its
recorded gaps go too (an open gap, once acknowledged, would move a partition past the reset).

A connector with ``exactly.once.support`` whose pairs resume from offsets kept in the target
(a Kafka sink's offsets topic, written in each epoch's transaction) has the change written
there first (``SinkConnector.alter_target_offsets``: its pairs fenced, then one transaction), then
to the worker's store; if the target refuses, neither changes and the answer names why."""

from __future__ import annotations

from typing import Any

import orjson

from connect.errors import ConnectError, TransactionsUnavailableError
from connect.source.gaps import is_bookkeeping_key
from worker.herding.bodies import offset_changes
from worker.herding.model import STOPPED, HerdedConnector, StateConflict
from worker.herding.registry import Registry
from worker.herding.validation import Validation
from worker.pipeline import parse_pipeline
from worker.stores.store import OffsetBackend

__all__ = ["ConnectorOffsets", "OffsetsNotChanged"]


class OffsetsNotChanged(ConnectError):
    """The target refused the change where an exactly-once connector keeps its offsets: 500."""


class ConnectorOffsets:
    def __init__(self, registry: Registry, offsets: OffsetBackend, validation: Validation | None = None):
        self._registry = registry
        self._offsets = offsets
        self._validation = validation

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
            self._in_target(c, changes)
            self._offsets.commit(name, changes)
        return {"message": "The offsets for this connector have been altered successfully"}

    def reset(self, name: str) -> dict[str, str]:
        with self._registry.mutate:
            c = self._registry.get(name)
            _require_stopped(c, "reset")
            self._in_target(c, None)
            self._offsets.reset(name)
        return {"message": "The offsets for this connector have been reset successfully"}

    def _in_target(self, c: HerdedConnector, changes: dict[str, Any] | None) -> None:
        """Exactly-once: the change where the pairs resume (see the module's text)."""
        if self._validation is None or c.config.get("exactly.once.support", "disabled").strip() == "disabled":
            return
        v = self._validation
        resolved, _, secrets = v.resolve(dict(c.config))
        v.redactor.add(secrets)
        pipeline = parse_pipeline({"name": c.name, "config": resolved}, client_policy=v.client_policy)
        v.redactor.add(pipeline.secret_values())
        sink = {k: val for k, val in pipeline.sink_config.items() if k != "connector.class"}
        try:
            pipeline.sink_class.alter_target_offsets(sink, c.name, changes, pipeline.settings.tasks_max)
        except Exception as exc:  # noqa: BLE001 - the answer says why; the store keeps its offsets
            if pipeline.settings.runner.exactly_once == "requested" and isinstance(exc, TransactionsUnavailableError):
                return  # its pairs fall back to at-least-once: they resume from the worker's store
            raise OffsetsNotChanged(f"The offsets of {c.name} were not changed: its pairs resume from the offsets "
                                    f"in the target (exactly.once.support), which could not be written: {exc}") from None


def _require_stopped(c: HerdedConnector, what: str) -> None:
    if c.target != STOPPED or c.runtime is not None or (c.thread is not None and c.state != STOPPED):
        raise StateConflict(f"Connectors must be in the STOPPED state before their offsets can be {what}; "
                            f"{c.name} is {c.state} (PUT /connectors/{c.name}/stop first)")
