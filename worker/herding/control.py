"""The herder's answers on the control channel (:mod:`worker.runtime.control`): task pairs ask
whether to end their epoch, for their committed offsets, and which of them are still wanted."""

from __future__ import annotations

from typing import Any

from connect.errors import ConnectError
from worker.herding.registry import Registry
from worker.runtime.control import ControlServer
from worker.runtime.driver import unwanted_pairs

__all__ = ["ControlHandlers"]


class ControlHandlers:
    def __init__(self, registry: Registry):
        self._registry = registry

    def register(self, control: ControlServer) -> None:
        control.register("stop", self.stop)
        control.register("stops", self.stops)
        control.register("offsets", self.offsets)
        control.register("wanted", self.wanted)

    def stop(self, request: dict) -> bool:
        """Whether the pairs of ``request["connector"]`` should end their epoch now."""
        if self._registry.stopping.is_set():
            return True
        name = request.get("connector")
        if name is None:
            return False
        c = self._registry.connectors.get(name)
        return c is None or c.change_pending()

    def stops(self, request: dict) -> list[str]:
        """Of the connectors named, those whose pairs should end their epoch now (``stop``)."""
        return [name for name in request.get("connectors", ()) if self.stop({"connector": name})]

    def offsets(self, request: dict) -> dict[str, Any]:
        name = request.get("connector", "")
        rt = self._registry.runtime_of(name, retiring=True)  # deleted, its last epoch running: its own runtime
        if rt is None:  # never answer "no offsets" for a connector we cannot see: the task would start afresh
            raise ConnectError(f"connector {name} is not running here; its task pairs must not start")
        return rt.committed_offsets(request.get("keys", []))

    def wanted(self, request: dict) -> list[list]:
        return unwanted_pairs(request.get("pairs", []), self._registry.runtime_of)
