"""The driver loop: every epoch, one Spark job whose partitions are the running task pairs.

Per epoch the driver builds one :class:`~worker.partition.TaskPairSpec` per running pair
(with the connector's committed offsets), runs them all as one Spark job, persists the offsets
each pair returned (one transaction per connector), records stats and failures, and applies
task reconfiguration requested by connectors (new topics or partitions) before the next epoch.
A failed pair is reported with its trace and not scheduled again; the others keep running.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import uuid
from typing import Any, Callable, Protocol, Sequence

import attrs
import orjson

from connect.connector import ConnectorContext
from connect.errors import ConnectError
from connect.tasks.results import FAILED, RUNNING, EpochResult
from worker.partition import TaskPairSpec
from worker.pipeline import SIDE_CONFIG, PipelineConfig
from worker.store import OffsetStore

__all__ = ["Driver", "PipelineRuntime", "TaskState", "Executor"]

log = logging.getLogger(__name__)


class Executor(Protocol):
    def run(self, specs: Sequence[TaskPairSpec], description: str) -> list[EpochResult]: ...


@attrs.define
class TaskState:
    task: int
    source_config: dict[str, Any]
    sink_config: dict[str, Any]
    state: str = RUNNING
    prev_epoch: int | None = None
    last: EpochResult | None = None
    trace: str | None = None


def _own_keys(side: dict[str, str]) -> dict[str, str]:
    """The keys a connector sees: its side's keys; the converters stay visible to the runner."""
    return {k: v for k, v in side.items() if k != "connector.class"}


class PipelineRuntime:
    """One pipeline's connectors (started here, on the driver) and its task pairs."""

    def __init__(self, pipeline: PipelineConfig, store: OffsetStore, run_id: str):
        self.pipeline = pipeline
        self.name = pipeline.name
        self._store = store
        self._run_id = run_id
        self.offsets = store.load(self.name)
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
        self.records_total = 0  # across reconfigurations
        self.errors_total = 0
        self.generation = ""
        self.configure_tasks()

    def configure_tasks(self) -> None:
        revived = [t.task for t in self.tasks if t.state == FAILED]
        if revived:
            log.warning("connector %s: reconfiguration restarts failed task pair(s) %s, as Kafka Connect does",
                        self.name, revived)
        max_tasks = self.pipeline.settings["tasks.max"]
        topics = self.source_connector.source_topics()
        if topics:
            self.sink_connector.prepare_topics(topics)
        source_cfgs = self.source_connector.task_configs(max_tasks)[:max_tasks]
        sink_cfgs = self.sink_connector.task_configs(max(len(source_cfgs), 1)) or [_own_keys(self.pipeline.sink_config)]
        converters = {k: v for k, v in self.pipeline.source_config.items() if k in SIDE_CONFIG}
        sink_conv = {k: v for k, v in self.pipeline.sink_config.items() if k in SIDE_CONFIG}
        self.tasks = [TaskState(i, {**converters, **cfg}, {**sink_conv, **sink_cfgs[i % len(sink_cfgs)]})
                      for i, cfg in enumerate(source_cfgs)]
        digest = hashlib.sha256(self._run_id.encode())
        digest.update(orjson.dumps([[t.source_config, t.sink_config] for t in self.tasks], option=orjson.OPT_SORT_KEYS))
        self.generation = digest.hexdigest()[:16]
        log.info("connector %s: %d task pair(s)", self.name, len(self.tasks))

    def dlq_config(self, sink_config: dict[str, Any]) -> dict[str, Any] | None:
        topic = self.pipeline.settings["errors.deadletterqueue.topic.name"]
        if not topic:
            return None
        return {**sink_config, **self.pipeline.dlq_overrides, "topic": topic, "topic.template": "{topic}"}

    def specs(self, epoch: int, stop_file: str | None) -> list[TaskPairSpec]:
        source_task = self.pipeline.source_class.task_class()
        sink_task = self.pipeline.sink_class.task_class()
        return [TaskPairSpec(self.name, t.task, epoch, t.prev_epoch, self.generation, source_task, t.source_config,
                             sink_task, t.sink_config, self.dlq_config(t.sink_config), self.pipeline.settings,
                             self.offsets, stop_file)
                for t in self.tasks if t.state == RUNNING]

    def apply(self, results: Sequence[EpochResult]) -> None:
        """Persist this connector's offsets of one epoch in one transaction, then update states."""
        offsets: dict[str, dict[str, Any]] = {}
        for result in results:
            offsets.update(result.offsets)
        if offsets:
            self._store.commit(self.name, offsets)
            self.offsets.update(offsets)
        for result in results:
            task = self.tasks[result.task]
            task.last = result
            self.records_total += result.stats.get("records", 0)
            self.errors_total += result.stats.get("errors", 0)
            if result.state == FAILED:
                task.state = FAILED
                task.trace = result.trace
                log.error("task %s-%d FAILED:\n%s", self.name, result.task, result.trace)
            else:
                task.prev_epoch = result.epoch

    def stop(self) -> None:
        for connector in (self.source_connector, self.sink_connector):
            try:
                connector.stop()
            except Exception as exc:  # noqa: BLE001 - stop both, log the failure
                log.warning("stopping connector %s: %s", self.name, exc)


class Driver:
    def __init__(self, executor: Executor, store: OffsetStore, pipelines: Sequence[PipelineConfig], *,
                 stop_file: str | None = None,
                 on_epoch: Callable[[int, list[EpochResult], list[PipelineRuntime]], None] | None = None):
        self.executor = executor
        self.store = store
        self.stop_file = stop_file
        self.on_epoch = on_epoch
        self.run_id = uuid.uuid4().hex
        self.runtimes: list[PipelineRuntime] = []
        for pipeline in pipelines:
            try:
                self.runtimes.append(PipelineRuntime(pipeline, store, self.run_id))
            except ConnectError as exc:
                self.close()
                raise ConnectError(f"connector {pipeline.name!r}: {exc}") from exc
        self.epoch = 0
        self.last_job_error: Exception | None = None

    def run_epoch(self) -> list[EpochResult]:
        """One Spark job over every running pair; [] when there was nothing to run or it failed."""
        self.last_job_error = None
        for rt in self.runtimes:
            if rt.context.take_reconfiguration_request():
                try:
                    rt.configure_tasks()
                except ConnectError as exc:  # e.g. the target is briefly unreachable: keep the old tasks
                    log.warning("connector %s: reconfiguration failed, retrying next epoch: %s", rt.name, exc)
                    rt.context.request_task_reconfiguration()
        specs = [spec for rt in self.runtimes for spec in rt.specs(self.epoch, self.stop_file)]
        if not specs:
            return []
        epoch, self.epoch = self.epoch, self.epoch + 1
        try:
            results = self.executor.run(specs, f"epoch {epoch}")
        except Exception as exc:  # noqa: BLE001 - a lost executor must not stop every connector
            # Nothing of this epoch is persisted; its runners no longer match prev_epoch, so the
            # next epoch restarts them from the stored offsets (at most one epoch replayed).
            self.last_job_error = exc
            log.error("epoch %d: the Spark job failed, its offsets are not committed: %s", epoch, exc)
            return []
        for rt in self.runtimes:
            rt.apply([r for r in results if r.connector == rt.name])
        if self.on_epoch:
            self.on_epoch(epoch, results, self.runtimes)
        return results

    def any_running(self) -> bool:
        return any(t.state == RUNNING for rt in self.runtimes for t in rt.tasks) or any(
            not rt.tasks for rt in self.runtimes)

    def run(self, stop: threading.Event, *, max_epochs: int | None = None, idle_wait: float = 1.0) -> int:
        """Run epochs until ``stop`` is set; return 0, or 1 when every task pair has failed."""
        try:
            while not stop.is_set():
                if max_epochs is not None and self.epoch >= max_epochs:
                    break
                if not self.run_epoch():
                    if not self.any_running():
                        return 1
                    # no task pairs yet (waiting for topics), or the Spark job failed: back off
                    stop.wait(idle_wait * (5 if self.last_job_error is not None else 1))
            return 0 if self.any_running() else 1
        finally:
            self.close()

    def close(self) -> None:
        for rt in self.runtimes:
            rt.stop()
