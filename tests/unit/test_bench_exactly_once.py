"""``bench/exactly_once.py``'s pure parts on made-up rounds: the run order, medians, ratios (exactly-once
/ at-least-once per epoch length, each / the raw loop), the goal line and a figure left out."""

from __future__ import annotations

import pytest
from bench_modules import bench_module_with_e2e


def _eo():
    return bench_module_with_e2e("exactly_once")


def _f(msg_s: float, committed_s: float, p50_ms: float, p99_ms: float) -> dict[str, float]:
    return {"msg_s": msg_s, "committed_s": committed_s, "p50_ms": p50_ms, "p99_ms": p99_ms}


ROUNDS = [
    {"raw": _f(100_000, 2, 5, 10), "alo-1s": _f(50_000, 4, 300, 600), "eos-1s": _f(25_000, 8, 800, 1_200),
     "alo-10s": _f(50_000, 4, 300, 600), "eos-10s": _f(45_000, 10, 5_000, 9_000)},
    {"raw": _f(80_000, 2, 5, 10), "alo-1s": _f(40_000, 5, 300, 400), "eos-1s": _f(30_000, 7, 700, 1_000),
     "alo-10s": _f(40_000, 5, 300, 300), "eos-10s": _f(30_000, 10, 5_000, 9_900)},
    {"raw": _f(90_000, 2, 5, 10), "alo-1s": _f(45_000, 4, 300, 500), "eos-1s": _f(30_000, 7, 900, 1_000),
     "alo-10s": _f(60_000, 4, 300, 900), "eos-10s": _f(54_000, 10, 5_000, 9_000)},
]


def test_medians_ratios_and_the_goal_are_printed_and_returned(capsys):
    result = _eo().summary(ROUNDS, [1, 10], raw=True, records=200_000)
    assert result["median"]["eos-10s"]["msg_s"] == 45_000
    assert result["median"]["alo-1s"]["p99_ms"] == 500
    assert result["median"]["raw"]["msg_s"] == 90_000
    ten = result["ratios"]["eos-10s / alo-10s"]
    assert ten["msg_s"] == pytest.approx(0.9)  # per-round 0.9, 0.75, 0.9: the median, not a ratio of medians
    assert ten["p99_ms"] == pytest.approx(15)  # per-round 15, 33, 10
    assert result["ratios"]["eos-1s / alo-1s"]["msg_s"] == pytest.approx(30 / 45)
    assert ten["visible_msg_s"] == pytest.approx(0.4)  # per-round committed s 4/10, 5/10, 4/10
    assert result["median"]["eos-10s"]["visible_msg_s"] == pytest.approx(20_000)  # 200,000 records in 10 s
    assert result["ratios"]["alo-10s / raw"]["msg_s"] == pytest.approx(0.5)
    assert result["ratios"]["alo-10s / raw"]["visible_msg_s"] == pytest.approx(0.5)
    assert result["goal_met"] == {"msg_s": True, "visible_msg_s": False}
    printed = capsys.readouterr().out
    assert "medians of 3 round(s)" in printed
    assert ("eos-10s / alo-10s   throughput written 0.90  throughput visible 0.40  p99 latency 15.00"
            in printed), printed
    assert "eos-1s / raw        throughput written 0.33  throughput visible 0.29" in printed, printed
    assert "at a 10 s epoch: written 0.90 met, visible 0.40 NOT met" in printed, printed
    assert "eos-10s            45,000          10.0        20,000          5000          9000" in printed, printed


def test_a_goal_missed_says_so():
    rounds = [{"alo-10s": _f(50_000, 4, 300, 600), "eos-10s": _f(35_000, 10, 5_000, 9_000)}]
    result = _eo().summary(rounds, [10], raw=False, records=200_000)
    assert result["goal_met"] == {"msg_s": False, "visible_msg_s": False}
    assert "raw" not in result["median"] and not any("raw" in k for k in result["ratios"])


def test_a_contender_that_did_not_run_shows_as_a_dash_and_no_goal(capsys):
    rounds = [{"alo-3s": _f(50_000, 4, 300, 600)}]
    result = _eo().summary(rounds, [3], raw=False, records=200_000)
    assert result["median"]["eos-3s"]["msg_s"] is None
    assert result["ratios"]["eos-3s / alo-3s"]["msg_s"] is None
    assert result["goal_met"] == {"msg_s": None, "visible_msg_s": None}
    printed = capsys.readouterr().out
    assert "eos-3s / alo-3s     throughput written -  throughput visible -  p99 latency -" in printed, printed
    assert "goal" not in printed


def test_which_mode_goes_first_alternates_every_round():
    kinds = _eo().kinds
    assert kinds([1, 10], raw=True, rnd=0) == ["raw", "alo-1s", "eos-1s", "alo-10s", "eos-10s"]
    assert kinds([1, 10], raw=True, rnd=1) == ["eos-1s", "alo-1s", "eos-10s", "alo-10s", "raw"]
    assert kinds([3], raw=False, rnd=2) == ["alo-3s", "eos-3s"]
