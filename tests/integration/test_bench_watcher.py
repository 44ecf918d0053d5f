"""The benchmark's watcher (``bench/e2e.py``) must measure the mirror, not itself.

Issue 36 measured two pairs at half the speed of one, with a 0.95 s stall in the steady window. The
pairs did not wait: the watcher did. librdkafka stops fetching for ``fetch.queue.backoff.ms``
(default 1 s) whenever a consumer's local queue holds ``queued.min.messages`` (100,000); a watcher
that once fell that far behind read ~150,000 records, waited out the second, and read again. The
signal checked here is that mechanism itself, librdkafka's own fetch decisions (its ``fetch``
debug lines), not a rate: the watcher reads a backlog larger than the threshold and never backs
off for longer than a stall the benchmark accepts.
"""

from __future__ import annotations

import logging
import re
import threading

import pytest
from bench_modules import bench_module

e2e = bench_module("e2e")

RECORDS = 300_000  # three times queued.min.messages: the watcher's queue fills while it reads
_BACKOFF = re.compile(r"Fetch backoff for (\d+)ms: Local: Queue full")


class _FetchBackoffs(logging.Handler):
    """librdkafka's ``Fetch backoff for N ms: Local: Queue full`` lines, as N."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.ms: list[int] = []
        self._lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        found = _BACKOFF.search(record.getMessage())
        if found:
            with self._lock:
                self.ms.append(int(found.group(1)))


@pytest.fixture
def backlog(kafka_pair, unique):
    target = kafka_pair[1]
    e2e._create(target.bootstrap, unique)
    e2e.produce(target.bootstrap, unique, RECORDS, 0, 100)
    return target.bootstrap, unique


def test_the_watcher_never_waits_out_a_full_queue_backoff_longer_than_a_stall(backlog, monkeypatch):
    bootstrap, topic = backlog
    backoffs = _FetchBackoffs()
    logger = logging.getLogger(f"test-watcher-{topic}")
    logger.addHandler(backoffs)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    # The watcher's own consumer settings, with librdkafka's fetch decisions logged.
    monkeypatch.setitem(e2e.WATCHER_CONSUMER, "debug", "fetch")
    monkeypatch.setitem(e2e.WATCHER_CONSUMER, "logger", logger)

    arrivals = e2e.watch(bootstrap, topic, RECORDS, 120, latency=False)

    assert sum(n for _, n, _, _ in arrivals) == RECORDS
    assert sum(sum(parts.values()) for *_, parts in arrivals) == RECORDS
    assert backoffs.ms, "the watcher's queue never filled: the backlog does not exercise the backoff"
    assert max(backoffs.ms) <= e2e.STALL_S * 1000, (
        f"the watcher paused its fetches for {max(backoffs.ms)} ms on a full local queue "
        f"({len(backoffs.ms)} backoffs): it would measure its own pauses as the mirror's stalls")
