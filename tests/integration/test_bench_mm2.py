"""``bench/mm2.py`` still runs: MirrorMaker 2 and `connect run` side by side, tiny.

The bench runs as users run it (a process), on the session's two Apache Kafka clusters
(``--clusters``): a 20,000-record backlog (enough CPU clock ticks between the 10 % and 90 % marks),
one round, one contender pair (MM2 ``tasks.max=1`` and one task pair) and the raw loop, then
latency at 500 msg/s for 6 s. Each contender must have mirrored every record (the bench fails
otherwise) and every figure of the JSON must be there and plausible. Two MM2 and two `connect run`
starts: 2.5 min on a loaded 2-core machine."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]


def test_the_mm2_bench_measures_both_contenders_and_the_floor(apache_kafka_pair, tmp_path):
    a, b = apache_kafka_pair
    out = tmp_path / "mm2.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "mm2.py"), "--clusters", f"{a.bootstrap},{b.bootstrap}",
         "--records", "20000", "--rounds", "1", "--tasks", "1", "--rate", "500", "--seconds", "6", "--json", str(out)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "connect-1 / mm2-1" in done.stdout, done.stdout
    result = json.loads(out.read_text())
    (thr,), (lat,) = result["throughput"], result["latency"]
    assert set(thr) == set(lat) == {"raw", "mm2-1", "connect-1"}
    for kind, figures in thr.items():
        assert figures["msg_s"] > 0 and figures["cpu_us"] > 0 and figures["first_s"] > 0, (kind, figures)
        assert figures["rss_mb"] > 20, (kind, figures)  # a process tree, not nothing
    assert thr["mm2-1"]["rss_mb"] > 100, thr["mm2-1"]  # a JVM was measured, not the bench's own process
    for kind, figures in lat.items():
        assert 0 < figures["p50_ms"] <= figures["p99_ms"] <= figures["max_ms"], (kind, figures)
    for label in ("connect-1 / mm2-1", "connect-1 / raw"):
        ratios = result["ratios"][label]
        assert all(v is not None and math.isfinite(v) and v > 0 for v in ratios.values()), (label, ratios)
