"""What the herder knows of one connector, its states, and the errors its operations raise."""

from __future__ import annotations

import threading
import uuid
from typing import Any, Callable, Mapping

from connect.errors import ConnectError
from connect.tasks.results import RUNNING
from worker.runtime.driver import PipelineRuntime
from worker.telemetry.lag import CommittedLag

__all__ = ["PAUSED", "STOPPED", "UNASSIGNED", "RESTARTING", "UNSET", "ConnectorNotFound", "ConnectorExists",
           "StateConflict", "BadRequest", "Resolver", "no_providers", "HerdedConnector"]

PAUSED, STOPPED, UNASSIGNED, RESTARTING = "PAUSED", "STOPPED", "UNASSIGNED", "RESTARTING"
UNSET = object()


class ConnectorNotFound(ConnectError):
    """No connector (or task) of that name: 404."""


class ConnectorExists(ConnectError):
    """A connector of that name exists already: 409."""


class StateConflict(ConnectError):
    """The request does not fit the connector's state (e.g. altering offsets while RUNNING): 409."""


class BadRequest(ConnectError):
    """A malformed request body; the message names the JSON path: 400."""


Resolver = Callable[[Mapping[str, str]], tuple[dict[str, str], set[str], set[str]]]


def no_providers(config: Mapping[str, str]) -> tuple[dict[str, str], set[str], set[str]]:
    return dict(config), set(), set()


class HerdedConnector:
    """One submitted connector: what it should be (config, target) and what it is (runtime, state)."""

    def __init__(self, name: str, config: dict[str, str], target: str, starts: int):
        self.name = name
        self.incarnation = uuid.uuid4().hex[:8]  # a connector deleted and created again is another one
        self.config = config  # as submitted, references unresolved
        self.target = target
        self.starts = starts  # bumped when its task pairs must be rebuilt (new generation)
        self.runtime: PipelineRuntime | None = None
        self.state = UNASSIGNED
        self.trace: str | None = None
        self.secret_values: set[str] = set()
        self.provided_keys: set[str] = set()
        self.wake = threading.Event()
        self.thread: threading.Thread | None = None
        self.removed = False
        self.rebuild = False  # config changed or connector restart asked: new runtime at the next turn
        self.restart_tasks: set[int] = set()
        self.published: dict[int, tuple] = {}  # task -> (state, trace) last written to the status store
        self.stopped_lag = CommittedLag()  # measured while STOPPED (no runtime)
        self.flow = None  # (group, Flow) when it is a replication flow of a group (``worker.replication.topology``)
        self.topology: Any = UNSET  # the topology its runtime was started with

    def change_pending(self) -> bool:
        return self.removed or self.rebuild or self.target != RUNNING or bool(self.restart_tasks)
