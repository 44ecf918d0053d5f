"""The connectors a worker herds, by name, with the locks that guard them and the replication
topology each flow's runtime must run with (``worker.replication.topology``)."""

from __future__ import annotations

import logging
import threading
from typing import Any

from worker.herding.model import UNSET, ConnectorNotFound, HerdedConnector
from worker.replication.topology import topologies, withdrawal
from worker.runtime.driver import PipelineRuntime

__all__ = ["Registry"]

log = logging.getLogger("worker.herder")


class Registry:
    """``lock`` guards memory only (held briefly, never across store I/O); ``mutate`` serialises
    the operations that change connectors (the store first, then memory)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.mutate = threading.Lock()
        self.connectors: dict[str, HerdedConnector] = {}
        self.retiring: dict[str, HerdedConnector] = {}  # deleted, their threads still ending their epoch
        self.topologies: dict[str, Any] = {}  # connector -> the topology of its replication flow
        self.stopping = threading.Event()

    def get(self, name: str) -> HerdedConnector:
        c = self.connectors.get(name)
        if c is None:
            raise ConnectorNotFound(f"Connector {name} not found")
        return c

    def names(self) -> list[str]:
        with self.lock:
            return sorted(self.connectors)

    def runtime_of(self, name: str, *, retiring: bool = False) -> PipelineRuntime | None:
        """The running pipeline of connector ``name``; with ``retiring``, also that of a deleted
        connector whose last epoch is still running."""
        c = self.connectors.get(name)
        rt = c.runtime if c is not None else None
        if rt is None and retiring:
            gone = self.retiring.get(name)
            rt = gone.runtime if gone is not None else None
        return rt

    def retopologize(self) -> None:
        """The flows changed (one created, changed or deleted): a connector running with another
        topology than its group's now is rebuilt (its pairs restart from their committed offsets).
        The caller holds ``lock``."""
        self.topologies = tops = topologies({n: c.flow for n, c in self.connectors.items()})
        for c in self.connectors.values():
            if c.topology is not UNSET and tops.get(c.name) != c.topology:
                log.info("connector %s: its replication topology changed; restarting its task pairs", c.name)
                c.topology = UNSET
                c.rebuild = True
                c.wake.set()

    def warn_withdrawal(self, c: HerdedConnector, verb: str, new) -> None:
        """Before connector ``c`` is deleted or changed (its flow becoming ``new``): when other flows
        left records to it that it no longer carries, say which targets may miss what it had not
        delivered yet (``worker.replication.topology.withdrawal``). The caller holds ``lock``."""
        gone = withdrawal({n: x.flow for n, x in self.connectors.items()}, c.name, new)
        if gone is None:
            return
        rt = c.runtime
        behind = rt.lag.of() if rt is not None else c.stopped_lag.of()
        lag = "unknown" if behind is None else f"{behind[0]} record(s), {behind[1]:.0f} s behind"
        level = logging.INFO if behind is not None and behind[0] == 0 else logging.WARNING
        log.log(level, "connector %s %s while other flows leave records of %s to it (its lag: %s): records it has "
                "not delivered yet, and those in transit until %s restart with the new topology, %s %s; "
                "to copy them again, set the offsets of %s back (README: one path per record)",
                c.name, verb, ", ".join(gone.topics), lag, ", ".join(gone.flows),
                "do not reach" if verb == "deleted" else "may not reach", ", ".join(gone.targets),
                ", ".join(gone.flows))
