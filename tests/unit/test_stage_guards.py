"""Guards of the stage chain found by review: a step may not move a record to another source
partition or offset (the runner holds and commits offsets by them); the transforms of a pair that
failed to start are closed; failure reasons an epoch keeps are bounded."""

from __future__ import annotations

import attrs
import pytest

from connect.records import ConnectRecord
from connect.tasks.plan import PairPlan
from connect.tasks.policy import RunnerPolicy
from connect.tasks.results import OTHER_REASONS, REASONS_KEPT, EpochStats
from connect.tasks.runner import TaskPairRunner
from connect.tasks.stages import RecordStages, StageChain
from connect.testing import MemorySinkTask, MemorySourceTask

SP = {"topic": "t", "partition": 0}


def rec(offset: int) -> ConnectRecord:
    return ConnectRecord("t", None, b"v", None, None, SP, {"offset": offset}, 0)


def test_a_step_that_moves_a_record_fails_that_record_only():
    def move(r):
        return attrs.evolve(r, source_offset={"offset": 99}) if r.source_offset["offset"] == 1 else r

    chain = StageChain([RecordStages([("transforms.move (Custom)", move)])])
    out, dropped, failures = chain.apply([rec(0), rec(1), rec(2)])
    assert [r.source_offset["offset"] for r in out] == [0, 2] and dropped == 0
    (failed, error), = failures
    assert failed.source_offset == {"offset": 1}  # reported as it came in, so its own partition is held
    assert "changed the source partition or offset" in str(error) and "transforms.move" in str(error)


def test_equal_but_rebuilt_partition_and_offset_are_accepted():
    def rebuild(r):
        return attrs.evolve(r, source_partition=dict(r.source_partition), source_offset=dict(r.source_offset))

    out, _, failures = StageChain([RecordStages([("rebuild", rebuild)])]).apply([rec(0)])
    assert len(out) == 1 and not failures


def test_transforms_are_closed_when_the_pair_cannot_start():
    closed = []

    class FailingSink(MemorySinkTask):
        def start(self, config, context):
            raise RuntimeError("no target")

    chain = StageChain([RecordStages([("t", lambda r: r)], closers=[lambda: closed.append(True)])])
    with pytest.raises(RuntimeError, match="no target"):
        TaskPairRunner(PairPlan(connector="c", task_id=0, source=MemorySourceTask(), sink=FailingSink(),
                                source_config={}, sink_config={}, policy=RunnerPolicy(), stages=chain))
    assert closed == [True]


def test_failure_reasons_kept_by_an_epoch_are_bounded():
    stats = EpochStats()
    failures = [(rec(i), ValueError(f"record {i} is bad")) for i in range(1000)]
    stats.count_reasons(failures[:500])
    stats.count_reasons(failures[500:])
    assert len(stats.failure_reasons) == REASONS_KEPT + 1
    assert sum(stats.failure_reasons.values()) == 1000  # every record still counted
    assert stats.failure_reasons[OTHER_REASONS] == 1000 - REASONS_KEPT
    assert stats.count_reasons([(rec(0), ValueError("record 0 is bad"))]) == {"ValueError: record 0 is bad": 1}


def test_offset_syncs_never_wait_past_the_epoch_deadline():
    import time
    from types import SimpleNamespace

    from connect.tasks.offsetsync import OffsetSyncListener

    deadlines = []

    class Writer:
        def send(self, records, deadline):
            deadlines.append(deadline)

        def flush(self, deadline):
            return True

        def take_failures(self):
            return []

    policy = RunnerPolicy(source_alias="A", target_alias="B", offset_syncs_topic="syncs")
    listener = OffsetSyncListener.for_policy(policy, Writer, "c-0")
    context = SimpleNamespace(deadline=time.monotonic() + 0.05)
    listener.attach(context)
    context.positions.ack(rec(0), "t", 0, 0)
    listener.commit_point()
    assert deadlines and deadlines[0] <= context.deadline  # not the emitter's own half second
