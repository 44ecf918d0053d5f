"""``bench/e2e.py``'s longest stall inside the steady window, on arrivals made up here."""

from __future__ import annotations

import pytest
from bench_modules import bench_module

longest_stalls = bench_module("e2e").longest_stalls
steady_rate = bench_module("e2e").steady_rate


def _arrivals(rows):
    """(time, {partition: count}) -> the watcher's (time, count, latencies, {partition: count})."""
    return [(t, sum(parts.values()), (), parts) for t, parts in rows]


def test_the_longest_time_without_any_record_inside_the_window():
    # 100 records; 10% at t=1, 90% at t=9; nothing arrives between 4.0 and 5.2
    rows = [(float(t), {0: 5, 1: 5}) for t in range(5)] + [(5.2 + t, {0: 5, 1: 5}) for t in range(5)]
    overall, per_partition = longest_stalls(_arrivals(rows), 100)
    assert overall == pytest.approx(1.2)
    assert per_partition == pytest.approx(1.2)


def test_a_gap_outside_the_steady_window_does_not_count():
    # the first record comes 3 s after the others' start: before the 10% mark
    rows = [(0.0, {0: 1}), (3.0, {0: 9, 1: 1})] + [(3.0 + 0.05 * i, {0: 5, 1: 5}) for i in range(1, 10)]
    overall, per_partition = longest_stalls(_arrivals(rows), 100)
    assert overall == pytest.approx(0.05)
    assert per_partition == pytest.approx(0.05)


def test_one_partition_waiting_while_the_other_moves_shows_only_per_partition():
    # partition 1 receives nothing from t=2 to t=3.5 while partition 0 keeps arriving every 0.1 s
    rows = []
    for i in range(40):
        t = 0.1 * i
        rows.append((t, {0: 2, 1: 2} if not 2.0 < t < 3.5 else {0: 4}))
    total = sum(sum(p.values()) for _, p in rows)
    overall, per_partition = longest_stalls(_arrivals(rows), total)
    assert overall == pytest.approx(0.1)
    assert per_partition == pytest.approx(1.5)
    assert steady_rate(_arrivals(rows), total) > 0
