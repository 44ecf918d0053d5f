"""The runner under outages: transient failures never skipped, epochs bounded, work carried over.

A scripted sink stands in for a destination that is down (it never acknowledges, or reports
every record as a transient failure) and comes back; the real broker versions of these
scenarios are in tests/integration/test_outages.py.
"""

from __future__ import annotations

import time
from typing import Sequence

import pytest

from connect.errors import RetriableError
from connect.records import ConnectRecord, partition_key
from connect.sink import SinkTask
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
    return TaskPairRunner(connector="outage", task_id=0, source=source or MemorySourceTask(), sink=sink,
                          source_config={"records": str(records), "batch.size": "10"}, sink_config={},
                          policy=policy, dlq_factory=dlq, stop_requested=stop)


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
    assert runner._retry.failing("source poll")


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
