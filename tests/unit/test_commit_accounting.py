"""The runner's commit accounting (connect.tasks.commits.CommitAccounting) and its re-send queue
(connect.tasks.resend.ResendQueue), driven directly: which source offsets are safe to persist as
generations of puts complete, in or out of order, with failures holding partitions back."""

from __future__ import annotations

import time

import pytest

from connect.errors import NotSentError, RetriableError, RetriesExhaustedError
from connect.records import ConnectRecord, partition_key
from connect.tasks.commits import CommitAccounting
from connect.tasks.resend import DELIVERY, Resender, ResendQueue
from connect.tasks.results import EpochStats
from connect.tasks.retry import RetryPolicy

P0 = {"topic": "t", "partition": 0}
P1 = {"topic": "t", "partition": 1}
K0, K1 = partition_key(P0), partition_key(P1)


def _rec(part: dict, offset: int, ts: int | None = None) -> ConnectRecord:
    return ConnectRecord("t", None, b"v", None, ts, part, {"offset": offset})


class _Checkpoints:
    """An asynchronous sink's checkpoints, each done when the test says so (in any order)."""

    def __init__(self) -> None:
        self.done: list[bool] = []

    def __call__(self):
        i = len(self.done)
        self.done.append(False)
        return lambda: self.done[i]


def _put(acct: CommitAccounting, *records: ConnectRecord) -> None:
    """What the runner's loop does for one polled and put batch."""
    acct.polled.update({id(r.source_partition): r for r in records})
    acct.sent(list(records))


def _commit_point(acct: CommitAccounting, checkpoint, committed: dict, stats: EpochStats, blocked=()) -> list:
    acct.close(checkpoint)
    complete = acct.checkpointed()
    acct.acknowledge(complete, stats)
    acct.release(set(blocked) | set(acct.awaiting), committed, stats)
    return complete


def test_out_of_order_checkpoints_complete_in_put_order():
    acct, cps, stats, committed = CommitAccounting(), _Checkpoints(), EpochStats(), {}
    for gen in range(3):
        _put(acct, _rec(P0, gen * 10), _rec(P0, gen * 10 + 9))
        assert _commit_point(acct, cps, committed, stats) == []
    assert acct.in_flight == 6 and len(acct.generations) == 3
    # The newest two checkpoints are done first: the oldest, not done, holds them back.
    cps.done[2] = cps.done[1] = True
    assert _commit_point(acct, cps, committed, stats) == []
    assert committed == {} and stats.acknowledged == 0 and acct.in_flight == 6
    cps.done[0] = True
    complete = _commit_point(acct, cps, committed, stats)
    assert [g.seq for g in complete] == [0, 1, 2]
    assert committed == {K0: {"offset": 29}}
    assert stats.acknowledged == stats.committed == 6 and acct.in_flight == 0
    assert acct.complete_through(2) and not acct.complete_through(3)
    assert acct.settled()


def test_a_generation_not_done_holds_back_later_ones_and_only_those():
    acct, cps, stats, committed = CommitAccounting(), _Checkpoints(), EpochStats(), {}
    _put(acct, _rec(P0, 1))
    _commit_point(acct, cps, committed, stats)
    _put(acct, _rec(P1, 5))
    _commit_point(acct, cps, committed, stats)
    _put(acct, _rec(P0, 2))
    _commit_point(acct, cps, committed, stats)
    cps.done[0] = True
    cps.done[2] = True
    _commit_point(acct, cps, committed, stats)
    # Generation 1 (P1) has no outcome: P0's offset moves to generation 0's, not to generation 2's.
    assert committed == {K0: {"offset": 1}}
    assert acct.done_seq == 0 and acct.in_flight == 2 and not acct.settled()
    cps.done[1] = True
    _commit_point(acct, cps, committed, stats)
    assert committed == {K0: {"offset": 2}, K1: {"offset": 5}}


def test_a_blocked_partition_keeps_its_offset_and_nothing_counts_committed_meanwhile():
    acct, cps, stats, committed = CommitAccounting(), _Checkpoints(), EpochStats(), {}
    _put(acct, _rec(P0, 3), _rec(P1, 7))
    acct.close(cps)
    cps.done[0] = True
    acct.acknowledge(acct.checkpointed(), stats)
    acct.release({K0}, committed, stats)  # a record of P0 waits to be re-sent
    assert committed == {K1: {"offset": 7}}
    assert stats.acknowledged == 2 and stats.committed == 0  # never ahead of the offsets
    assert acct.ready == {K0: {"offset": 3}} and not acct.settled()
    acct.release(set(), committed, stats)
    assert committed == {K0: {"offset": 3}, K1: {"offset": 7}}
    assert stats.committed == 2 and acct.settled()


def test_a_transient_failure_is_acknowledged_only_once_its_resent_copy_is():
    acct, cps, stats, committed = CommitAccounting(), _Checkpoints(), EpochStats(), {}
    failed = _rec(P0, 1)
    _put(acct, failed, _rec(P0, 2))
    acct.close(cps)
    cps.done[0] = True
    complete = acct.checkpointed()
    acct.unacknowledged(1, stats)  # the sink reported ``failed``: an outcome, not an acknowledgement
    acct.acknowledge(complete, stats)
    acct.release({K0}, committed, stats)
    assert stats.acknowledged == 1 and committed == {}
    acct.resent([failed])  # goes out in the open generation (1): P0 is held until it completes
    assert acct.awaiting == {K0: 1}
    _commit_point(acct, cps, committed, stats)
    assert committed == {} and acct.awaiting == {K0: 1}
    cps.done[1] = True
    _commit_point(acct, cps, committed, stats)
    assert acct.awaiting == {} and committed == {K0: {"offset": 2}}
    assert stats.acknowledged == stats.committed == 2 and acct.in_flight == 0


def test_a_synchronous_flush_completes_everything_or_the_partitions_it_names():
    acct, stats, committed = CommitAccounting(), EpochStats(), {}
    _put(acct, _rec(P0, 4), _rec(P1, 8))
    acct.close(None)
    _put(acct, _rec(P0, 6))
    acct.close(None)
    offsets = acct.unflushed()
    assert offsets == {K0: {"offset": 6}, K1: {"offset": 8}}
    # A partial answer: P1 is safe up to where the sink says; nothing completes.
    assert acct.flushed(offsets, {K1: {"offset": 8}}) == []
    acct.release(set(), committed, stats)
    assert committed == {K1: {"offset": 8}} and stats.acknowledged == 0
    offsets = acct.unflushed()
    assert offsets == {K0: {"offset": 6}}  # P1 is no longer asked for
    complete = acct.flushed(offsets, {K0: {"offset": 6}})
    acct.acknowledge(complete, stats)
    acct.release(set(), committed, stats)
    assert committed == {K0: {"offset": 6}, K1: {"offset": 8}}
    assert stats.acknowledged == 3 and acct.in_flight == 0 and acct.settled()


def test_an_empty_generation_is_not_closed_and_asks_no_checkpoint():
    acct, cps = CommitAccounting(), _Checkpoints()
    acct.close(cps)
    assert cps.done == [] and not acct.generations and acct.last_seq() == -1
    _put(acct, _rec(P0, 1))
    assert acct.last_seq() == 0
    acct.close(cps)
    assert len(cps.done) == 1 and acct.last_seq() == 0 and acct.seq == 1


def test_commit_record_follows_acknowledgements_and_skips_failed_records():
    calls = []
    acct = CommitAccounting(lambda r, meta: calls.append(r.source_offset["offset"]))
    cps, stats, committed = _Checkpoints(), EpochStats(), {}
    r1, r2, r3 = _rec(P0, 1), _rec(P0, 2), _rec(P1, 3)
    _put(acct, r1, r2, r3)
    acct.close(cps)
    cps.done[0] = True
    acct.failures_reported([(r2, RuntimeError("lost"))])
    acct.acknowledge(acct.checkpointed(), stats)
    acct.release({K0}, committed, stats)
    assert calls == [3]  # P0 held: its records wait
    acct.release(set(), committed, stats)
    assert calls == [3, 1]  # r2 failed: not acknowledged (its re-sent copy may be)


def test_acknowledgement_latency_and_seconds_behind_come_from_acknowledged_records():
    acct, cps, stats, committed = CommitAccounting(), _Checkpoints(), EpochStats(), {}
    now_ms = int(time.time() * 1000)
    _put(acct, _rec(P0, 1, ts=now_ms - 5000))
    _commit_point(acct, cps, committed, stats)
    assert acct.partition_lag({K0: 10}) == {K0: [10.0, 0.0]}  # nothing acknowledged yet
    cps.done[0] = True
    _commit_point(acct, cps, committed, stats)
    assert stats.ack_latency_samples == 1 and stats.ack_latency_ms_max >= 5000
    lag = acct.partition_lag({K0: 10, K1: 0})
    assert lag[K0][0] == 10.0 and lag[K0][1] >= 5.0 and lag[K1] == [0.0, 0.0]
    assert acct.partition_lag({K0: 0}) == {K0: [0.0, 0.0]}  # caught up


def test_resend_queue_keeps_failed_records_ahead_of_records_never_sent():
    q = ResendQueue()
    a, b, c, d = (_rec(P0, i) for i in range(4))
    q.hold_unsent([c], after=0)
    q.failed([a, b])  # reported later, but put earlier: they go first
    assert q.records == [a, b, c]
    q.failed([d])
    assert q.records == [a, b, d, c]
    done = {"seq": -1}
    assert q.waits(lambda seq: done["seq"] >= seq)  # generation 0 may still fail records
    done["seq"] = 0
    assert not q.waits(lambda seq: done["seq"] >= seq)
    assert q.partitions() == {K0}


def test_resend_queue_put_back_restores_the_order_and_the_never_sent_boundary():
    q = ResendQueue()
    a, b, c = (_rec(P0, i) for i in range(3))
    q.failed([a])
    q.hold_unsent([b], after=3)
    batch, unsent_from = q.take()
    assert batch == [a, b] and not q and not q.waits(lambda seq: False)
    q.put_back(batch, unsent_from)
    assert q.records == [a, b] and q.waits(lambda seq: False)
    q.failed([c])  # a later failure still goes ahead of the record never sent
    assert q.records == [a, c, b] and len(q) == 3


class _Sink:
    def __init__(self) -> None:
        self.put: list = []
        self.refuse = 0

    def __call__(self, batch) -> None:
        if self.refuse:
            self.refuse -= 1
            raise RetriableError("queue full")
        self.put.append([r.source_offset["offset"] for r in batch])


def _resender(acct: CommitAccounting, sink: _Sink, timeout_ms: int = 60_000) -> Resender:
    return Resender(sink, RetryPolicy(timeout_ms, 10_000), acct, lambda batch: None)


def test_resender_paces_resends_on_the_delivery_clock_and_holds_partitions_until_acknowledged():
    acct, sink, stats, cps = CommitAccounting(), _Sink(), EpochStats(), _Checkpoints()
    resender = _resender(acct, sink)
    a, b = _rec(P0, 1), _rec(P1, 2)
    _put(acct, a, b)
    acct.close(cps)
    resender.failed([(a, RetriableError("timed out")), (b, NotSentError("no room"))])
    assert resender.held() == {K0, K1} and resender.backoff_left() > 0.05  # backoff started
    resender.send_due(stats)
    assert sink.put == []  # not due yet, and b waits for generation 0 anyway
    resender.queue.due = 0.0
    assert resender.waits()
    cps.done[0] = True
    acct.acknowledge(acct.checkpointed(), stats)
    assert not resender.waits()
    resender.queue.due = time.monotonic() + 60
    resender.send_due(stats)
    assert sink.put == []  # its backoff has not passed
    resender.queue.due = 0.0
    sink.refuse = 1  # the re-send itself is refused: it stays, in order, and backs off longer
    resender.send_due(stats)
    assert resender.queue.records == [a, b] and resender.backoff_left() > 0.1
    resender.queue.due = 0.0
    resender.send_due(stats)
    assert sink.put == [[1, 2]] and not resender and stats.retries == 4
    assert resender.held() == {K0, K1}  # re-sent in generation 1, not yet complete
    resender.settle()
    assert resender._retry.failing(DELIVERY)
    acct.close(cps)
    cps.done[1] = True
    acct.acknowledge(acct.checkpointed(), stats)
    assert resender.held() == set()
    resender.settle()
    assert not resender._retry.failing(DELIVERY)


def test_resender_a_full_client_alone_is_due_at_once_and_a_long_outage_ends_the_retries():
    acct, sink = CommitAccounting(), _Sink()
    resender = _resender(acct, sink, timeout_ms=0)
    _put(acct, _rec(P0, 1))
    resender.queue.due = time.monotonic() + 60  # a backoff left from an earlier streak
    resender.failed([(_rec(P0, 1), NotSentError("no room", backpressure=True))])
    assert resender.backoff_left() == 0.0 and not resender._retry.failing(DELIVERY)
    with pytest.raises(RetriesExhaustedError):  # errors.retry.timeout=0: the first real failure ends them
        resender.failed([(_rec(P0, 2), RetriableError("broker down"))])


def test_failures_of_a_generation_completing_in_a_later_epoch_count_in_no_epoch_below_zero_or_twice():
    """A 30,000-record backlog once counted 34,976 acknowledged in one epoch: the failures were taken
    off the epoch that saw them reported (below zero there) while their generation completed, with
    its whole size, in the next."""
    acct, cps, committed = CommitAccounting(), _Checkpoints(), {}
    first, second = EpochStats(), EpochStats()
    records = [_rec(P0, i) for i in range(10)]
    _put(acct, *records)
    acct.close(cps)  # generation 0: 10 records, not complete at the end of the first epoch
    acct.unacknowledged(4, first)  # 4 of them reported failed (timed out) in the first epoch
    acct.acknowledge(acct.checkpointed(), first)
    assert first.acknowledged == 0
    acct.resent(records[:4])  # generation 1
    cps.done[0] = True  # the second epoch: generation 0 has every outcome
    _commit_point(acct, cps, committed, second)
    assert second.acknowledged == 6
    cps.done[1] = True
    _commit_point(acct, cps, committed, second)
    assert second.acknowledged == second.committed == 10 and acct.discount == 0
