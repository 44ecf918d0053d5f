"""What a connector and its task pairs are doing, as ``GET /connectors/{name}/status`` shows it,
written to the status store and the metrics when it changes. Traces and reasons are shown masked."""

from __future__ import annotations

import logging
from typing import Any

from connect.secrets import Redactor
from connect.tasks.results import FAILED, RUNNING, EpochResult
from worker.herding.model import PAUSED, UNASSIGNED, ConnectorNotFound, HerdedConnector
from worker.herding.registry import Registry
from worker.runtime.driver import Executor
from worker.runtime.gapledger import gap_totals, gaps_view
from worker.stores.store import StatusBackend, StoredStatus
from worker.telemetry.topics import ActiveTopics

__all__ = ["StatusBoard"]

log = logging.getLogger("worker.herder")


class StatusBoard:
    def __init__(self, registry: Registry, statuses: StatusBackend, executor: Executor, *, worker_id: str,
                 redactor: Redactor, metrics: Any, active_topics: ActiveTopics):
        self._registry = registry
        self._statuses = statuses
        self._executor = executor
        self._worker_id = worker_id
        self._redactor = redactor
        self._metrics = metrics
        self._active_topics = active_topics

    # -- views -----------------------------------------------------------------------------------
    def status(self, name: str) -> dict[str, Any]:
        redact = self._redactor.redact
        with self._registry.lock:
            c = self._registry.get(name)
            connector: dict[str, Any] = {"state": c.state, "worker_id": self._worker_id}
            if c.trace and c.state == FAILED:
                connector["trace"] = redact(c.trace)
            if c.runtime is not None and (waiting := c.runtime.waiting()):  # no task pair: say why
                connector["waiting"] = redact(waiting)
            slot_wait = getattr(self._executor, "slot_waits", dict)().get(name)
            if slot_wait is not None:  # its epoch waits for free task slots (worker.pair.hosting=job)
                connector["slot_wait_s"] = round(slot_wait, 1)
            behind = c.runtime.lag.of() if c.runtime is not None else c.stopped_lag.of()
            if behind is not None:  # left to deliver, from the committed offsets (worker.telemetry.lag)
                connector["lag"] = {"records": behind[0], "seconds": round(behind[1], 1)}
            tasks = [self.task_entry(c, t) for t in c.runtime.tasks] if c.runtime is not None else []
            gaps = gaps_view(c.runtime.stored_offsets()) if c.runtime is not None else []
            if gaps:  # records the source dropped before they were copied (worker.runtime.gapledger)
                connector["gaps"] = {"open": sum(1 for g in gaps if g["open"]),
                                     "records": sum(g["records"] or 0 for g in gaps), "list": gaps[-20:]}
            return {"name": name, "connector": connector, "tasks": tasks, "type": "source"}

    def task_status(self, name: str, task: int) -> dict[str, Any]:
        for t in self.status(name)["tasks"]:
            if t["id"] == task:
                return t
        raise ConnectorNotFound(f"Task {name}-{task} not found")

    def task_entry(self, c: HerdedConnector, t) -> dict[str, Any]:
        state = t.state
        if state == RUNNING and c.state == PAUSED:
            state = PAUSED
        elif state == RUNNING and t.last is None:
            state = UNASSIGNED if c.state != RUNNING else RUNNING
        entry: dict[str, Any] = {"id": t.task, "state": state, "worker_id": self._worker_id}
        if state == FAILED and t.trace:
            entry["trace"] = self._redactor.redact(t.trace)
        entry["records"] = {"moved": t.moved, "acknowledged": t.acknowledged, "committed": t.committed}
        behind = c.runtime.task_lag(t) if c.runtime is not None else None
        if behind is not None:
            entry["lag"] = {"records": behind[0], "seconds": round(behind[1], 1)}
        if t.last is not None:
            entry["executor"] = f"{t.last.host}/{t.last.pid}"
            if t.last.stats.get("delivery"):  # exactly-once, or at-least-once and why (exactly.once.support)
                entry["delivery"] = t.last.stats["delivery"]
            if t.last.metrics:
                entry["metrics"] = dict(t.last.metrics)
            retrying = t.last.stats.get("retrying")
            if retrying and state == RUNNING:  # transient trouble the pair retries: what, why, for how long
                entry["retrying"] = [{**r, "reason": self._redactor.redact(r["reason"])} for r in retrying]
        return entry

    # -- publishing ------------------------------------------------------------------------------
    def set_state(self, c: HerdedConnector, state: str, trace: str | None = None) -> None:
        if c.state == state and c.trace == trace:
            return
        c.state, c.trace = state, trace
        if not c.removed:
            self.put(StoredStatus(c.name, None, state, self._worker_id, trace))
        if self._metrics is not None and not c.removed:
            self._metrics.connector_state(c.name, state)

    def put(self, status: StoredStatus) -> None:
        """Statuses are for viewers: a store that cannot take one must not stop the connector."""
        try:
            self._statuses.put(status)
        except Exception as exc:  # noqa: BLE001
            log.warning("connector %s: status not stored: %s", status.connector, exc)

    def report(self, c: HerdedConnector, results: list[EpochResult]) -> None:
        """An epoch of ``c`` ended with ``results``."""
        if not c.removed:  # a deleted connector's last epoch: its topics are forgotten
            self._active_topics.observe(c.name, results)
        if self._metrics is not None:
            for r in results:
                self._metrics.epoch(c.name, r)
            if c.runtime is not None:
                self._metrics.set_gaps(c.name, gap_totals(c.runtime.stored_offsets()))
        self.publish_tasks(c)

    def publish_tasks(self, c: HerdedConnector) -> None:
        rt = c.runtime
        if rt is None or c.removed:
            return
        for t in rt.tasks:
            entry = self.task_entry(c, t)
            key = (entry["state"], entry.get("trace"))
            if c.published.get(t.task) != key:
                c.published[t.task] = key
                self.put(StoredStatus(c.name, t.task, entry["state"], self._worker_id, entry.get("trace")))
                if self._metrics is not None:
                    self._metrics.task_state(c.name, t.task, entry["state"])
