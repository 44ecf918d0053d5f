"""Each connector's thread: apply what changed (config, target state, restarts, topology), then
run an epoch of its task pairs or wait. A connector's failure never ends another's thread, and a
bug in one step of the loop does not end its own: it is reported FAILED and the loop goes on."""

from __future__ import annotations

import logging
import threading
import traceback
from typing import Any

import attrs

from connect.tasks.results import FAILED, RUNNING
from worker.herding.model import PAUSED, RESTARTING, STOPPED, HerdedConnector, StateConflict
from worker.herding.probes import wait_measuring_lag, wait_measuring_stopped_lag
from worker.herding.registry import Registry
from worker.herding.status import StatusBoard
from worker.herding.validation import Validation
from worker.pipeline import parse_pipeline
from worker.replication.topology import with_topology
from worker.runtime.driver import Executor, PipelineRuntime, connector_turn
from worker.stores.store import Stores

__all__ = ["ConnectorLoops"]

log = logging.getLogger("worker.herder")


class ConnectorLoops:
    def __init__(self, registry: Registry, board: StatusBoard, validation: Validation, stores: Stores,
                 executor: Executor, *, metrics: Any, run_id: str, idle_wait: float):
        self._registry = registry
        self._board = board
        self._validation = validation
        self._stores = stores
        self._executor = executor
        self._metrics = metrics
        self._run_id = run_id
        self._idle_wait = idle_wait

    # -- threads ---------------------------------------------------------------------------------
    def launch(self, c: HerdedConnector) -> None:
        """Register ``c`` and start its thread (the caller holds the registry's ``lock``)."""
        self._registry.connectors[c.name] = c
        c.thread = threading.Thread(target=self._loop, args=(c,), name=f"connector-{c.name}", daemon=True)
        c.thread.start()

    def relaunch_if_dead(self, c: HerdedConnector) -> None:
        """A connector whose thread ended by a bug gets a new one (so restart, resume, update work)."""
        if c.thread is not None and not c.thread.is_alive() and not c.removed and not self._registry.stopping.is_set():
            log.warning("connector %s: its thread had ended; starting a new one", c.name)
            with self._registry.lock:
                self.launch(c)

    def await_retired(self, name: str) -> None:
        """Wait for the thread of a deleted connector of that name to end its last epoch."""
        c = self._registry.retiring.get(name)
        if c is not None and c.thread is not None:
            c.thread.join(self.stop_timeout(c))
            if c.thread.is_alive():
                raise StateConflict(f"Connector {name} was deleted and is still stopping; try again shortly")

    @staticmethod
    def stop_timeout(c: HerdedConnector) -> float:
        rt = c.runtime
        if rt is None:
            return 10.0
        p = rt.settings.runner
        return (p.epoch_max_ms + p.epoch_grace_ms) / 1000 + 10.0

    # -- the loop --------------------------------------------------------------------------------
    def _loop(self, c: HerdedConnector) -> None:
        redact = self._validation.redactor.redact
        try:
            while not self._registry.stopping.is_set() and not c.removed:
                fenced = self._stores.fenced  # another worker took the stores over
                if fenced:  # no write can succeed: epochs would copy the same records again and again
                    log.error("connector %s stops: %s", c.name, fenced)
                    c.state, c.trace = FAILED, fenced
                    break
                c.wake.clear()
                try:
                    self._step(c)
                except Exception as exc:  # noqa: BLE001 - a bug in one step must not end the connector
                    log.exception("connector %s: error in its loop; trying again", c.name)
                    self._board.set_state(c, FAILED, redact("".join(traceback.format_exception(exc))))
                    c.wake.wait(5.0)
        finally:
            try:
                self._stop_runtime(c)
            except Exception as exc:  # noqa: BLE001
                log.warning("connector %s: stopping: %s", c.name, exc)
            with self._registry.lock:
                if self._registry.retiring.get(c.name) is c:
                    del self._registry.retiring[c.name]
            if c.removed and self._metrics is not None:
                self._metrics.remove(c.name)  # an epoch that ended after the delete may have reported

    def _step(self, c: HerdedConnector) -> None:
        """One turn of a connector's loop: apply what changed, then run an epoch or wait."""
        board, v = self._board, self._validation
        if c.rebuild:
            with self._registry.lock:
                c.rebuild = False
                c.starts += 1
            self._stop_runtime(c)
            board.set_state(c, RESTARTING)
        if c.target == STOPPED:
            self._stop_runtime(c)
            board.set_state(c, STOPPED)
            wait_measuring_stopped_lag(c, self._registry.lock, v.resolve, v.redactor, v.client_policy,
                                       self._stores.offsets)
            return
        if c.runtime is None:
            # Leaving STOPPED (or starting): not STOPPED any more, so offsets cannot be altered
            # while the runtime reads them; the target is checked again before any epoch runs.
            board.set_state(c, RESTARTING if c.state == STOPPED else c.state)
            try:
                self._start_runtime(c)
            except Exception as exc:  # noqa: BLE001 - a connector that cannot start is FAILED
                board.set_state(c, FAILED, v.redactor.redact("".join(traceback.format_exception(exc))))
                log.error("connector %s failed to start: %s", c.name, v.redactor.redact(str(exc)))
                c.wake.wait(30.0)  # until restarted or reconfigured (or try again later)
                if not c.wake.is_set():
                    c.rebuild = True
            return
        self._apply_restarts(c)
        if c.target == PAUSED:
            board.set_state(c, PAUSED)
            board.publish_tasks(c)
            wait_measuring_lag(c, self._metrics)
            return
        board.set_state(c, RUNNING)
        if not connector_turn(c.runtime, self._executor, lambda done: board.report(c, done), c.wake.wait,
                              self._idle_wait):
            wait_measuring_lag(c, self._metrics)  # every task pair FAILED for good: until a restart or a new config

    def _start_runtime(self, c: HerdedConnector) -> None:
        v = self._validation
        with self._registry.lock:
            config = dict(c.config)
        resolved, provided, secrets = v.resolve(config)
        v.redactor.add(secrets)
        pipeline = parse_pipeline({"name": c.name, "config": resolved}, client_policy=v.client_policy)
        pipeline = attrs.evolve(pipeline, provided_values=frozenset(secrets))
        v.redactor.add(pipeline.secret_values())
        with self._registry.lock:  # read with the lock retopologize holds: a change after this rebuilds it
            c.topology = self._registry.topologies.get(c.name)
        pipeline = with_topology(pipeline, c.topology)
        runtime = PipelineRuntime(pipeline, self._stores.offsets, f"{self._run_id}/{c.incarnation}/{c.starts}")
        with self._registry.lock:
            c.provided_keys, c.secret_values = provided, secrets
            c.runtime = runtime

    @staticmethod
    def _stop_runtime(c: HerdedConnector) -> None:
        rt, c.runtime = c.runtime, None
        if rt is not None:
            rt.stop()

    def _apply_restarts(self, c: HerdedConnector) -> None:
        rt = c.runtime
        with self._registry.lock:
            tasks, c.restart_tasks = c.restart_tasks, set()
        for t in rt.tasks if rt is not None else []:
            if t.task in tasks:
                log.info("connector %s: restarting task pair %d", c.name, t.task)
                t.state, t.trace, t.failures, t.restart_at = RUNNING, None, 0, None
                t.prev_epoch = None  # its cached runner is rebuilt from the committed offsets
