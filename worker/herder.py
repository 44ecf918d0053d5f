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
"""

from __future__ import annotations

import logging
import math
import threading
import time
import traceback
import uuid
from typing import Any, Callable, Mapping

import attrs
import orjson

from connect.clientpolicy import DEFAULT_POLICY, ClientConfigPolicy
from connect.connector import ConnectorContext
from connect.errors import ConfigError, ConfigIssue, ConnectError
from connect.providers import mask_config
from connect.records import partition_key
from connect.secrets import MASK, Redactor, is_secret_name
from connect.tasks.results import FAILED, RUNNING, EpochResult
from worker.pipeline import PipelineConfig, _json_path, check_connector_name, hide_provided, parse_pipeline
from worker.replication.topology import flow_of, topologies, with_topology, withdrawal, withholds
from worker.runtime.control import ControlServer
from worker.runtime.driver import Executor, PipelineRuntime, close_executor, connector_turn, unwanted_pairs, wait_out_bridges
from worker.stores.store import TARGET_STATES, StoredStatus, Stores
from worker.telemetry.lag import REFRESH_S, CommittedLag
from worker.telemetry.topics import ActiveTopics

__all__ = ["Herder", "ConnectorNotFound", "ConnectorExists", "StateConflict", "BadRequest", "PAUSED", "STOPPED",
           "UNASSIGNED", "RESTARTING"]

log = logging.getLogger(__name__)

PAUSED, STOPPED, UNASSIGNED, RESTARTING = "PAUSED", "STOPPED", "UNASSIGNED", "RESTARTING"
_UNSET = object()


class ConnectorNotFound(ConnectError):
    """No connector (or task) of that name: 404."""


class ConnectorExists(ConnectError):
    """A connector of that name exists already: 409."""


class StateConflict(ConnectError):
    """The request does not fit the connector's state (e.g. altering offsets while RUNNING): 409."""


class BadRequest(ConnectError):
    """A malformed request body; the message names the JSON path: 400."""


Resolver = Callable[[Mapping[str, str]], tuple[dict[str, str], set[str], set[str]]]


def _no_providers(config: Mapping[str, str]) -> tuple[dict[str, str], set[str], set[str]]:
    return dict(config), set(), set()


class _Connector:
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
        self.topology: Any = _UNSET  # the topology its runtime was started with

    def change_pending(self) -> bool:
        return self.removed or self.rebuild or self.target != RUNNING or bool(self.restart_tasks)


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
        self._resolve = resolver or _no_providers
        self._idle_wait = idle_wait
        self._lock = threading.RLock()  # memory only: held briefly, never across store I/O
        self._mutate = threading.Lock()  # serialises the operations that change connectors (store, then memory)
        self._connectors: dict[str, _Connector] = {}
        self._retiring: dict[str, _Connector] = {}  # deleted, their threads still ending their epoch
        self._topologies: dict[str, Any] = {}  # connector -> the topology of its replication flow (worker.replication.topology)
        self._stopping = threading.Event()
        self.started = threading.Event()
        self.redactor = Redactor()
        self.active_topics = ActiveTopics()  # KIP-558's GET /connectors/{name}/topics
        self.control = ControlServer(control_host, tls=control_tls)  # TLS on a cluster: specs carry credentials
        self.control.register("stop", self._stop_request)
        self.control.register("stops", self._stops_request)
        self.control.register("offsets", self._offsets_request)
        self.control.register("wanted", self._wanted_request)
        executor.attach(self.control)

    # -- control channel ---------------------------------------------------------------------
    def _stop_request(self, request: dict) -> bool:
        if self._stopping.is_set():
            return True
        name = request.get("connector")
        if name is None:
            return False
        c = self._connectors.get(name)
        return c is None or c.change_pending()

    def _stops_request(self, request: dict) -> list[str]:
        """Of the connectors named, those whose pairs should end their epoch now (``_stop_request``)."""
        return [name for name in request.get("connectors", ()) if self._stop_request({"connector": name})]

    def _offsets_request(self, request: dict) -> dict[str, Any]:
        name = request.get("connector", "")
        c = self._connectors.get(name)
        rt = c.runtime if c is not None else None
        if rt is None:  # deleted, its last epoch still running: its own runtime answers
            retiring = self._retiring.get(name)
            rt = retiring.runtime if retiring is not None else None
        if rt is None:  # never answer "no offsets" for a connector we cannot see: the task would start afresh
            raise ConnectError(f"connector {name} is not running here; its task pairs must not start")
        return rt.committed_offsets(request.get("keys", []))

    def _wanted_request(self, request: dict) -> list[list]:
        def runtime_of(name: str) -> PipelineRuntime | None:
            c = self._connectors.get(name)
            return c.runtime if c is not None else None

        return unwanted_pairs(request.get("pairs", []), runtime_of)

    # -- lifecycle of the herder -----------------------------------------------------------------
    def start(self) -> None:
        """Resume every stored connector in its stored target state."""
        with self._mutate:
            resumed = []
            for stored in self.stores.configs.connectors().values():
                state = stored.target_state if stored.target_state in TARGET_STATES else RUNNING
                if stored.name not in self._connectors:
                    c = _Connector(stored.name, dict(stored.config), state, 0)
                    c.flow = self._flow(stored.name, c.config)
                    resumed.append(c)
            with self._lock:  # every flow known before any starts: they take one path each from the first epoch
                self._topologies = topologies({**{n: c.flow for n, c in self._connectors.items()},
                                               **{c.name: c.flow for c in resumed}})
                for c in resumed:
                    self._launch(c)
            self.started.set()

    def close(self, timeout: float = 30.0) -> None:
        """Stop every connector (their running epochs end, drain and commit), then the control channel."""
        self._stopping.set()
        with self._lock:
            connectors = list(self._connectors.values())
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
        """The parsed pipeline of a submitted config (provider references resolved to check it);
        raises ConfigError naming every problem by JSON path and rule. No issue carries a value of
        a key that holds a reference or a secret, and no text shows a value a provider returned."""
        if not isinstance(config, dict):
            raise BadRequest(f"{path}: must be an object of string keys to string values")
        parsed: list[PipelineConfig] = []

        def parse(resolved: dict[str, str]) -> list[ConfigIssue]:
            try:
                parsed.append(parse_pipeline({"name": name, "config": resolved}, client_policy=self.client_policy))
            except ConfigError as exc:
                return list(exc.issues)
            return []

        issues = self.config_issues(config, parse)
        if issues:
            raise ConfigError([ConfigIssue(_json_path(i.key, path), i.value, i.message) for i in issues])
        return parsed[0]

    def config_issues(self, config: Mapping[str, str], check: Callable[[dict[str, str]], list[ConfigIssue]]
                      ) -> list[ConfigIssue]:
        """What creating a connector with ``config`` would refuse, as ``check`` finds it in the config
        with its provider references resolved (fences included): the references that cannot be
        resolved, else ``check``'s issues. Issues are keyed by config key and fit for an answer (no
        value of a key that holds a reference or a secret, no provider value in any text). The one
        path of ``POST /connectors`` and ``PUT /connector-plugins/.../config/validate``."""
        try:
            resolved, provided, secret_values = self._resolve(config)
        except ConfigError as exc:
            return [ConfigIssue(_config_key(i.key), None, i.message) for i in exc.issues]
        return [ConfigIssue(_config_key(i.key), i.value, i.message)
                for i in hide_provided(check(resolved), config, resolved, provided, secret_values, None)]

    # -- connector operations --------------------------------------------------------------------
    def connector_names(self) -> list[str]:
        with self._lock:
            return sorted(self._connectors)

    def _get(self, name: str) -> _Connector:
        c = self._connectors.get(name)
        if c is None:
            raise ConnectorNotFound(f"Connector {name} not found")
        return c

    def create(self, name: Any, config: Any, initial_state: str = RUNNING) -> dict[str, Any]:
        if problem := check_connector_name(name):
            raise BadRequest(f"$.name: {problem}")
        if initial_state not in TARGET_STATES:
            raise BadRequest(f"$.initial_state: must be one of {', '.join(TARGET_STATES)}, not {initial_state!r}")
        config = _strings(config, "$.config")
        config.pop("name", None)
        pipeline = self.validate(name, config)
        with self._mutate:
            self._create(name, config, initial_state, self._flow_of(pipeline))
        log.info("connector %s created (%s)", name, initial_state)
        return self.info(name)

    def _create(self, name: str, config: dict[str, Any], initial_state: str, flow) -> None:
        """Store, then launch (the caller holds ``_mutate`` and validated ``config``)."""
        self._await_retired(name)
        if name in self._connectors:
            raise ConnectorExists(f"Connector {name} already exists")
        self.stores.configs.put(name, config, initial_state)
        c = _Connector(name, config, initial_state, 0)
        c.flow = flow
        with self._lock:
            self._connectors[name] = c
            self._retopologize()
            self._launch(c)

    def put_config(self, name: str, config: Any) -> tuple[bool, dict[str, Any]]:
        """Create or update; True when it was created."""
        config = _strings(config, "$")
        given = config.pop("name", name)
        if given != name:
            raise BadRequest(f"$.name: the config names connector {given!r} but the path names {name!r}")
        with self._mutate:
            created = name not in self._connectors
            if created:
                if problem := check_connector_name(name):
                    raise BadRequest(f"$.name: {problem}")
                self._create(name, config, RUNNING, self._flow_of(self.validate(name, config, path="$")))
            else:
                self._update(name, config)
        log.info("connector %s %s", name, "created" if created else "reconfigured")
        return created, self.info(name)

    def _update(self, name: str, config: dict[str, Any]) -> None:
        """Validate, store, then apply a new config of an existing connector (the caller holds ``_mutate``)."""
        c = self._get(name)
        flow = self._flow_of(self.validate(name, config, path="$"))
        self.stores.configs.put(name, config)
        with self._lock:
            self._warn_withdrawal(c, "reconfigured", flow)
            c.config = config
            c.flow = flow
            c.rebuild = True
            c.wake.set()
            self._retopologize()
        self._relaunch_if_dead(c)

    def patch_config(self, name: str, patch: Any) -> dict[str, Any]:
        """Kafka Connect's PATCH: keys given replace, keys given as null are removed."""
        if not isinstance(patch, dict):
            raise BadRequest("$: must be an object of config keys to string values (null removes a key)")
        with self._mutate:  # read, merge and write as one: concurrent patches never lose keys
            merged = dict(self._get(name).config)
            removed = [key for key, value in patch.items() if value is None]
            merged.update(_strings({k: v for k, v in patch.items() if v is not None}, "$"))
            for key in removed:
                merged.pop(key, None)
            merged.pop("name", None)
            self._update(name, merged)
        return self.info(name)

    def delete(self, name: str) -> None:
        """Forget the connector (its committed offsets are kept); its thread ends its epoch (which
        commits) and stops it in the background. A connector created again under that name waits
        for that first."""
        with self._mutate:
            c = self._get(name)
            self.stores.configs.delete(name)  # the store first: a failed delete leaves the connector as it was
            with self._lock:
                self._warn_withdrawal(c, "deleted", None)
                del self._connectors[name]
                c.removed = True
                c.wake.set()
                self._retiring[name] = c
                self._retopologize()
            try:
                self.stores.statuses.delete(name)
            except ConnectError as exc:
                log.warning("connector %s deleted; its status rows stay in the store: %s", name, exc)
        if self.metrics is not None:
            self.metrics.remove(name)
        self.active_topics.reset(name)
        log.info("connector %s deleted", name)

    def _await_retired(self, name: str) -> None:
        c = self._retiring.get(name)
        if c is not None and c.thread is not None:
            c.thread.join(self._stop_timeout(c))
            if c.thread.is_alive():
                raise StateConflict(f"Connector {name} was deleted and is still stopping; try again shortly")

    def set_target(self, name: str, state: str) -> None:
        with self._mutate:
            c = self._get(name)
            if c.target == state:
                return
            self.stores.configs.put_target_state(name, state)
            with self._lock:
                if c.target == STOPPED:
                    c.starts += 1  # offsets may have changed while stopped: fresh task pairs
                c.target = state
                c.wake.set()
            self._relaunch_if_dead(c)
        log.info("connector %s: target state %s", name, state)

    def _relaunch_if_dead(self, c: _Connector) -> None:
        """A connector whose thread ended by a bug gets a new one (so restart, resume, update work)."""
        if c.thread is not None and not c.thread.is_alive() and not c.removed and not self._stopping.is_set():
            log.warning("connector %s: its thread had ended; starting a new one", c.name)
            with self._lock:
                self._launch(c)

    def _flow(self, name: str, config: dict[str, str]):
        """What ``worker.replication.topology.flow_of`` says of a stored config; None when it does not parse now
        (then it is no edge of anyone's tree: the others keep delivering)."""
        try:
            return self._flow_of(self.validate(name, config))
        except ConfigError as exc:  # its issues are scrubbed by validate: no secret nor provided value shows
            log.warning("connector %s: not part of any replication topology: %s", name, self.redactor.redact(str(exc)))
        except Exception as exc:  # noqa: BLE001 - invalid now (e.g. a provider is away): it starts FAILED anyway
            # Not its text: this connector's secrets are not in the redactor before it starts, and
            # an unexpected error (a plugin's, a provider's) may quote resolved values.
            log.warning("connector %s: not part of any replication topology: its config did not parse (%s)",
                        name, type(exc).__name__)
        return None

    @staticmethod
    def _flow_of(pipeline: PipelineConfig):
        """``worker.replication.topology.flow_of``, saying why a replication flow is no edge of its group's tree."""
        flow = flow_of(pipeline)
        if flow is not None and not flow[1].edge:
            log.info("connector %s: no other flow leaves records to it (%s): the flows around it keep delivering "
                     "them", pipeline.name, withholds(pipeline) or "its topics are a pattern")
        return flow

    def _warn_withdrawal(self, c: _Connector, verb: str, new) -> None:
        """Before connector ``c`` is deleted or changed (its flow becoming ``new``): when other flows
        left records to it that it no longer carries, say which targets may miss what it had not
        delivered yet (``worker.replication.topology.withdrawal``). The caller holds ``_lock``."""
        gone = withdrawal({n: x.flow for n, x in self._connectors.items()}, c.name, new)
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

    def _retopologize(self) -> None:
        """The flows changed (one created, changed or deleted): a connector running with another
        topology than its group's now is rebuilt (its pairs restart from their committed offsets).
        The caller holds ``_lock``."""
        self._topologies = tops = topologies({n: c.flow for n, c in self._connectors.items()})
        for c in self._connectors.values():
            if c.topology is not _UNSET and tops.get(c.name) != c.topology:
                log.info("connector %s: its replication topology changed; restarting its task pairs", c.name)
                c.topology = _UNSET
                c.rebuild = True
                c.wake.set()

    def restart(self, name: str, include_tasks: bool = False, only_failed: bool = False) -> dict[str, Any] | None:
        """Kafka Connect's restart (KIP-745); the status with RESTARTING instances, or None when only the
        connector was asked for (204)."""
        with self._lock:
            c = self._get(name)
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
            self._relaunch_if_dead(c)
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
        with self._lock:
            c = self._get(name)
            if c.runtime is None or not 0 <= task < len(c.runtime.tasks):
                raise ConnectorNotFound(f"Task {name}-{task} not found")
            c.restart_tasks.add(task)
            c.wake.set()

    # -- views -----------------------------------------------------------------------------------
    def masked_config(self, c: _Connector) -> dict[str, str]:
        """The config as submitted, fit to show: references as written (secret keys show MASK around
        them), values of secret keys MASK (see :func:`connect.providers.mask_config`)."""
        declared = c.runtime.pipeline.secret_keys() if c.runtime is not None else set()
        return mask_config(c.config, declared)

    def info(self, name: str) -> dict[str, Any]:
        with self._lock:
            c = self._get(name)
            tasks = len(c.runtime.tasks) if c.runtime is not None else 0
            return {"name": name, "config": {**self.masked_config(c), "name": name},
                    "tasks": [{"connector": name, "task": i} for i in range(tasks)], "type": "source"}

    def side_configs(self, name: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """The (source, sink) configs its running pipeline resolved, or None without a runtime: for
        lookups in this process (the console asks a Kafka cluster for its id); never to be shown."""
        with self._lock:
            rt = self._get(name).runtime
            return None if rt is None else (dict(rt.pipeline.source_config), dict(rt.pipeline.sink_config))

    def task_configs(self, name: str) -> list[dict[str, Any]]:
        with self._lock:
            c = self._get(name)
            rt = c.runtime
            if rt is None:
                return []
            redact = self.redactor.redact
            out = []
            for t in rt.tasks:
                flat = {**{f"source.{k}": v for k, v in t.source_config.items()},
                        **{f"sink.{k}": v for k, v in t.sink_config.items()}}
                hidden = rt.pipeline.secret_keys() | c.provided_keys
                shown = {k: MASK if (k in hidden or is_secret_name(k)) else redact(str(v)) for k, v in flat.items()}
                out.append({"id": {"connector": name, "task": t.task}, "config": shown})
            return out

    def _task_status(self, c: _Connector, t) -> dict[str, Any]:
        state = t.state
        if state == RUNNING and c.state == PAUSED:
            state = PAUSED
        elif state == RUNNING and t.last is None:
            state = UNASSIGNED if c.state != RUNNING else RUNNING
        entry: dict[str, Any] = {"id": t.task, "state": state, "worker_id": self.worker_id}
        if state == FAILED and t.trace:
            entry["trace"] = self.redactor.redact(t.trace)
        entry["records"] = {"moved": t.moved, "acknowledged": t.acknowledged, "committed": t.committed}
        behind = c.runtime.task_lag(t) if c.runtime is not None else None
        if behind is not None:
            entry["lag"] = {"records": behind[0], "seconds": round(behind[1], 1)}
        if t.last is not None:
            entry["executor"] = f"{t.last.host}/{t.last.pid}"
            if t.last.metrics:
                entry["metrics"] = dict(t.last.metrics)
            retrying = t.last.stats.get("retrying")
            if retrying and state == RUNNING:  # transient trouble the pair retries: what, why, for how long
                entry["retrying"] = [{**r, "reason": self.redactor.redact(r["reason"])} for r in retrying]
        return entry

    def status(self, name: str) -> dict[str, Any]:
        with self._lock:
            c = self._get(name)
            connector: dict[str, Any] = {"state": c.state, "worker_id": self.worker_id}
            if c.trace and c.state == FAILED:
                connector["trace"] = self.redactor.redact(c.trace)
            if c.runtime is not None and (waiting := c.runtime.waiting()):  # no task pair: say why
                connector["waiting"] = self.redactor.redact(waiting)
            slot_wait = getattr(self.executor, "slot_waits", dict)().get(name)
            if slot_wait is not None:  # its epoch waits for free task slots (worker.pair.hosting=job)
                connector["slot_wait_s"] = round(slot_wait, 1)
            behind = c.runtime.lag.of() if c.runtime is not None else c.stopped_lag.of()
            if behind is not None:  # left to deliver, from the committed offsets (worker.telemetry.lag)
                connector["lag"] = {"records": behind[0], "seconds": round(behind[1], 1)}
            tasks = [self._task_status(c, t) for t in c.runtime.tasks] if c.runtime is not None else []
            return {"name": name, "connector": connector, "tasks": tasks, "type": "source"}

    def task_status(self, name: str, task: int) -> dict[str, Any]:
        for t in self.status(name)["tasks"]:
            if t["id"] == task:
                return t
        raise ConnectorNotFound(f"Task {name}-{task} not found")

    # -- offsets ---------------------------------------------------------------------------------
    def offsets(self, name: str) -> dict[str, Any]:
        self._get(name)
        stored = self.stores.offsets.load(name)
        return {"offsets": [{"partition": orjson.loads(key), "offset": value} for key, value in sorted(stored.items())]}

    def _require_stopped(self, c: _Connector, what: str) -> None:
        if c.target != STOPPED or c.runtime is not None or (c.thread is not None and c.state != STOPPED):
            raise StateConflict(f"Connectors must be in the STOPPED state before their offsets can be {what}; "
                                f"{c.name} is {c.state} (PUT /connectors/{c.name}/stop first)")

    def alter_offsets(self, name: str, body: Any) -> dict[str, str]:
        with self._mutate:
            c = self._get(name)
            self._require_stopped(c, "altered")
            changes = _offset_changes(body)
            self.stores.offsets.commit(name, changes)
        return {"message": "The offsets for this connector have been altered successfully"}

    def reset_offsets(self, name: str) -> dict[str, str]:
        with self._mutate:
            c = self._get(name)
            self._require_stopped(c, "reset")
            self.stores.offsets.reset(name)
        return {"message": "The offsets for this connector have been reset successfully"}

    # -- the connector's thread ------------------------------------------------------------------
    def _launch(self, c: _Connector) -> None:
        self._connectors[c.name] = c
        c.thread = threading.Thread(target=self._loop, args=(c,), name=f"connector-{c.name}", daemon=True)
        c.thread.start()

    def _stop_timeout(self, c: _Connector) -> float:
        rt = c.runtime
        if rt is None:
            return 10.0
        p = rt.settings.runner
        return (p.epoch_max_ms + p.epoch_grace_ms) / 1000 + 10.0

    def _set_state(self, c: _Connector, state: str, trace: str | None = None) -> None:
        if c.state == state and c.trace == trace:
            return
        c.state, c.trace = state, trace
        if not c.removed:
            self._put_status(StoredStatus(c.name, None, state, self.worker_id, trace))
        if self.metrics is not None and not c.removed:
            self.metrics.connector_state(c.name, state)

    def _put_status(self, status: StoredStatus) -> None:
        """Statuses are for viewers: a store that cannot take one must not stop the connector."""
        try:
            self.stores.statuses.put(status)
        except Exception as exc:  # noqa: BLE001
            log.warning("connector %s: status not stored: %s", status.connector, exc)

    def _start_runtime(self, c: _Connector) -> None:
        with self._lock:
            config = dict(c.config)
        resolved, provided, secrets = self._resolve(config)
        self.redactor.add(secrets)
        pipeline = parse_pipeline({"name": c.name, "config": resolved}, client_policy=self.client_policy)
        pipeline = attrs.evolve(pipeline, provided_values=frozenset(secrets))
        self.redactor.add(pipeline.secret_values())
        with self._lock:  # read with the lock _retopologize holds: a change after this rebuilds it
            c.topology = self._topologies.get(c.name)
        pipeline = with_topology(pipeline, c.topology)
        runtime = PipelineRuntime(pipeline, self.stores.offsets, f"{self.run_id}/{c.incarnation}/{c.starts}")
        with self._lock:
            c.provided_keys, c.secret_values = provided, secrets
            c.runtime = runtime

    def _stop_runtime(self, c: _Connector) -> None:
        rt, c.runtime = c.runtime, None
        if rt is not None:
            rt.stop()

    def _apply_restarts(self, c: _Connector) -> None:
        rt = c.runtime
        with self._lock:
            tasks, c.restart_tasks = c.restart_tasks, set()
        for t in rt.tasks if rt is not None else []:
            if t.task in tasks:
                log.info("connector %s: restarting task pair %d", c.name, t.task)
                t.state, t.trace, t.failures, t.restart_at = RUNNING, None, 0, None
                t.prev_epoch = None  # its cached runner is rebuilt from the committed offsets

    def _loop(self, c: _Connector) -> None:
        try:
            while not self._stopping.is_set() and not c.removed:
                fenced = getattr(self.stores, "fenced", None)  # KafkaStores: another worker took its topics over
                if fenced:  # no write can succeed: epochs would copy the same records again and again
                    log.error("connector %s stops: %s", c.name, fenced)
                    c.state, c.trace = FAILED, fenced
                    break
                c.wake.clear()
                try:
                    self._step(c)
                except Exception as exc:  # noqa: BLE001 - a bug in one step must not end the connector
                    log.exception("connector %s: error in its loop; trying again", c.name)
                    self._set_state(c, FAILED, self.redactor.redact("".join(traceback.format_exception(exc))))
                    c.wake.wait(5.0)
        finally:
            try:
                self._stop_runtime(c)
            except Exception as exc:  # noqa: BLE001
                log.warning("connector %s: stopping: %s", c.name, exc)
            with self._lock:
                if self._retiring.get(c.name) is c:
                    del self._retiring[c.name]
            if c.removed and self.metrics is not None:
                self.metrics.remove(c.name)  # an epoch that ended after the delete may have reported

    def _step(self, c: _Connector) -> None:
        """One turn of a connector's loop: apply what changed, then run an epoch or wait."""
        if c.rebuild:
            with self._lock:
                c.rebuild = False
                c.starts += 1
            self._stop_runtime(c)
            self._set_state(c, RESTARTING)
        if c.target == STOPPED:
            self._stop_runtime(c)
            self._set_state(c, STOPPED)
            self._idle_stopped(c)
            return
        if c.runtime is None:
            # Leaving STOPPED (or starting): not STOPPED any more, so offsets cannot be altered
            # while the runtime reads them; the target is checked again before any epoch runs.
            self._set_state(c, RESTARTING if c.state == STOPPED else c.state)
            try:
                self._start_runtime(c)
            except Exception as exc:  # noqa: BLE001 - a connector that cannot start is FAILED
                self._set_state(c, FAILED, self.redactor.redact("".join(traceback.format_exception(exc))))
                log.error("connector %s failed to start: %s", c.name, self.redactor.redact(str(exc)))
                c.wake.wait(30.0)  # until restarted or reconfigured (or try again later)
                if not c.wake.is_set():
                    c.rebuild = True
            return
        self._apply_restarts(c)
        if c.target == PAUSED:
            self._set_state(c, PAUSED)
            self._publish_tasks(c)
            self._idle(c)
            return
        self._set_state(c, RUNNING)
        self._turn(c)

    def _turn(self, c: _Connector) -> None:
        """One epoch of the connector (or a wait when no pair is due)."""
        if not connector_turn(c.runtime, self.executor, lambda done: self._report(c, done), c.wake.wait,
                              self._idle_wait):
            self._idle(c)  # every task pair FAILED for good: until a restart or a new config

    def _idle(self, c: _Connector) -> None:
        """Wait for a change; meanwhile keep the lag true (``worker.telemetry.lag``): records keep arriving
        while no pair runs, and they are what is left to deliver."""
        while True:
            rt = c.runtime
            if rt is not None:
                rt.lag.measured_at = 0.0
                rt.measure_lag()
                if self.metrics is not None and not c.removed:  # a deleted connector's series stay gone
                    for t in rt.tasks:
                        self.metrics.lag(c.name, t.task, rt.task_lag(t), rt.lag.partitions, tuple(t.partitions))
            if c.wake.wait(REFRESH_S):
                return

    def _idle_stopped(self, c: _Connector) -> None:
        """A STOPPED connector has no runtime: a source connector of its own measures its lag."""
        source = None
        masked = False  # until this connector's secrets are known, an error's text is not shown
        try:
            with self._lock:
                config = dict(c.config)
            resolved, _, secrets = self._resolve(config)
            self.redactor.add(secrets)
            masked = True
            pipeline = parse_pipeline({"name": c.name, "config": resolved}, client_policy=self.client_policy)
            source = pipeline.source_class()
            source.initialize(ConnectorContext(c.name))
            source.start({k: v for k, v in pipeline.source_config.items() if k != "connector.class"})
        except Exception as exc:  # noqa: BLE001 - lag is informational; the connector stays STOPPED
            log.info("connector %s: lag not measured while STOPPED: %s", c.name,
                     self.redactor.redact(str(exc)) if masked else type(exc).__name__)
            if source is not None:  # it may have opened clients before failing
                try:
                    source.stop()
                except Exception:  # noqa: BLE001
                    pass
            source = None
        try:
            while True:
                if source is not None:
                    c.stopped_lag.measure(source, self.stores.offsets.load(c.name))
                if c.wake.wait(REFRESH_S):
                    return
        finally:
            c.stopped_lag.known = False
            if source is not None:
                try:
                    source.stop()
                except Exception as exc:  # noqa: BLE001
                    log.debug("connector %s: lag probe: %s", c.name, exc)

    def _report(self, c: _Connector, results: list[EpochResult]) -> None:
        if not c.removed:  # a deleted connector's last epoch: its topics are forgotten
            self.active_topics.observe(c.name, results)
        if self.metrics is not None:
            for r in results:
                self.metrics.epoch(c.name, r)
        self._publish_tasks(c)

    def _publish_tasks(self, c: _Connector) -> None:
        rt = c.runtime
        if rt is None or c.removed:
            return
        for t in rt.tasks:
            entry = self._task_status(c, t)
            key = (entry["state"], entry.get("trace"))
            if c.published.get(t.task) != key:
                c.published[t.task] = key
                self._put_status(StoredStatus(c.name, t.task, entry["state"], self.worker_id, entry.get("trace")))
                if self.metrics is not None:
                    self.metrics.task_state(c.name, t.task, entry["state"])


def _strings(config: Any, path: str) -> dict[str, str]:
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


def _config_key(key: str) -> str:
    """``$.config["k"]`` as ``k``; other keys as they are."""
    return key[len('$.config["'):-2] if key.startswith('$.config["') and key.endswith('"]') else key


def _offset_changes(body: Any) -> dict[str, dict[str, Any] | None]:
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
        changes[partition_key(partition)] = offset
    return changes
