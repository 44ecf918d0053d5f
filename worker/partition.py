"""What one Spark partition runs: one epoch of one task pair, with runners cached per process.

PySpark reuses its Python worker processes, so a :class:`TaskPairRunner` (and its connected
broker clients, and the records it still has in flight) built for one epoch is kept in this
module and reused by the next epoch of the same pair - if that pair runs in this process again.

Which pair a Spark task runs is *claimed* from the driver over the control channel
(``worker.control``): the task says which pairs are cached, fresh, in its process, and the
driver hands it one of those first, then pair ``index``, then any unclaimed one. Spark decides
which Python worker (and on a cluster, which executor) gets each task; claiming turns that into
"each pair stays where its runner is" whenever the process that holds it gets a task of the
connector's job. The driver grants each pair once per job, so no pair runs twice at a time.

Each spec names the epoch whose offsets the driver committed last (``prev_epoch``): a cached
runner that did not run exactly that epoch is stale (its pair ran elsewhere meanwhile, or a
result was lost) and is restarted from the committed offsets. The spec carries a fencing
``token``; the driver persists a result only if its token is the one it issued for that pair
in that job. Tasks read only their own partitions' committed offsets, through the channel.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import traceback
from typing import Any

import attrs

from connect.errors import RetriableError
from connect.sink import SinkTask, SinkTaskContext
from connect.tasks.policy import RunnerPolicy
from connect.tasks.results import FAILED, EpochResult
from connect.tasks.runner import TaskPairRunner
from worker.control import ControlAddress, client_for

__all__ = ["TaskPairSpec", "JobContext", "run_task_pair_epoch", "run_claimed_epoch", "stop_all_cached", "pair_id"]

log = logging.getLogger(__name__)

_HOST = socket.gethostname()
_STOP_POLL_S = 0.2


@attrs.frozen
class TaskPairSpec:
    connector: str
    task: int
    epoch: int
    prev_epoch: int | None  # last epoch of this pair whose result the driver persisted
    generation: str  # hash of the connector's config and task split; a change restarts its pairs
    source_task_class: type
    source_config: dict[str, Any]
    sink_task_class: type
    sink_config: dict[str, Any]
    dlq_config: dict[str, Any] | None
    policy: RunnerPolicy
    token: str = ""  # fencing token: the driver accepts this attempt's result only
    offsets: dict[str, dict[str, Any]] | None = None  # fixed offsets (tests); None: ask the driver


@attrs.frozen
class JobContext:
    """How a Spark task of one job reaches its driver."""

    control: ControlAddress
    job: str


def pair_id(connector: str, task: int) -> str:
    return f"{connector}/{task}"


@attrs.define
class _Cached:
    generation: str
    runner: TaskPairRunner
    last_epoch: int | None = None


_RUNNERS: dict[tuple[str, int], _Cached] = {}


def _stop_flag(control: ControlAddress | None):
    """A cheap ``stop_requested()``: asks the driver at most every 0.2 s; an unreachable driver
    means stop (nobody would receive this epoch's result)."""
    if control is None:
        return lambda: False
    client = client_for(control)
    state = {"next": 0.0, "stop": False}

    def requested() -> bool:
        now = time.monotonic()
        if not state["stop"] and now >= state["next"]:
            state["next"] = now + _STOP_POLL_S
            try:
                state["stop"] = bool(client.request("stop"))
            except ConnectionError:
                state["stop"] = True
        return state["stop"]

    return requested


def _offset_lookup(spec: TaskPairSpec, control: ControlAddress | None):
    if spec.offsets is not None or control is None:
        return None
    client = client_for(control)
    return lambda keys: client.request("offsets", connector=spec.connector, keys=keys)


def _dlq_factory(spec: TaskPairSpec):
    if spec.dlq_config is None:
        return None

    def build() -> SinkTask:
        task = spec.sink_task_class()
        task.context = SinkTaskContext(f"{spec.connector}-{spec.task}-dlq", spec.dlq_config)
        task.start(spec.dlq_config, task.context)
        return task

    return build


def _build(spec: TaskPairSpec, control: ControlAddress | None) -> TaskPairRunner:
    return TaskPairRunner(
        connector=spec.connector, task_id=spec.task, source=spec.source_task_class(), sink=spec.sink_task_class(),
        source_config=spec.source_config, sink_config=spec.sink_config, policy=spec.policy,
        offsets=spec.offsets, offset_lookup=_offset_lookup(spec, control), dlq_factory=_dlq_factory(spec),
        stop_requested=_stop_flag(control))


def _evict(key: tuple[str, int]) -> None:
    cached = _RUNNERS.pop(key, None)
    if cached is not None:
        try:
            cached.runner.stop()
        except Exception as exc:  # noqa: BLE001 - a stale runner failing to stop must not fail this epoch
            log.warning("stopping stale task pair %s-%s: %s", *key, exc)


def run_task_pair_epoch(spec: TaskPairSpec, control: ControlAddress | None = None) -> EpochResult:
    key = (spec.connector, spec.task)
    # Every pair of this connector runs once per job, somewhere. A runner cached here for
    # another pair of the same connector will be stale when that pair comes back (it runs
    # elsewhere now), so release it: that unassigns its consumer (no idle prefetching) and returns
    # its clients to the pool. Other connectors' runners stay: their jobs are independent.
    for other in [k for k in _RUNNERS if k[0] == spec.connector and k != key]:
        _evict(other)
    cached = _RUNNERS.get(key)
    if cached is not None and (cached.last_epoch != spec.prev_epoch or cached.generation != spec.generation):
        _evict(key)
        cached = None
    restarted = cached is None
    if cached is not None:
        cached.runner.offsets_persisted()  # prev_epoch matched: the driver stored its offsets
    if cached is None:
        started = time.time()
        try:
            cached = _Cached(spec.generation, _build(spec, control))
        except Exception as exc:  # noqa: BLE001 - a task that cannot start is reported FAILED
            return EpochResult(spec.connector, spec.task, spec.epoch, FAILED, {}, {}, started, time.time(),
                               trace="".join(traceback.format_exception(exc)), pid=os.getpid(), restarted=True,
                               retriable=_transient_start_failure(exc), token=spec.token, host=_HOST)
        _RUNNERS[key] = cached
    result = cached.runner.run_epoch(spec.epoch)
    result.restarted = restarted
    result.token = spec.token
    cached.last_epoch = spec.epoch
    if result.state == FAILED:
        _evict(key)
    return result


def _transient_start_failure(exc: BaseException) -> bool:
    """A start that failed for lack of a broker or the driver is worth retrying with backoff."""
    return isinstance(exc, (RetriableError, ConnectionError, TimeoutError)) or "transport" in str(exc).lower()


def _fresh(spec: TaskPairSpec) -> bool:
    cached = _RUNNERS.get((spec.connector, spec.task))
    return cached is not None and cached.last_epoch == spec.prev_epoch and cached.generation == spec.generation


def run_claimed_epoch(index: int, specs: list[TaskPairSpec], job: JobContext) -> EpochResult:
    """Claim a pair of ``specs`` from the driver (preferring one fresh here) and run its epoch."""
    fresh = [pair_id(s.connector, s.task) for s in specs if _fresh(s)]
    claimed = client_for(job.control).request("claim", job=job.job, index=index, fresh=fresh, host=_HOST,
                                              pid=os.getpid())
    if claimed is None:
        raise RuntimeError(f"job {job.job}: no task pair left to claim (more Spark tasks than pairs?)")
    spec = next(s for s in specs if pair_id(s.connector, s.task) == claimed)
    return run_task_pair_epoch(spec, job.control)


def stop_all_cached() -> None:
    for key in list(_RUNNERS):
        _evict(key)
