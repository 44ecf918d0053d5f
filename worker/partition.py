"""What one Spark partition runs: one epoch of one task pair, with runners cached per process.

PySpark reuses its Python worker processes, so a :class:`TaskPairRunner` (and its connected
broker clients) built for one epoch is kept in this module and reused by the next epoch of the
same pair - if Spark schedules that pair in this process again. Spark does not promise that, so
each spec names the epoch whose offsets the driver committed last (``prev_epoch``): a cached
runner that did not run exactly that epoch is stale (its pair ran elsewhere meanwhile) and is
restarted from the committed offsets in the spec. Broker clients survive such a restart in the
connectors' client pools, so it costs a seek, not a reconnect.
"""

from __future__ import annotations

import logging
import os
import time
import traceback
from typing import Any

import attrs

from connect.sink import SinkTask, SinkTaskContext
from connect.tasks.results import FAILED, EpochResult
from connect.tasks.runner import TaskPairRunner

__all__ = ["TaskPairSpec", "run_task_pair_epoch", "run_claimed_epoch", "stop_all_cached"]

log = logging.getLogger(__name__)


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
    settings: dict[str, Any]
    offsets: dict[str, dict[str, Any]]  # committed offsets of the connector, by partition key
    stop_file: str | None = None


@attrs.define
class _Cached:
    generation: str
    runner: TaskPairRunner
    last_epoch: int | None = None


_RUNNERS: dict[tuple[str, int], _Cached] = {}


def _stop_flag(path: str | None):
    if not path:
        return lambda: False
    state = {"next": 0.0, "stop": False}

    def requested() -> bool:
        now = time.monotonic()
        if now >= state["next"]:
            state["next"] = now + 0.1
            state["stop"] = os.path.exists(path)
        return state["stop"]

    return requested


def _dlq_factory(spec: TaskPairSpec):
    if spec.dlq_config is None:
        return None

    def build() -> SinkTask:
        task = spec.sink_task_class()
        task.context = SinkTaskContext(f"{spec.connector}-{spec.task}-dlq", spec.dlq_config)
        task.start(spec.dlq_config, task.context)
        return task

    return build


def _build(spec: TaskPairSpec) -> TaskPairRunner:
    return TaskPairRunner(
        connector=spec.connector, task_id=spec.task, source=spec.source_task_class(), sink=spec.sink_task_class(),
        source_config=spec.source_config, sink_config=spec.sink_config, settings=spec.settings,
        offsets=spec.offsets, dlq_factory=_dlq_factory(spec), stop_requested=_stop_flag(spec.stop_file))


def _evict(key: tuple[str, int]) -> None:
    cached = _RUNNERS.pop(key, None)
    if cached is not None:
        try:
            cached.runner.stop()
        except Exception as exc:  # noqa: BLE001 - a stale runner failing to stop must not fail this epoch
            log.warning("stopping stale task pair %s-%s: %s", *key, exc)


def run_task_pair_epoch(spec: TaskPairSpec) -> EpochResult:
    key = (spec.connector, spec.task)
    # Every pair runs once per epoch, somewhere. A runner cached here for another pair will be
    # stale when that pair comes back (it ran elsewhere meanwhile), so release it now: that
    # unassigns its consumer (no idle prefetching) and returns its clients to the pool.
    for other in [k for k in _RUNNERS if k != key]:
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
            cached = _Cached(spec.generation, _build(spec))
        except Exception as exc:  # noqa: BLE001 - a task that cannot start is reported FAILED
            return EpochResult(spec.connector, spec.task, spec.epoch, FAILED, {}, {}, started, time.time(),
                               trace="".join(traceback.format_exception(exc)), pid=os.getpid(), restarted=True)
        _RUNNERS[key] = cached
    result = cached.runner.run_epoch(spec.epoch)
    result.restarted = restarted
    cached.last_epoch = spec.epoch
    if result.state == FAILED:
        _evict(key)
    return result


def _fresh(spec: TaskPairSpec) -> bool:
    cached = _RUNNERS.get((spec.connector, spec.task))
    return cached is not None and cached.last_epoch == spec.prev_epoch and cached.generation == spec.generation


def _claim(claim_dir: str, spec: TaskPairSpec) -> bool:
    path = os.path.join(claim_dir, f"{spec.connector}.{spec.task}")
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        return True
    except FileExistsError:
        return False


def run_claimed_epoch(index: int, specs: list[TaskPairSpec], claim_dir: str) -> EpochResult:
    """Run one of ``specs``, preferring the pair whose runner is cached (fresh) in this process.

    Spark hands partitions to whichever Python worker is idle, so "partition i = pair i" moves
    pairs between processes at random, and each move costs a task restart (seek, refetch) while
    the stale consumer left behind keeps prefetching. When every executor shares a filesystem
    (local mode), each Spark task instead claims a pair with an exclusive file create: first a
    pair that is fresh here, then pair ``index``, then any unclaimed one. N tasks and N pairs,
    each task claiming exactly one, so every pair runs exactly once.
    """
    fresh = [s for s in specs if _fresh(s)]
    for spec in [*fresh, specs[index], *specs]:
        if _claim(claim_dir, spec):
            return run_task_pair_epoch(spec)
    raise RuntimeError(f"no task pair left to claim in {claim_dir} (more Spark tasks than pairs?)")


def stop_all_cached() -> None:
    for key in list(_RUNNERS):
        _evict(key)
