"""The one outcome queue (connect.sink.outcomes) and the in-order re-send helper (connect.sink.resend)."""

from __future__ import annotations

import threading
import time

from connect.errors import NotSentError, RetriableError
from connect.records import make_record
from connect.sink.outcomes import OutcomeQueue
from connect.sink.resend import InOrderReports


def _records(n: int) -> list:
    return [make_record("t", None, str(i).encode(), None, 0, {"p": 0}, {"offset": i}, 0) for i in range(n)]


def test_outcomes_come_out_in_arrival_order_from_another_thread():
    queue = OutcomeQueue()
    t = threading.Thread(target=lambda: [queue.put(i) for i in range(1000)])
    t.start()
    t.join()
    seen: list = []
    assert queue.drain(seen.append) == 1000
    assert seen == list(range(1000))
    assert queue.drain(seen.append) == 0 and len(queue) == 0


def test_wait_returns_as_soon_as_an_outcome_arrives_not_at_its_timeout():
    queue = OutcomeQueue()
    threading.Timer(0.05, queue.put, args=("ack",)).start()
    started = time.monotonic()
    assert queue.wait(30.0) is True
    assert time.monotonic() - started < 10.0
    assert queue.drain(lambda item: None) == 1


def test_wait_does_not_block_when_something_is_queued_and_times_out_when_nothing_comes():
    queue = OutcomeQueue()
    queue.put("ack")
    started = time.monotonic()
    assert queue.wait(30.0) is True
    assert time.monotonic() - started < 5.0
    queue.drain(lambda item: None)
    queue.arrived.set()  # a stale wake-up from an outcome already served must not end the wait
    started = time.monotonic()
    assert queue.wait(0.2) is False
    assert time.monotonic() - started >= 0.15
    assert queue.wait(0) is False


def test_held_failures_are_reported_in_put_order_whatever_order_they_were_served_in():
    reported: list = []
    reports = InOrderReports(lambda r, e: reported.append((r, e)))
    recs = _records(5)
    for order in (3, 0, 4, 1):  # a purge reports in no useful order
        reports.hold((0, order), recs[order], RetriableError(f"failed {order}"), token=order)
    assert len(reports) == 4 and reported == []  # nothing reported before the client is abandoned
    assert reports.report_held() == [0, 1, 3, 4]
    assert [r for r, _e in reported] == [recs[0], recs[1], recs[3], recs[4]]
    assert all(type(e) is RetriableError for _r, e in reported)
    assert len(reports) == 0 and reports.report_held() == []


def test_records_never_sent_are_reported_not_sent_after_the_held_ones():
    reported: list = []
    reports = InOrderReports(lambda r, e: reported.append((r, e)))
    recs = _records(4)
    reports.hold(1, recs[1], RetriableError("timed out"))
    reports.hold(0, recs[0], RetriableError("timed out"))
    reports.report_held()
    reports.not_sent(recs[2:], "no room until the deadline", backpressure=True)
    reports.not_sent([], "nothing")
    assert [r for r, _e in reported] == recs
    tail = [e for _r, e in reported[2:]]
    assert all(isinstance(e, NotSentError) and e.backpressure for e in tail)
    assert not any(isinstance(e, NotSentError) for _r, e in reported[:2])
    reports.not_sent(recs[:1], "target unreachable")
    assert isinstance(reported[-1][1], NotSentError) and not reported[-1][1].backpressure
    assert "target unreachable" in str(reported[-1][1])
