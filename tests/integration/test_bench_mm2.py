"""``bench/mm2.py`` still runs: MirrorMaker 2 and `connect run` side by side, tiny.

The bench runs as users run it (a process), on the session's two Apache Kafka clusters
(``--clusters``): a 30,000-record backlog (enough CPU clock ticks between the 10 % and 90 % marks
even for the raw loop), one round, the throughput measure only, one contender pair (MM2
``tasks.max=1`` and one task pair) and the raw loop: one MM2 and one `connect run` start. MM2 finds
its plugins by their ServiceLoader manifests (``plugin.discovery=service_load``, as its own start-up
warning advises, for the top-level and the herder's worker config): its default class-path scan
takes 60-85 s of its start on a loaded 2-core machine. Each contender must have mirrored every
record (the bench fails otherwise) and every throughput figure and ratio must be in the JSON and
the printed summary. The latency measure starts every contender again (twice the time): its
figures and ratios are checked on made-up rounds in tests/unit/test_bench_mm2.py."""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]
THROUGHPUT = ("msg_s", "records_per_cpu_s", "cpu_us", "rss_mb", "first_s")


def test_the_mm2_bench_measures_both_contenders_and_the_floor(apache_kafka_pair, tmp_path):
    a, b = apache_kafka_pair
    out = tmp_path / "mm2.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "mm2.py"), "--clusters", f"{a.bootstrap},{b.bootstrap}",
         "--records", "30000", "--rounds", "1", "--tasks", "1", "--only", "throughput", "--json", str(out),
         "--mm2-set", "plugin.discovery=service_load", "--mm2-set", "B.plugin.discovery=service_load"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=280)
    print(done.stdout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    (thr,) = result["throughput"]
    assert set(thr) == {"raw", "mm2-1", "connect-1"} and result["latency"] == []
    for kind, figures in thr.items():
        assert figures["msg_s"] > 0 and figures["cpu_us"] > 0 and figures["first_s"] > 0, (kind, figures)
        assert figures["rss_mb"] > 20, (kind, figures)  # a process tree, not nothing
        assert all(math.isfinite(result["median"][kind][key]) for key in THROUGHPUT), (kind, result["median"][kind])
    assert thr["mm2-1"]["rss_mb"] > 100, thr["mm2-1"]  # a JVM was measured, not the bench's own process
    for label in ("connect-1 / mm2-1", "connect-1 / raw"):
        ratios = result["ratios"][label]
        assert all(math.isfinite(ratios[key]) and ratios[key] > 0 for key in THROUGHPUT), (label, ratios)
        line = next((x for x in done.stdout.splitlines() if x.startswith(label)), "")
        assert "throughput " in line and "peak RSS " in line and "throughput -" not in line, done.stdout


def test_the_many_topics_round_measures_our_mirror_and_the_floor(apache_kafka_pair, tmp_path, unique):
    """The many-topics measure (``--only topics``) of our mirror and the raw loop, in this process, on 12
    topics at 25 msg/s for 6 s (MM2's side is the same code path with its launcher: the smoke test above
    starts MM2 once already). Every record of every topic must arrive (the round fails otherwise), and
    every figure must be a measurement: latency per topic, cores, the tree's memory."""
    from bench_modules import bench_module_with_e2e

    topics = bench_module_with_e2e("mm2").mm2_topics
    a, b = apache_kafka_pair
    tag = "fan" + hashlib.sha1(unique.encode()).hexdigest()[:8]  # MM2-style aliases: short, alphanumeric
    for kind in ("connect-1", "raw"):
        out = topics.topics_run(kind, a.bootstrap, b.bootstrap, 12, 25, 6, 100, tmp_path, f"{tag}{kind[:3]}", None)
        assert 0 < out["p50_ms"] <= out["p99_ms"] <= out["topic_p99_max_ms"], (kind, out)
        assert out["topic_p99_median_ms"] <= out["topic_p99_max_ms"], (kind, out)
        assert out["cores"] > 0 and out["cpu_us"] > 0 and out["rss_mb"] > 20, (kind, out)
        assert 0 < out["all_flowing_s"] < 240, (kind, out)
