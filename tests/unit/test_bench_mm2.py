"""``bench/mm2.py``'s summary on made-up rounds: every figure and ratio, latency included (the
integration smoke test, tests/integration/test_bench_mm2.py, runs the throughput measure only)."""

from __future__ import annotations

import pytest
from bench_modules import bench_module_with_e2e


def _mm2():
    return bench_module_with_e2e("mm2")


def _thr(msg_s: float, cpu_us: float, rss_mb: float, first_s: float) -> dict[str, float]:
    return {"msg_s": msg_s, "cpu_us": cpu_us, "rss_mb": rss_mb, "first_s": first_s}


def test_medians_and_ratios_of_every_figure_are_printed_and_returned(capsys):
    mm2 = _mm2()
    thr = [{"raw": _thr(100_000, 5, 60, 2), "mm2-1": _thr(40_000, 20, 1000, 20), "connect-1": _thr(50_000, 10, 400, 30)},
           {"raw": _thr(120_000, 5, 60, 2), "mm2-1": _thr(50_000, 25, 1100, 22), "connect-1": _thr(40_000, 10, 500, 30)}]
    lat = [{"raw": {"p50_ms": 2, "p99_ms": 5}, "mm2-1": {"p50_ms": 20, "p99_ms": 60},
            "connect-1": {"p50_ms": 300, "p99_ms": 600}},
           {"raw": {"p50_ms": 2, "p99_ms": 7}, "mm2-1": {"p50_ms": 30, "p99_ms": 80},
            "connect-1": {"p50_ms": 300, "p99_ms": 400}}]
    result = mm2.summary(thr, lat, [1], raw=True)
    assert result["median"]["connect-1"]["msg_s"] == 45_000
    assert result["median"]["mm2-1"]["p99_ms"] == 70
    assert result["median"]["connect-1"]["records_per_cpu_s"] == pytest.approx(100_000)
    ours_mm2 = result["ratios"]["connect-1 / mm2-1"]
    assert ours_mm2["msg_s"] == pytest.approx((50 / 40 + 40 / 50) / 2)  # median of per-round ratios
    assert ours_mm2["records_per_cpu_s"] == pytest.approx((2 + 2.5) / 2)
    assert ours_mm2["p99_ms"] == pytest.approx((10 + 5) / 2)
    assert all(v is not None for ratios in result["ratios"].values() for v in ratios.values()), result["ratios"]
    printed = capsys.readouterr().out
    assert "connect-1 / mm2-1     throughput 1.02  records per CPU second 2.25" in printed, printed
    assert "p50 latency 12.50  p99 latency 7.50" in printed, printed


def test_a_measure_left_out_shows_as_a_dash_not_a_figure(capsys):
    thr = [{"mm2-1": _thr(40_000, 20, 1000, 20), "connect-1": _thr(50_000, 10, 400, 30)}]
    result = _mm2().summary(thr, [], [1], raw=False)
    assert result["ratios"]["connect-1 / mm2-1"]["p99_ms"] is None
    assert result["median"]["mm2-1"]["p50_ms"] is None
    assert "p50 latency -  p99 latency -" in capsys.readouterr().out


def test_who_goes_first_in_a_pair_alternates_every_round():
    order = _mm2().order
    kinds = ["raw", "mm2-1", "connect-1", "mm2-2", "connect-2"]
    assert order(kinds, 0) == kinds
    assert order(kinds, 1) == ["connect-1", "mm2-1", "connect-2", "mm2-2", "raw"]


def _fan(p99: float, cores: float, rss: float) -> dict[str, float]:
    return {"p50_ms": p99 / 2, "p99_ms": p99, "topic_p99_median_ms": p99, "topic_p99_max_ms": p99 * 2,
            "cores": cores, "rss_mb": rss, "all_flowing_s": 10}


def test_many_topics_medians_and_ratios(capsys):
    fan = [{"raw": _fan(100, 0.1, 50), "mm2-1": _fan(200, 0.6, 1200), "connect-1": _fan(100, 0.2, 400)},
           {"raw": _fan(100, 0.1, 50), "mm2-1": _fan(400, 0.4, 1000), "connect-1": _fan(100, 0.2, 500)}]
    result = _mm2().fan_summary(fan, 1, raw=True)
    assert result["median"]["mm2-1"]["p99_ms"] == 300 and result["median"]["connect-1"]["rss_mb"] == 450
    ours = result["ratios"]["connect-1 / mm2-1"]
    assert ours["p99_ms"] == pytest.approx((0.5 + 0.25) / 2) and ours["rss_mb"] == pytest.approx((1 / 3 + 0.5) / 2)
    assert result["ratios"]["connect-1 / raw"]["cores"] == pytest.approx(2)
    printed = capsys.readouterr().out
    assert "connect-1 / mm2-1     p50 0.38  p99 0.38" in printed and "peak RSS 0.42" in printed, printed


def test_many_topics_regex_covers_exactly_the_rounds_topics():
    import re

    topics = _mm2().mm2_topics
    names, regex = topics.names("m1r0fconnect1", 200)
    assert len(set(names)) == 200 and all(re.fullmatch(regex, n) for n in names)
    assert not re.fullmatch(regex, "m1r0fconnect1-f001-out") and not re.fullmatch(regex, "m1r0fmm21-f001")
    assert topics.target_of("m1r0fmm21", names[0]) == "m1r0fmm21.m1r0fconnect1-f000"
