"""Where the driver's Spark start-up goes, with and without this project's start-up aids.

Each run is a fresh process that times: the JVM gateway (spark-submit, JVM start), the
SparkContext, a first trivial job (Python daemon and worker start), and ``SparkApp.stop``. Variants:

- ``stock``: no class archive (``CONNECT_CLASS_ARCHIVE=off``), PySpark's own daemon module;
- ``aids``: the driver JVM's class archive (recorded by a first run not counted here) and
  ``worker.runtime.pydaemon``, i.e. what `connect run` does.

Usage: python bench/startup.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PHASES = ("gateway", "context", "first_job", "stop")


def one_run(variant: str) -> None:
    sys.path.insert(0, str(ROOT))
    t0 = time.monotonic()
    import pyspark.java_gateway as java_gateway

    import worker.runtime.spark as ws

    marks = {}
    launch = java_gateway.launch_gateway

    def timed_launch(*args, **kwargs):
        gateway = launch(*args, **kwargs)
        marks["gateway"] = time.monotonic()
        return gateway

    java_gateway.launch_gateway = timed_launch
    if variant == "stock":
        ws.SPARK_DEFAULTS.pop("spark.python.daemon.module")
    app = ws.build_spark("local[2]", {"spark.ui.enabled": "false"})
    t_context = time.monotonic()
    app.sparkContext.parallelize([1, 2], 2).map(lambda x: x).collect()
    t_job = time.monotonic()
    app.stop()
    t_stop = time.monotonic()
    print(json.dumps({"gateway": marks["gateway"] - t0, "context": t_context - marks["gateway"],
                      "first_job": t_job - t_context, "stop": t_stop - t_job}))


def run(variant: str, cache: str) -> dict[str, float]:
    env = dict(os.environ, CONNECT_CACHE_DIR=cache)
    if variant == "stock":
        env["CONNECT_CLASS_ARCHIVE"] = "off"
    out = subprocess.run([sys.executable, __file__, "one", variant], env=env, cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "one":
        one_run(sys.argv[2])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="startup-bench-") as cache:
        recording = run("aids", cache)  # records the class archive as its JVM exits
        print(f"recording run (not counted): stop took {recording['stop']:.2f} s")
        results: dict[str, list[dict]] = {"stock": [], "aids": []}
        for _ in range(args.rounds):
            for variant in results:  # interleaved, so drift hits both alike
                results[variant].append(run(variant, cache))
        to_job = {variant: statistics.median(r["gateway"] + r["context"] + r["first_job"] for r in runs)
                  for variant, runs in results.items()}
        for variant, runs in results.items():
            cells = []
            for phase in PHASES:
                values = [r[phase] for r in runs]
                cells.append(f"{phase} {statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})")
            print(f"{variant:<6} launch->first job done {to_job[variant]:.2f} s | " + " | ".join(cells))
        print(f"aids / stock, launch -> first job done: {to_job['aids'] / to_job['stock']:.2f}")

if __name__ == "__main__":
    main()
