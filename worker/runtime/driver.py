"""The driver: each connector runs its own stream of epochs, one Spark job per epoch.

Per epoch a connector's loop builds one :class:`~worker.runtime.partition.TaskPairSpec` per pair that
should run, runs them as one Spark job (in the connector's own scheduler pool, from the
connector's own thread), persists the offsets each pair returned, records stats and failures,
and applies task reconfiguration requested by its connectors before the next epoch. Connectors
never wait for each other: a slow or blocked connector delays only its own commits. Within a
connector, every pair's epoch is bounded (``epoch.max.ms`` + ``epoch.grace.ms``), so a stuck pair
cannot hold its siblings longer than that.

Results are fenced: each launch gives every pair a fresh token, and a result is persisted only
if it carries the token issued for that pair in that launch (a stale or duplicate attempt can
never commit). A pair FAILED by transient trouble is restarted with backoff (the connector's
:class:`~worker.settings.RestartPolicy`); one FAILED by a permanent error stays FAILED, as in
Kafka Connect, until reconfigured or restarted.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import uuid
from typing import Any, Callable, Protocol, Sequence

import attrs
import orjson

from connect.connector import ConnectorContext
from connect.errors import ConnectError
from connect.sink.side import side_output_config
from connect.tasks.results import FAILED, RUNNING, EpochResult
from connect.tasks.stages import target_counts, target_routes
from connect.transforms.topics import unknown_note
from worker.pipeline import SIDE_CONFIG, PipelineConfig
from worker.replication.topology import with_topologies
from worker.runtime.control import ControlServer
from worker.runtime.gapledger import acknowledge_writes, ledger_writes, open_gaps
from worker.runtime.partition import TaskPairSpec
from worker.stores.store import OffsetStore
from worker.telemetry.lag import CommittedLag

__all__ = ["Driver", "PipelineRuntime", "TaskState", "Executor"]

log = logging.getLogger(__name__)


class Executor(Protocol):
    def run(self, specs: Sequence[TaskPairSpec], description: str, pool: str | None = None) -> list[EpochResult]: ...

    def attach(self, server: ControlServer) -> None: ...


@attrs.define
class TaskState:
    task: int
    source_config: dict[str, Any]
    sink_config: dict[str, Any]
    state: str = RUNNING
    prev_epoch: int | None = None
    last: EpochResult | None = None
    trace: str | None = None
    failures: int = 0  # consecutive transient failures
    restart_at: float | None = None  # monotonic time of the next automatic restart
    partitions: set = attrs.field(factory=set)  # source partition keys its results named (for its lag)
    moved: int = 0  # records put to the sink, all epochs of this runtime
    acknowledged: int = 0  # records whose delivery the destination confirmed
    committed: int = 0  # acknowledged records whose offsets the store holds


def _own_keys(side: dict[str, str]) -> dict[str, str]:
    """The keys a connector sees: its side's keys; the converters stay visible to the runner."""
    return {k: v for k, v in side.items() if k != "connector.class"}


class PipelineRuntime:
    """One pipeline's connectors (started here, on the driver), its task pairs and its epochs."""

    def __init__(self, pipeline: PipelineConfig, store: OffsetStore, run_id: str):
        self.pipeline = pipeline
        self.name = pipeline.name
        # Until when a pair may still be moving records after its last epoch (epoch.bridge.ms,
        # counted from when the driver got the result, after the worker started it).
        self.bridged_until = 0.0
        self.settings = pipeline.settings
        self._secrets = frozenset(pipeline.secret_values())  # executors mask them in their logs
        self._store = store
        self._run_id = run_id
        self.offsets = store.load(self.name)
        self._offsets_lock = threading.Lock()
        self.context = ConnectorContext(self.name)
        self.source_connector = pipeline.source_class()
        self.source_connector.initialize(self.context)
        self.source_connector.start(_own_keys(pipeline.source_config))
        self.sink_connector = pipeline.sink_class()
        self.sink_connector.initialize(ConnectorContext(self.name))
        try:
            self.sink_connector.start(_own_keys(pipeline.sink_config))
        except BaseException:
            self.source_connector.stop()
            raise
        self.tasks: list[TaskState] = []
        self.records_total = 0  # records moved (put to the sink), across reconfigurations
        self.committed_total = 0  # records whose offsets are in the store
        self.errors_total = 0
        self.lag = CommittedLag()
        self.epoch = 0
        self.revision = ""
        self.last_job_error: Exception | None = None
        self._told_unknown: set[str] = set()  # source topics whose per-record targets were logged
        self.configure_tasks()

    # -- tasks -------------------------------------------------------------------------------
    def _fence_removed_tasks(self) -> None:
        """Exactly-once: pairs numbered past the task count that ran before are fenced in the target
        (``SinkConnector.fence_removed_tasks``); if the target cannot be asked now, the next
        configuration tries again (a zombie of a removed pair is all that is at stake)."""
        if self.settings.runner.exactly_once == "disabled":
            return
        try:
            fenced = self.sink_connector.fence_removed_tasks(max(len(self.tasks), 1))
        except Exception as exc:  # noqa: BLE001 - see above; the pairs themselves fence their own ids
            log.warning("connector %s: removed task pairs not fenced yet: %s", self.name, exc)
            return
        if fenced:
            log.info("connector %s: removed task pair(s) %s fenced (exactly.once.support)", self.name, fenced)

    def configure_tasks(self) -> None:
        revived = [t.task for t in self.tasks if t.state == FAILED]
        if revived:
            log.warning("connector %s: reconfiguration restarts failed task pair(s) %s, as Kafka Connect does",
                        self.name, revived)
        max_tasks = self.settings.tasks_max
        topics = self.source_connector.source_topics()
        if topics:
            self.sink_connector.prepare_topics(self._received_names(topics))
        self._prepare_offset_syncs_topic()
        source_cfgs = self.source_connector.task_configs(max_tasks)[:max_tasks]
        sink_cfgs = self.sink_connector.task_configs(max(len(source_cfgs), 1)) or [_own_keys(self.pipeline.sink_config)]
        converters = {k: v for k, v in self.pipeline.source_config.items() if k in SIDE_CONFIG}
        sink_conv = {k: v for k, v in self.pipeline.sink_config.items() if k in SIDE_CONFIG}
        self.tasks = [TaskState(i, {**converters, **cfg}, {**sink_conv, **sink_cfgs[i % len(sink_cfgs)]})
                      for i, cfg in enumerate(source_cfgs)]
        digest = hashlib.sha256(self._run_id.encode())
        digest.update(orjson.dumps([[t.source_config, t.sink_config] for t in self.tasks], option=orjson.OPT_SORT_KEYS))
        self.revision = digest.hexdigest()[:16]
        self._fence_removed_tasks()
        waiting = self.waiting()
        log.info("connector %s: %d task pair(s)%s", self.name, len(self.tasks), f": {waiting}" if waiting else "")

    def _received_names(self, topics: dict[str, int]) -> dict[str, int]:
        """The source topics as the sink receives their records: a replication flow renames them
        (local names, the prefix policy) and drops those named after the target, then the
        transforms rename or drop them (``connect.tasks.stages.target_routes``)."""
        routes = target_routes(self.settings.runner, self.pipeline.transforms, topics)
        note = unknown_note({t: r for t, r in routes.items() if t not in self._told_unknown})
        if note:
            self._told_unknown.update(routes)
            log.info("connector %s: %s", self.name, note)
        return target_counts(routes, topics)

    def waiting(self) -> str | None:
        """While the connector runs no task pair: why, in words (its source's ``waiting_for``)."""
        if self.tasks:
            return None
        return self.source_connector.waiting_for() or "no task pairs: the source connector has no work to hand out"

    def _prepare_offset_syncs_topic(self) -> None:
        """Create the offset-syncs topic (one partition: syncs stay in order) with the sink's connector,
        whatever its auto-creation setting: it is the flow's own topic, as MM2 creates its internal ones."""
        topic = self.settings.runner.offset_syncs_topic
        if not topic:
            return
        cls = type(self.sink_connector)
        config = {**_own_keys(self.pipeline.sink_config), "topic": topic, "topic.template": "{topic}"}
        if "auto.create.topics" in cls.config_def():
            config["auto.create.topics"] = "true"
        writer = cls()
        writer.start(config)
        try:
            writer.prepare_topics({topic: 1})
        finally:
            writer.stop()

    def dlq_config(self, sink_config: dict[str, Any]) -> dict[str, Any] | None:
        topic = self.settings.dlq_topic
        if not topic:
            return None
        return side_output_config(sink_config, self.pipeline.dlq_overrides, topic,
                                  own_connector=self.pipeline.dlq_class is not None)

    def offset_syncs_config(self, sink_config: dict[str, Any]) -> dict[str, Any] | None:
        topic = self.settings.runner.offset_syncs_topic
        if not topic:
            return None
        return side_output_config(sink_config, {}, topic)

    def _due(self, task: TaskState, now: float) -> bool:
        if task.state == RUNNING:
            return True
        if task.restart_at is not None and now >= task.restart_at:
            log.warning("connector %s: restarting task pair %d (attempt %d after transient failures)",
                        self.name, task.task, task.failures)
            task.state, task.restart_at = RUNNING, None
            return True
        return False

    def specs(self, epoch: int) -> tuple[list[TaskPairSpec], dict[int, str]]:
        """Specs of the pairs to run this epoch, and the fencing token issued to each."""
        source_task = self.pipeline.source_class.task_class()
        sink_task = self.pipeline.sink_class.task_class()
        now = time.monotonic()
        tokens: dict[int, str] = {}
        specs = []
        with self._offsets_lock:
            gaps = open_gaps(self.offsets)
        for t in self.tasks:
            if not self._due(t, now):
                continue
            tokens[t.task] = token = uuid.uuid4().hex
            specs.append(TaskPairSpec(self.name, t.task, epoch, t.prev_epoch, self.revision, source_task,
                                      t.source_config, sink_task, t.sink_config, self.dlq_config(t.sink_config),
                                      self.settings.runner, token,
                                      offset_syncs_config=self.offset_syncs_config(t.sink_config),
                                      sink_connector_class=self.pipeline.sink_class,
                                      dlq_connector_class=self.pipeline.dlq_class,
                                      secrets=self._secrets, transforms=self.pipeline.transforms,
                                      open_gaps=gaps))
        return specs, tokens

    def next_restart_in(self) -> float | None:
        due = [t.restart_at for t in self.tasks if t.restart_at is not None]
        return max(min(due) - time.monotonic(), 0.0) if due else None

    # -- offsets -------------------------------------------------------------------------------
    def committed_offsets(self, keys: Sequence[str]) -> dict[str, Any]:
        """What a starting task asks for: the committed offsets of its own partitions only."""
        with self._offsets_lock:
            return {k: self.offsets.get(k) for k in keys}

    # -- epochs --------------------------------------------------------------------------------
    def run_epoch(self, executor: Executor) -> list[EpochResult]:
        """One Spark job over this connector's due pairs; [] when nothing ran or the job failed."""
        self.last_job_error = None
        if self.context.take_reconfiguration_request():
            try:
                self.configure_tasks()
            except ConnectError as exc:  # e.g. the target is briefly unreachable: keep the old tasks
                log.warning("connector %s: reconfiguration failed, retrying next epoch: %s", self.name, exc)
                self.context.request_task_reconfiguration()
        specs, tokens = self.specs(self.epoch)
        if not specs:
            return []
        epoch, self.epoch = self.epoch, self.epoch + 1
        try:
            results = executor.run(specs, f"{self.name} epoch {epoch}", pool=self.name)
        except Exception as exc:  # noqa: BLE001 - a lost executor must not stop the connector
            # Nothing of this epoch is persisted; its runners no longer match prev_epoch, so the
            # next epoch restarts them from the stored offsets (at most one epoch replayed).
            self.last_job_error = exc
            log.error("connector %s epoch %d: the Spark job failed, its offsets are not committed: %s",
                      self.name, epoch, exc)
            return []
        return self.apply(results, tokens)

    def apply(self, results: Sequence[EpochResult], tokens: dict[int, str]) -> list[EpochResult]:
        """Persist the fenced results' offsets (one transaction), then update task states."""
        accepted = []
        for result in results:
            if tokens.pop(result.task, None) != result.token or result.task >= len(self.tasks):
                log.error("connector %s: dropping a result of task pair %d from a stale or duplicate attempt "
                          "(token %s)", self.name, result.task, result.token or "-")
                continue
            accepted.append(result)
        if accepted:
            self.bridged_until = time.monotonic() + self.settings.runner.epoch_bridge_ms / 1000
        offsets: dict[str, dict[str, Any]] = {}
        for result in accepted:
            offsets.update(result.offsets)
        with self._offsets_lock:  # gaps found are written with the offsets (worker.runtime.gapledger)
            offsets.update(ledger_writes(self.offsets, ((r.gaps, r.offsets) for r in accepted if r.gaps), self.name))
            if offsets:
                self._store.commit(self.name, offsets)
                self.offsets.update(offsets)
        if accepted:
            self.measure_lag()
        for result in accepted:
            self._record(result)
        return accepted

    def acknowledge_gaps(self, by: str) -> int:
        """Mark the open source gaps acknowledged; those the pairs stopped at resume after them."""
        with self._offsets_lock:
            writes, count = acknowledge_writes(self.offsets, by, time.time())
            if writes:
                self._store.commit(self.name, writes)
                self.offsets.update(writes)
        return count

    def stored_offsets(self) -> dict[str, Any]:
        with self._offsets_lock:
            return dict(self.offsets)

    def measure_lag(self) -> None:
        """Lag against the committed offsets (``worker.telemetry.lag``), at most once a second."""
        if time.monotonic() - self.lag.measured_at < 1.0:
            return
        with self._offsets_lock:
            committed = dict(self.offsets)
        self.lag.measure(self.source_connector, committed)

    def task_lag(self, task: TaskState) -> tuple[int, float] | None:
        keys = tuple(task.partitions)  # a snapshot: the connector's thread adds to it meanwhile
        return self.lag.of(keys) if keys else None

    def _record(self, result: EpochResult) -> None:
        task = self.tasks[result.task]
        if task.last is not None and task.last.epoch == result.epoch - 1:
            result.gap_s = result.started_at - task.last.ended_at
        task.last = result
        stats = result.stats
        self.records_total += stats.get("records", 0)
        self.committed_total += stats.get("committed", 0)
        self.errors_total += stats.get("errors", 0)
        task.moved += stats.get("records", 0)
        task.acknowledged += stats.get("acknowledged", 0)
        task.committed += stats.get("committed", 0)
        task.partitions.update(result.offsets)
        task.partitions.update(result.partition_lag or ())
        behind = self.task_lag(task)
        if behind is not None:  # what is left to deliver, not where the consumer stands
            result.lag = behind[0]
            parts = self.lag.partitions
            result.partition_lag = {k: list(parts[k]) for k in tuple(task.partitions) if k in parts}
        if result.state != FAILED:
            task.prev_epoch = result.epoch
            task.failures = 0
            return
        task.state = FAILED
        task.trace = result.trace
        if result.retriable:
            task.failures += 1
            delay = self.settings.restart.delay_s(task.failures)
            task.restart_at = time.monotonic() + delay
            log.error("task %s-%d FAILED by transient trouble; restarting in %.1f s (restart policy):\n%s",
                      self.name, result.task, delay, result.trace)
        else:
            log.error("task %s-%d FAILED:\n%s", self.name, result.task, result.trace)

    def alive(self) -> bool:
        """Some pair runs or will be restarted (or the connector waits for its first topics)."""
        return not self.tasks or any(t.state == RUNNING or t.restart_at is not None for t in self.tasks)

    def stop(self) -> None:
        for connector in (self.source_connector, self.sink_connector):
            try:
                connector.stop()
            except Exception as exc:  # noqa: BLE001 - stop both, log the failure
                log.warning("stopping connector %s: %s", self.name, exc)


def close_executor(executor: Executor) -> None:
    """Let the executor end what it keeps running between epochs (hosts of task pairs)."""
    close = getattr(executor, "close", None)
    if close is not None:
        try:
            close()
        except Exception as exc:  # noqa: BLE001 - stopping goes on
            log.warning("closing the executor: %s", exc)


def wait_out_bridges(runtimes: Sequence[PipelineRuntime]) -> None:
    """Wait until no pair of ``runtimes`` can still be moving records between epochs (each bridge
    ends ``epoch.bridge.ms`` after its epoch, or earlier at its stop flag): a connector started
    again right after (the same name, the same data directory) must not meet a pair still at work."""
    left = max((rt.bridged_until for rt in runtimes), default=0.0) - time.monotonic()
    if left > 0:
        time.sleep(left)


OnEpoch = Callable[[int, list[EpochResult], list[PipelineRuntime]], None]


def connector_turn(rt: PipelineRuntime, executor: Executor, report: Callable[[list[EpochResult]], None],
                   wait: Callable[[float], Any], idle_wait: float) -> bool:
    """One step of a connector's loop: an epoch, or - when no pair was due (waiting for topics or a
    restart backoff) or the Spark job failed - a wait. False when every task pair has failed for good."""
    try:
        done = rt.run_epoch(executor)
    except Exception:  # noqa: BLE001 - a bug in one connector's loop must not end the others
        log.exception("connector %s: epoch loop error; retrying", rt.name)
        done = []
    report(done)
    if done:
        return True
    if not rt.alive():
        return False
    pause = idle_wait * (5 if rt.last_job_error is not None else 1)
    restart_in = rt.next_restart_in()
    pause = min(pause, restart_in) if restart_in is not None else pause
    if rt.tasks:
        wait(pause)
        return True
    # Waiting for work: start as soon as the source finds some (a topic appeared), not a pause later.
    until = time.monotonic() + pause
    while not rt.context.reconfiguration_requested():
        left = until - time.monotonic()
        if left <= 0 or wait(min(left, 0.1)):  # True: stopped or woken
            break
    return True


def unwanted_pairs(pairs: Sequence[Sequence], runtime_of: Callable[[str], PipelineRuntime | None]) -> list[list]:
    """``[connector, task]`` of each ``[connector, task, revision]`` no runtime runs any more:
    unknown connector, another revision (reconfigured, restarted) or a task beyond its count."""
    unwanted = []
    for connector, task, revision in pairs:
        rt = runtime_of(connector)
        if rt is None or rt.revision != revision or task >= len(rt.tasks):
            unwanted.append([connector, task])
    return unwanted


class Driver:
    def __init__(self, executor: Executor, store: OffsetStore, pipelines: Sequence[PipelineConfig], *,
                 on_epoch: OnEpoch | None = None, on_idle: Callable[[PipelineRuntime], None] | None = None,
                 control_host: str = "127.0.0.1", control_tls: bool = False):
        self.executor = executor
        self.store = store
        self.on_epoch = on_epoch
        self.on_idle = on_idle  # called after a connector's turn that ran nothing while it has no task pair
        self.run_id = uuid.uuid4().hex
        self.stop_event = threading.Event()
        self._report_lock = threading.Lock()
        self.control = ControlServer(control_host, tls=control_tls)  # TLS on a cluster: specs carry credentials
        self.control.register("stop", lambda _request: self.stop_event.is_set())
        self.control.register("stops", lambda request: list(request.get("connectors", ())) if self.stop_event.is_set()
                              else [])
        self.control.register("offsets", self._offsets_request)
        self.control.register("wanted", self._wanted_request)
        executor.attach(self.control)
        self.runtimes: list[PipelineRuntime] = []
        # The flows of a replication group here take one path each (``worker.replication.topology``).
        for pipeline in with_topologies(pipelines):
            try:
                self.runtimes.append(PipelineRuntime(pipeline, store, self.run_id))
            except ConnectError as exc:
                self.close()
                raise ConnectError(f"connector {pipeline.name!r}: {exc}") from exc
        self._by_name = {rt.name: rt for rt in self.runtimes}

    def _offsets_request(self, request: dict) -> dict[str, Any]:
        runtime = self._by_name.get(request.get("connector", ""))
        return runtime.committed_offsets(request.get("keys", [])) if runtime else {}

    def _wanted_request(self, request: dict) -> list[list]:
        """Of the cached pairs a Python worker names, those no connector here runs in that revision."""
        return unwanted_pairs(request.get("pairs", []), lambda name: self._by_name.get(name))

    def _report(self, runtime: PipelineRuntime, results: list[EpochResult]) -> None:
        if self.on_epoch and results:
            with self._report_lock:
                self.on_epoch(runtime.epoch - 1, results, self.runtimes)
        elif self.on_idle and not results and not runtime.tasks:
            with self._report_lock:
                self.on_idle(runtime)

    def run_epoch(self) -> list[EpochResult]:
        """One epoch of every connector, one after the other, in this thread (tests, tools)."""
        results = []
        for rt in self.runtimes:
            done = rt.run_epoch(self.executor)
            self._report(rt, done)
            results.extend(done)
        return results

    def any_running(self) -> bool:
        return any(rt.alive() for rt in self.runtimes)

    def _connector_loop(self, rt: PipelineRuntime, max_epochs: int | None, idle_wait: float) -> None:
        stop = self.stop_event
        while not stop.is_set() and (max_epochs is None or rt.epoch < max_epochs):
            if not connector_turn(rt, self.executor, lambda done: self._report(rt, done), stop.wait, idle_wait):
                log.error("connector %s: every task pair has failed; it stays stopped", rt.name)
                return

    def run(self, stop: threading.Event | None = None, *, max_epochs: int | None = None,
            idle_wait: float = 1.0) -> int:
        """Run every connector's epochs, each in its own thread, until ``stop`` is set (or each
        ran ``max_epochs``); return 0, or 1 when every task pair has failed for good."""
        if stop is not None:
            threading.Thread(target=lambda: (stop.wait(), self.stop_event.set()), daemon=True).start()
        threads = [threading.Thread(target=self._connector_loop, args=(rt, max_epochs, idle_wait),
                                    name=f"connector-{rt.name}", daemon=True) for rt in self.runtimes]
        try:
            for t in threads:
                t.start()
            for t in threads:
                while t.is_alive():
                    t.join(0.5)
            return 0 if self.any_running() else 1
        finally:
            self.close()

    def close(self) -> None:
        """Stop the connectors, the control channel and the store (releasing the data directory)."""
        self.stop_event.set()  # pairs moving records between epochs stop (their stop flag)...
        wait_out_bridges(self.runtimes)  # ...and none moves any more once this returns
        for rt in self.runtimes:
            rt.stop()
        self.runtimes = []
        close_executor(self.executor)
        self.control.close()
        self.store.close()
