"""PairPlan: everything one task pair's runner needs, built once by whoever runs the pair.

The contract between a runtime (``worker.runtime.partition``, :func:`connect.testing.run_pair`, a
test) and :class:`~connect.tasks.runner.TaskPairRunner`: the runtime decides what the pair is made
of - its two task instances and their configs, the policy, where committed offsets come from, how
side writers are built, the stage chain with the pair's own transform instances, the listeners and
the stop flag - and the runner only uses what the plan holds. The runner never reaches back into
the runtime; the callables below are the only ways it asks the runtime anything, and each says when
it is called.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import attrs

from connect.sink import SinkTask
from connect.sink.side import SideWriter
from connect.source import SourceTask
from connect.tasks.listeners import AckListener
from connect.tasks.policy import RunnerPolicy
from connect.tasks.stages import StageChain, build_chain

__all__ = ["PairPlan"]


def _never() -> bool:
    return False


def _default_chain(plan: PairPlan) -> StageChain:
    return build_chain(plan.policy, plan.source_config, plan.sink_config)


@attrs.frozen(kw_only=True)
class PairPlan:
    """One task pair, as the runner gets it. The tasks are new instances, not yet started: the
    runner starts them (sink first under exactly-once) and stops them."""

    connector: str
    task_id: int
    source: SourceTask
    sink: SinkTask
    source_config: Mapping[str, Any]
    sink_config: Mapping[str, Any]
    policy: RunnerPolicy
    # Committed offsets of the source partitions, when fixed (tests, a run from given offsets); None:
    # ``offset_lookup`` answers for the keys the source asks about (called from the source's thread).
    offsets: Mapping[str, Mapping[str, Any]] | None = None
    offset_lookup: Callable[[list[str]], Mapping[str, Any]] | None = None
    # Build the side writers of the dead-letter and offset-syncs topics (:mod:`connect.sink.side`);
    # called at most once each, lazily, once the pair has started (exactly-once: the writer joins
    # the epoch's transaction). None: the pair has no such topic.
    dlq_factory: Callable[[], SideWriter] | None = None
    offset_syncs_factory: Callable[[], SideWriter] | None = None
    # poll -> stages (replication, converters, transforms) -> put, with this pair's own transform
    # instances (the runner closes them when it stops or cannot start). Default: no transforms.
    stages: StageChain = attrs.field(default=attrs.Factory(_default_chain, takes_self=True))
    listeners: Sequence[AckListener] = ()  # side parts following the acknowledgements
    # Whether the worker stops or the connector leaves RUNNING; asked between batches, so it must be cheap.
    stop_requested: Callable[[], bool] = _never

    @property
    def name(self) -> str:
        return f"{self.connector}-{self.task_id}"
