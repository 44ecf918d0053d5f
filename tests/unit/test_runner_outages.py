"""The runner under outages: transient failures never skipped, epochs bounded, work carried over.

A scripted sink stands in for a destination that is down (it never acknowledges, or reports
every record as a transient failure) and comes back; the real broker versions of these
scenarios are in tests/integration/test_outages.py.
"""

from __future__ import annotations

import time
from typing import Sequence

import pytest

from connect.errors import NotSentError, RetriableError
from connect.records import ConnectRecord, partition_key
from connect.sink import SinkTask
from connect.tasks.plan import PairPlan
from connect.tasks.policy import RunnerPolicy
from connect.tasks.results import FAILED, RUNNING
from connect.tasks.runner import TaskPairRunner
from connect.testing import MemorySourceTask

P0 = partition_key({"topic": "memory", "partition": 0})


class OutageSink(SinkTask):
    """``down=True``: nothing is acknowledged (flush waits its whole time budget) or, with
    ``fail_transient``, every record is reported as a transient failure. ``down=False``: all good."""

    def __init__(self, fail_transient: bool = False):
        super().__init__()
        self.down = True
        self.fail_transient = fail_transient
        self.buffer: list[ConnectRecord] = []
        self.delivered: list[int] = []
        self.flush_waits: list[float] = []

    def start(self, config, context):
        pass

    def put(self, records: Sequence[ConnectRecord]) -> None:
        self.buffer.extend(records)

    def flush(self, offsets):
        if self.down and not self.fail_transient:
            waited = self.context.time_left()
            self.flush_waits.append(waited)
            time.sleep(waited)
            return False
        for r in self.buffer:
            if self.down:
                self.context.errant_record_reporter.report(r, RetriableError("target unreachable"))
            else:
                self.delivered.append(r.source_offset["offset"])
        self.buffer = []
        return True

    def stop(self):
        pass


def _runner(sink, *, tolerance_all=False, dlq=None, retry_timeout_ms=60_000, epoch_ms=300, grace_ms=200,
            records=50, stop=lambda: False, source=None):
    policy = RunnerPolicy(epoch_max_ms=epoch_ms, epoch_grace_ms=grace_ms, retry_timeout_ms=retry_timeout_ms,
                          retry_delay_max_ms=50, tolerance_all=tolerance_all, max_in_flight_records=20)
    return TaskPairRunner(PairPlan(connector="outage", task_id=0, source=source or MemorySourceTask(), sink=sink,
                                   source_config={"records": str(records), "batch.size": "10"}, sink_config={},
                                   policy=policy, dlq_factory=dlq, stop_requested=stop))


def test_unacknowledged_epoch_ends_on_time_commits_nothing_then_resumes():
    sink = OutageSink()
    runner = _runner(sink)
    t0 = time.monotonic()
    down = runner.run_epoch(1)
    elapsed = time.monotonic() - t0
    assert down.state == RUNNING, down.trace
    assert elapsed < 0.3 + 0.2 + 0.15, f"epoch took {elapsed:.2f} s, bound is epoch.max.ms + grace"
    assert down.offsets == {}
    sink.down = False
    up = runner.run_epoch(2, max_records=1000)
    assert up.state == RUNNING, up.trace
    assert up.offsets == {P0: {"offset": 49}}
    assert sorted(sink.delivered) == list(range(50))  # what was in flight at the epoch end arrived too


@pytest.mark.parametrize("tolerance_all", [False, True])
def test_transient_failures_are_never_skipped_by_tolerance_dlq_or_hooks(tolerance_all):
    dlq_used = []

    def dlq():
        dlq_used.append(1)
        raise AssertionError("a transient failure must never reach the dead-letter topic")

    class Hooks(MemorySourceTask):
        def dismiss_failed_msgs(self, records):
            raise AssertionError("a transient failure must never reach the RIP-45 hooks")

    sink = OutageSink(fail_transient=True)
    runner = _runner(sink, tolerance_all=tolerance_all, dlq=dlq, source=Hooks())
    for epoch in range(3):
        result = runner.run_epoch(epoch)
        assert result.state == RUNNING, result.trace
        assert result.offsets == {}
        assert result.stats["skipped"] == 0 and result.stats["dead_lettered"] == 0
    assert result.stats["transient"] > 0
    assert any("target unreachable" in reason for reason in result.stats["failure_reasons"])
    sink.down = False
    result = runner.run_epoch(9, max_records=1000)
    assert result.state == RUNNING, result.trace
    assert result.offsets == {P0: {"offset": 49}}
    assert sorted(set(sink.delivered)) == list(range(50))
    assert not dlq_used


def test_transient_failures_past_the_retry_timeout_fail_the_pair_as_retriable():
    sink = OutageSink(fail_transient=True)
    runner = _runner(sink, retry_timeout_ms=400)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        result = runner.run_epoch(0)
        assert result.offsets == {}
        if result.state == FAILED:
            break
    assert result.state == FAILED
    assert result.retriable, "the worker restarts such a pair with backoff"
    assert "delivery still failing after errors.retry.timeout=400 ms" in result.trace


def test_stop_signal_ends_the_epoch_within_the_grace_even_when_nothing_is_acknowledged():
    sink = OutageSink()
    stop = {"now": False}
    runner = _runner(sink, epoch_ms=60_000, grace_ms=300, stop=lambda: stop["now"])
    stop["now"] = True
    t0 = time.monotonic()
    result = runner.run_epoch(1)
    assert time.monotonic() - t0 < 0.6
    assert result.state == RUNNING and result.offsets == {}


def test_poll_retries_honour_the_epoch_deadline_and_keep_their_clock_across_epochs():
    runner = _runner(OutageSink(fail_transient=False), retry_timeout_ms=60_000, epoch_ms=200, grace_ms=50)
    runner.sink.down = False
    runner.source.poll_failures = 10**9
    t0 = time.monotonic()
    result = runner.run_epoch(1)
    assert time.monotonic() - t0 < 0.4
    assert result.state == RUNNING and result.stats["retries"] >= 1
    assert runner._mover.retry.failing("source poll")


class RefusingPutSink(OutageSink):
    """``put`` raises a transient error while down (e.g. target metadata unreachable), without
    taking anything; nothing is in flight, so a flush is complete at once."""

    def __init__(self):
        super().__init__()
        self.down = True

    def put(self, records: Sequence[ConnectRecord]) -> None:
        if self.down:
            raise RetriableError("cannot read target metadata")
        super().put(records)

    def flush(self, offsets):
        for r in self.buffer:
            self.delivered.append(r.source_offset["offset"])
        self.buffer = []
        return True


def test_a_batch_the_sink_never_took_keeps_its_offsets_and_goes_out_first_later():
    sink = RefusingPutSink()
    runner = _runner(sink)
    down = runner.run_epoch(1)
    assert down.state == RUNNING, down.trace
    assert down.offsets == {}, "offsets of records the sink never took were committed"
    sink.down = False
    committed = {}
    for epoch in range(2, 10):
        result = runner.run_epoch(epoch)
        assert result.state == RUNNING, result.trace
        committed.update(result.offsets)
        if committed.get(P0, {}).get("offset") == 49:
            break
    assert sink.delivered == list(range(50)), "every record delivered once, in order"


class _Gen:
    def __init__(self):
        self.left = 0

    def done(self):
        return self.left == 0


class AsyncSink(SinkTask):
    """An asynchronous sink whose outcomes arrive only when the test says so (``deliver``), like a
    producer whose acknowledgements come later; ``fail_offsets`` are reported as transient failures."""

    def __init__(self):
        super().__init__()
        self.gen = _Gen()
        self.in_flight: list[tuple[ConnectRecord, _Gen]] = []
        self.delivered: list[int] = []
        self.fail_offsets: set[int] = set()
        self.on_wait = None
        self.waits = 0

    def start(self, config, context):
        pass

    def put(self, records: Sequence[ConnectRecord]) -> None:
        self.in_flight.extend((r, self.gen) for r in records)
        self.gen.left += len(records)

    def checkpoint(self):
        gen, self.gen = self.gen, _Gen()
        return gen.done

    def wait_outcomes(self, timeout):
        self.waits += 1
        if self.on_wait is not None and timeout > 0:
            self.on_wait()
        else:
            time.sleep(min(timeout, 0.01))

    def deliver(self, count: int | None = None) -> None:
        """The next ``count`` records in flight get their outcome (all when None)."""
        count = len(self.in_flight) if count is None else count
        done, self.in_flight = self.in_flight[:count], self.in_flight[count:]
        for r, gen in done:
            offset = r.source_offset["offset"]
            if offset in self.fail_offsets:
                self.fail_offsets.discard(offset)
                self.context.errant_record_reporter.report(r, RetriableError("request timed out"))
            else:
                self.delivered.append(offset)
            gen.left -= 1

    def flush(self, offsets):
        raise AssertionError("an asynchronous sink is never flushed")

    def stop(self):
        pass


class CommitRecordSource(MemorySourceTask):
    def start(self, config, context):
        super().start(config, context)
        self.committed_records: list[int] = []

    def commit_record(self, record, metadata):
        self.committed_records.append(record.source_offset["offset"])


def _async_runner(sink, records=50, epoch_ms=200, grace_ms=2000, max_in_flight=40, stop=lambda: False,
                  source=None):
    # max.in.flight.records=40: a checkpoint every 10 records, one batch of the memory source
    policy = RunnerPolicy(epoch_max_ms=epoch_ms, epoch_grace_ms=grace_ms, retry_timeout_ms=60_000,
                          retry_delay_max_ms=50, max_in_flight_records=max_in_flight)
    return TaskPairRunner(PairPlan(connector="acks", task_id=0, source=source or MemorySourceTask(), sink=sink,
                                   source_config={"records": str(records), "batch.size": "10"}, sink_config={},
                                   policy=policy, stop_requested=stop))


def test_an_asynchronous_sink_ends_epochs_without_draining_and_commits_complete_checkpoints():
    sink = AsyncSink()
    runner = _async_runner(sink, max_in_flight=1000)
    t0 = time.monotonic()
    first = runner.run_epoch(1)
    assert time.monotonic() - t0 < 0.2 + 0.5, "the epoch waited for records in flight (grace is 2 s)"
    assert first.state == RUNNING and first.offsets == {}  # all 50 in flight, none acknowledged
    assert first.stats["in_flight"] == 50
    sink.deliver()  # acknowledgements arrive between epochs
    second = runner.run_epoch(2)
    assert second.offsets == {P0: {"offset": 49}} and second.stats["records"] == 0
    assert second.stats["in_flight"] == 0
    assert sink.delivered == list(range(50))


def test_a_partition_moves_to_the_last_checkpoint_whose_records_and_all_before_have_outcomes():
    sink = AsyncSink()
    runner = _async_runner(sink)  # checkpoints after records 9, 19, 29, 39, 49
    runner.run_epoch(1)
    sink.deliver(23)  # checkpoints 9 and 19 complete, 29 not
    assert runner.run_epoch(2).offsets == {P0: {"offset": 19}}
    # Outcomes out of order: the records after 29 have theirs, 20-22 of the next one do not.
    sink.in_flight = sink.in_flight[7:] + sink.in_flight[:7]
    sink.deliver(20)
    assert runner.run_epoch(3).offsets == {}, "committed past records still in flight"
    sink.deliver()
    assert runner.run_epoch(4).offsets == {P0: {"offset": 49}}


def test_backpressure_waits_for_the_oldest_checkpoint_not_for_everything_in_flight():
    sink = AsyncSink()
    in_flight_seen = []

    def one_checkpoint_per_wait():  # the oldest 10 records get their outcome at each real wait
        in_flight_seen.append(len(sink.in_flight))
        sink.deliver(10)

    sink.on_wait = one_checkpoint_per_wait
    runner = _async_runner(sink, records=200, epoch_ms=2000, max_in_flight=40)
    committed = {}
    for epoch in range(1, 5):
        committed.update(runner.run_epoch(epoch, max_records=200).offsets)
        if committed.get(P0) == {"offset": 199}:
            break
        sink.deliver()  # the tail gets its outcomes between epochs
    assert committed == {P0: {"offset": 199}}
    assert sink.delivered == list(range(200))
    # records kept moving while 30 were in flight: never drained to 0 before putting more
    assert in_flight_seen and min(in_flight_seen[:-1]) >= 30, in_flight_seen


def test_an_asynchronous_sink_holds_a_partition_for_its_resent_record_even_when_later_ones_completed():
    sink = AsyncSink()
    sink.fail_offsets = {5}
    runner = _async_runner(sink, records=30)
    runner.run_epoch(1)
    sink.deliver()  # 0-4 acknowledged, 5 failed (transient), 6-29 acknowledged
    second = runner.run_epoch(2)  # 6-29 must not be committed before 5 is re-sent and acknowledged
    assert second.offsets == {}, second.offsets
    assert [r.source_offset["offset"] for r, _ in sink.in_flight] == [5]  # re-sent
    third = runner.run_epoch(3)
    assert third.offsets == {}  # and still in flight
    sink.deliver()
    assert runner.run_epoch(4).offsets == {P0: {"offset": 29}}
    assert sorted(sink.delivered) == list(range(30))


def test_an_asynchronous_sink_drains_within_the_grace_when_the_worker_stops():
    sink = AsyncSink()
    stopping = []
    runner = _async_runner(sink, records=20, grace_ms=300, stop=lambda: bool(stopping))
    runner.run_epoch(1)
    stopping.append(True)
    sink.on_wait = lambda: sink.deliver(5)  # outcomes come while draining
    result = runner.run_epoch(2)
    assert result.offsets == {P0: {"offset": 19}} and result.stats["in_flight"] == 0
    # nothing arrives: the stop still ends within the grace
    sink2 = AsyncSink()
    runner2 = _async_runner(sink2, records=20, grace_ms=300, stop=lambda: bool(stopping))
    stopping.clear()
    runner2.run_epoch(1)
    stopping.append(True)
    t0 = time.monotonic()
    result = runner2.run_epoch(2)
    assert time.monotonic() - t0 < 0.3 + 0.2
    assert result.offsets == {} and result.stats["in_flight"] == 20


def test_an_asynchronous_sink_that_refused_a_batch_until_the_deadline_gets_it_first_next_time():
    sink = AsyncSink()
    refusing = [True]
    real_put = sink.put

    def put(records):
        if refusing[0]:
            raise RetriableError("cannot read target metadata")
        real_put(records)

    sink.put = put
    runner = _async_runner(sink, records=10)  # one batch, refused whole
    assert runner.run_epoch(1).offsets == {}
    refusing[0] = False
    committed = {}
    for epoch in range(2, 6):
        committed.update(runner.run_epoch(epoch).offsets)
        sink.deliver()
    assert committed == {P0: {"offset": 9}}
    assert sink.delivered == list(range(10))


def test_commit_record_follows_complete_checkpoints_of_an_asynchronous_sink():
    sink = AsyncSink()
    sink.fail_offsets = {3}
    source = CommitRecordSource()
    runner = _async_runner(sink, records=20, source=source)
    runner.run_epoch(1)
    assert source.committed_records == []
    sink.deliver(15)  # 3 fails (re-sent), 0-9 complete, 10-14 of the next checkpoint only
    runner.run_epoch(2)
    assert source.committed_records == [], "the partition waits for the re-sent 3"
    sink.deliver()
    runner.run_epoch(3)
    assert sorted(source.committed_records) == list(range(20)), "each acknowledged record once, 3 too"


class _LaneSink(AsyncSink):
    """An asynchronous sink that keeps a queue's order as the RocketMQ and Kafka sinks do: a failed
    record fails everything in flight behind it. Its put refuses the rest of one batch
    (``NotSentError``, as a put with no room until the deadline does) from offset ``refuse_at``."""

    def __init__(self, refuse_at: int):
        super().__init__()
        self.refuse_at: int | None = refuse_at

    def put(self, records):
        for i, r in enumerate(records):
            if r.source_offset["offset"] == self.refuse_at:
                self.refuse_at = None
                super().put(records[:i])
                for rest in records[i:]:
                    self.context.errant_record_reporter.report(rest, NotSentError("no room until the deadline"))
                return
        super().put(records)

    def deliver(self, count=None):
        failed = False
        for r, gen in self.in_flight:
            offset = r.source_offset["offset"]
            failed = failed or offset in self.fail_offsets
            if failed:
                self.fail_offsets.discard(offset)
                self.context.errant_record_reporter.report(r, RetriableError("request timed out"))
            else:
                self.delivered.append(offset)
            gen.left -= 1
        self.in_flight = []


def test_records_a_put_never_sent_go_out_behind_an_earlier_failure_reported_after_them():
    # 15-19 are reported not sent at once; 12, put before them, fails only afterwards (a send that
    # times out): 12-14 must still reach the destination before 15-19, first copies in source order.
    sink = _LaneSink(refuse_at=15)
    sink.fail_offsets = {12}
    sink.on_wait = sink.deliver  # outcomes come while the runner waits to re-send 15-19
    runner = _async_runner(sink, records=30, epoch_ms=500)
    committed = {}
    for epoch in range(1, 10):
        committed.update(runner.run_epoch(epoch).offsets)
        sink.deliver()
        if committed.get(P0) == {"offset": 29}:
            break
    assert committed == {P0: {"offset": 29}}
    firsts = list(dict.fromkeys(sink.delivered))
    assert firsts == list(range(30)), f"first copies out of source order: {firsts}"
