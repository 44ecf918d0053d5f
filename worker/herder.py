"""The herder of a long-lived worker: connectors submitted at run time, their target states and epochs.

``connect run`` runs a fixed set of connectors (:class:`worker.runtime.driver.Driver`); the worker service
(``connect worker start``) runs this instead. One Spark application serves every connector; each
connector has its own thread and stream of epochs (its own scheduler pool), so submitting,
changing, pausing or deleting one never restarts Spark or touches the others, and one connector's
failure never stops another.

Target states, as in Kafka Connect: RUNNING, PAUSED (no epochs; the task pairs' runners stay
cached, in flight records are committed at the next epoch) and STOPPED (connector and task pairs
shut down; offsets can then be altered or reset). Changes take effect within one epoch: the
running epoch of the connector is asked to end at once (the task pairs' stop flag), it drains
and commits, and the loop applies the change.

Every change is written to the stores first (configs, target states), so a worker restarted after
``kill -9`` resumes every connector in its last target state, from its committed offsets.
Connector configs are stored as submitted: provider references (``${file:...}``, ``${env:...}``,
keystore plugins) are resolved only when the connector starts, in this process, and values that
came from providers are masked wherever a config is shown.

Generations: a connector's task pairs are rebuilt (from the committed offsets) whenever its
config changes, it is restarted, or it comes back from STOPPED (its offsets may have been
altered); a pause/resume keeps them.

The herder is a facade over its parts (:mod:`worker.herding`): the registry of connectors and
their validation, each connector's loop, status publishing, offsets and the control channel's
answers. It holds the operations that change connectors: each writes the store, then memory.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any, Callable, Mapping

from connect.clientpolicy import DEFAULT_POLICY, ClientConfigPolicy
from connect.errors import ConfigIssue, ConnectError
from connect.secrets import Redactor
from connect.tasks.results import FAILED, RUNNING
from worker.herding.bodies import strings
from worker.herding.control import ControlHandlers
from worker.herding.gaps import ConnectorGaps
from worker.herding.loop import ConnectorLoops
from worker.herding.model import (
    PAUSED,
    RESTARTING,
    STOPPED,
    UNASSIGNED,
    BadRequest,
    ConnectorExists,
    ConnectorNotFound,
    HerdedConnector,
    Resolver,
    StateConflict,
    no_providers,
)
from worker.herding.offsets import ConnectorOffsets
from worker.herding.registry import Registry
from worker.herding.status import StatusBoard
from worker.herding.validation import Validation
from worker.herding.views import ConfigViews
from worker.pipeline import PipelineConfig, check_connector_name
from worker.replication.topology import topologies
from worker.runtime.control import ControlServer
from worker.runtime.driver import Executor, close_executor, wait_out_bridges
from worker.stores.store import TARGET_STATES, Stores
from worker.telemetry.topics import ActiveTopics

__all__ = ["Herder", "ConnectorNotFound", "ConnectorExists", "StateConflict", "BadRequest", "PAUSED", "STOPPED",
           "UNASSIGNED", "RESTARTING", "RUNNING", "FAILED"]

log = logging.getLogger(__name__)


class Herder:
    def __init__(self, executor: Executor, stores: Stores, *, worker_id: str, resolver: Resolver | None = None,
                 metrics: Any = None, control_host: str = "127.0.0.1", idle_wait: float = 1.0,
                 client_policy: ClientConfigPolicy = DEFAULT_POLICY, control_tls: bool = False):
        self.executor = executor
        self.client_policy = client_policy
        self.stores = stores
        self.worker_id = worker_id
        self.metrics = metrics
        self.run_id = uuid.uuid4().hex
        self.started = threading.Event()
        self.redactor = Redactor()
        self.active_topics = ActiveTopics()  # KIP-558's GET /connectors/{name}/topics
        self.registry = Registry()
        self._validation = Validation(resolver or no_providers, client_policy, self.redactor)
        self._board = StatusBoard(self.registry, stores.statuses, executor, worker_id=worker_id,
                                  redactor=self.redactor, metrics=metrics, active_topics=self.active_topics)
        self._loops = ConnectorLoops(self.registry, self._board, self._validation, stores, executor,
                                     metrics=metrics, run_id=self.run_id, idle_wait=idle_wait)
        self._views = ConfigViews(self.registry, self.redactor)
        self._offsets = ConnectorOffsets(self.registry, stores.offsets, self._validation)
        self._gaps = ConnectorGaps(self.registry, stores.offsets,
                                   lambda name: self.restart(name, include_tasks=True, only_failed=True))
        self.control = ControlServer(control_host, tls=control_tls)  # TLS on a cluster: specs carry credentials
        ControlHandlers(self.registry).register(self.control)
        executor.attach(self.control)

    # -- lifecycle of the herder -----------------------------------------------------------------
    def start(self) -> None:
        """Resume every stored connector in its stored target state."""
        reg = self.registry
        with reg.mutate:
            resumed = []
            for stored in self.stores.configs.connectors().values():
                state = stored.target_state if stored.target_state in TARGET_STATES else RUNNING
                if stored.name not in reg.connectors:
                    c = HerdedConnector(stored.name, dict(stored.config), state, 0)
                    c.flow = self._validation.flow(stored.name, c.config)
                    resumed.append(c)
            with reg.lock:  # every flow known before any starts: they take one path each from the first epoch
                reg.topologies = topologies({**{n: c.flow for n, c in reg.connectors.items()},
                                             **{c.name: c.flow for c in resumed}})
                for c in resumed:
                    self._loops.launch(c)
            self.started.set()

    def close(self, timeout: float = 30.0) -> None:
        """Stop every connector (their running epochs end, drain and commit), then the control channel."""
        self.registry.stopping.set()
        with self.registry.lock:
            connectors = list(self.registry.connectors.values())
        for c in connectors:
            c.wake.set()
        deadline = time.monotonic() + timeout
        for c in connectors:
            if c.thread is not None:
                c.thread.join(max(deadline - time.monotonic(), 0.1))
        wait_out_bridges([c.runtime for c in connectors if c.runtime is not None])
        close_executor(self.executor)
        self.control.close()

    # -- validation ------------------------------------------------------------------------------
    def validate(self, name: Any, config: Any, *, path: str = "$.config") -> PipelineConfig:
        """See :meth:`worker.herding.validation.Validation.validate`."""
        return self._validation.validate(name, config, path=path)

    def config_issues(self, config: Mapping[str, str], check: Callable[[dict[str, str]], list[ConfigIssue]]
                      ) -> list[ConfigIssue]:
        """See :meth:`worker.herding.validation.Validation.config_issues`."""
        return self._validation.config_issues(config, check)

    # -- connector operations --------------------------------------------------------------------
    def connector_names(self) -> list[str]:
        return self.registry.names()

    def create(self, name: Any, config: Any, initial_state: str = RUNNING) -> dict[str, Any]:
        if problem := check_connector_name(name):
            raise BadRequest(f"$.name: {problem}")
        if initial_state not in TARGET_STATES:
            raise BadRequest(f"$.initial_state: must be one of {', '.join(TARGET_STATES)}, not {initial_state!r}")
        config = strings(config, "$.config")
        config.pop("name", None)
        pipeline = self.validate(name, config)
        with self.registry.mutate:
            self._create(name, config, initial_state, self._validation.flow_of(pipeline))
        log.info("connector %s created (%s)", name, initial_state)
        return self.info(name)

    def _create(self, name: str, config: dict[str, Any], initial_state: str, flow) -> None:
        """Store, then launch (the caller holds ``mutate`` and validated ``config``)."""
        reg = self.registry
        self._loops.await_retired(name)
        if name in reg.connectors:
            raise ConnectorExists(f"Connector {name} already exists")
        self.stores.configs.put(name, config, initial_state)
        c = HerdedConnector(name, config, initial_state, 0)
        c.flow = flow
        with reg.lock:
            reg.connectors[name] = c
            reg.retopologize()
            self._loops.launch(c)

    def put_config(self, name: str, config: Any) -> tuple[bool, dict[str, Any]]:
        """Create or update; True when it was created."""
        config = strings(config, "$")
        given = config.pop("name", name)
        if given != name:
            raise BadRequest(f"$.name: the config names connector {given!r} but the path names {name!r}")
        with self.registry.mutate:
            created = name not in self.registry.connectors
            if created:
                if problem := check_connector_name(name):
                    raise BadRequest(f"$.name: {problem}")
                flow = self._validation.flow_of(self.validate(name, config, path="$"))
                self._create(name, config, RUNNING, flow)
            else:
                self._update(name, config)
        log.info("connector %s %s", name, "created" if created else "reconfigured")
        return created, self.info(name)

    def _update(self, name: str, config: dict[str, Any]) -> None:
        """Validate, store, then apply a new config of an existing connector (the caller holds ``mutate``)."""
        reg = self.registry
        c = reg.get(name)
        flow = self._validation.flow_of(self.validate(name, config, path="$"))
        self.stores.configs.put(name, config)
        with reg.lock:
            reg.warn_withdrawal(c, "reconfigured", flow)
            c.config = config
            c.flow = flow
            c.rebuild = True
            c.wake.set()
            reg.retopologize()
        self._loops.relaunch_if_dead(c)

    def patch_config(self, name: str, patch: Any) -> dict[str, Any]:
        """Kafka Connect's PATCH: keys given replace, keys given as null are removed."""
        if not isinstance(patch, dict):
            raise BadRequest("$: must be an object of config keys to string values (null removes a key)")
        with self.registry.mutate:  # read, merge and write as one: concurrent patches never lose keys
            merged = dict(self.registry.get(name).config)
            removed = [key for key, value in patch.items() if value is None]
            merged.update(strings({k: v for k, v in patch.items() if v is not None}, "$"))
            for key in removed:
                merged.pop(key, None)
            merged.pop("name", None)
            self._update(name, merged)
        return self.info(name)

    def delete(self, name: str) -> None:
        """Forget the connector (its committed offsets are kept); its thread ends its epoch (which
        commits) and stops it in the background. A connector created again under that name waits
        for that first."""
        reg = self.registry
        with reg.mutate:
            c = reg.get(name)
            self.stores.configs.delete(name)  # the store first: a failed delete leaves the connector as it was
            with reg.lock:
                reg.warn_withdrawal(c, "deleted", None)
                del reg.connectors[name]
                c.removed = True
                c.wake.set()
                reg.retiring[name] = c
                reg.retopologize()
            try:
                self.stores.statuses.delete(name)
            except ConnectError as exc:
                log.warning("connector %s deleted; its status rows stay in the store: %s", name, exc)
        if self.metrics is not None:
            self.metrics.remove(name)
        self.active_topics.reset(name)
        log.info("connector %s deleted", name)

    def set_target(self, name: str, state: str) -> None:
        with self.registry.mutate:
            c = self.registry.get(name)
            if c.target == state:
                return
            self.stores.configs.put_target_state(name, state)
            with self.registry.lock:
                if c.target == STOPPED:
                    c.starts += 1  # offsets may have changed while stopped: fresh task pairs
                c.target = state
                c.wake.set()
            self._loops.relaunch_if_dead(c)
        log.info("connector %s: target state %s", name, state)

    def restart(self, name: str, include_tasks: bool = False, only_failed: bool = False) -> dict[str, Any] | None:
        """Kafka Connect's restart (KIP-745); the status with RESTARTING instances, or None when only the
        connector was asked for (204)."""
        with self.registry.lock:
            c = self.registry.get(name)
            rt = c.runtime
            restart_connector = not only_failed or c.state == FAILED
            tasks = []
            if include_tasks and rt is not None:
                tasks = [t.task for t in rt.tasks if not only_failed or t.state == FAILED]
            if restart_connector:
                c.rebuild = True
                if c.state == FAILED:
                    c.trace = None
            c.restart_tasks.update(tasks)
            c.wake.set()
            self._loops.relaunch_if_dead(c)
            if not include_tasks and not only_failed:
                return None
            status = self.status(name)
            if restart_connector:
                status["connector"]["state"] = RESTARTING
            for t in status["tasks"]:
                if t["id"] in tasks or restart_connector:
                    t["state"] = RESTARTING
            return status

    def restart_task(self, name: str, task: int) -> None:
        with self.registry.lock:
            c = self.registry.get(name)
            if c.runtime is None or not 0 <= task < len(c.runtime.tasks):
                raise ConnectorNotFound(f"Task {name}-{task} not found")
            c.restart_tasks.add(task)
            c.wake.set()

    # -- views (worker.herding.views, worker.herding.status) -----------------------------------------
    def info(self, name: str) -> dict[str, Any]:
        return self._views.info(name)

    def side_configs(self, name: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
        return self._views.side_configs(name)

    def task_configs(self, name: str) -> list[dict[str, Any]]:
        return self._views.task_configs(name)

    def status(self, name: str) -> dict[str, Any]:
        return self._board.status(name)

    def task_status(self, name: str, task: int) -> dict[str, Any]:
        return self._board.task_status(name, task)

    # -- offsets (worker.herding.offsets) --------------------------------------------------------
    def offsets(self, name: str) -> dict[str, Any]:
        return self._offsets.offsets(name)

    def alter_offsets(self, name: str, body: Any) -> dict[str, str]:
        return self._offsets.alter(name, body)

    def reset_offsets(self, name: str) -> dict[str, str]:
        return self._offsets.reset(name)

    # -- source gaps (worker.herding.gaps) -------------------------------------------------------
    def gaps(self, name: str) -> dict[str, Any]:
        return self._gaps.gaps(name)

    def acknowledge_gaps(self, name: str, body: Any) -> dict[str, Any]:
        return self._gaps.acknowledge(name, body)
