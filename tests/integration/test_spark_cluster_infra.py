"""tests/spark_cluster.py: a real standalone cluster runs a job from a driver subprocess in executor
Python workers, and replaces an executor killed with kill -9."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest
import spark_cluster as cluster_fixtures
from spark_cluster import die_with_parent, pid_alive

spark_cluster = cluster_fixtures.spark_cluster  # the session fixture, imported explicitly (conftest.py may later)

pytestmark = pytest.mark.timeout(300)

# A driver that stays up between jobs: reads commands on stdin, answers one JSON line each.
DRIVER = r"""
import json, os, sys, time
from pyspark.sql import SparkSession

t0 = time.monotonic()
builder = SparkSession.builder.appName("spark-cluster-infra")
for key, value in json.loads(sys.argv[1]).items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
sc = spark.sparkContext
sc.setLogLevel("WARN")
print(json.dumps({"event": "ready", "driver_pid": os.getpid(), "session_s": time.monotonic() - t0}), flush=True)
for line in sys.stdin:
    if line.strip() == "job":
        t = time.monotonic()
        rows = sc.parallelize(range(4), 4).map(lambda i: (i, os.getpid(), os.getppid())).collect()
        print(json.dumps({"event": "job", "rows": rows, "job_s": time.monotonic() - t,
                          "executors": sc._jsc.sc().getExecutorIds().mkString(",")}), flush=True)
    elif line.strip() == "executors":
        print(json.dumps({"event": "executors", "executors": sc._jsc.sc().getExecutorIds().mkString(",")}), flush=True)
    elif line.strip() == "quit":
        break
spark.stop()
print(json.dumps({"event": "stopped"}), flush=True)
"""


class Driver:
    """The DRIVER script in a subprocess; ``ask()`` sends a command and waits for its JSON answer."""

    def __init__(self, cluster, log_path):
        t0 = time.monotonic()
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen([sys.executable, "-c", DRIVER, json.dumps(cluster.driver_conf())],
                                     env=cluster.driver_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True, start_new_session=True, preexec_fn=die_with_parent)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.ready = self.next_event(timeout=120)
        self.ready["started_s"] = time.monotonic() - t0

    def _pump(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def next_event(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"driver silent for {timeout}s (log {self.log.name})") from None
            if line is None:
                raise RuntimeError(f"driver exited with {self.proc.wait()} (log {self.log.name})")
            if line.startswith("{"):
                return json.loads(line)

    def ask(self, command: str, timeout: float = 120) -> dict:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.next_event(timeout)

    def close(self):
        try:
            if self.proc.poll() is None:
                self.ask("quit", timeout=30)
                self.proc.wait(30)
        except (OSError, TimeoutError, RuntimeError, subprocess.TimeoutExpired):
            pass
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
            self.log.close()


@pytest.fixture(scope="module")
def driver(spark_cluster, tmp_path_factory):
    d = Driver(spark_cluster, tmp_path_factory.mktemp("driver") / "driver.log")
    yield d
    d.close()


def test_cluster_is_up_on_loopback(spark_cluster):
    state = spark_cluster.master_json()
    print("cluster start timings:", spark_cluster.timings)
    assert state["status"] == "ALIVE"
    assert state["aliveworkers"] == len(spark_cluster.workers) >= 1
    assert {w["host"] for w in state["workers"]} == {"127.0.0.1"}
    assert spark_cluster.master_url == state["url"]


def test_job_runs_in_executor_python_workers(spark_cluster, driver):
    t0 = time.monotonic()
    result = driver.ask("job")
    print(f"driver ready in {driver.ready['started_s']:.1f}s (session {driver.ready['session_s']:.1f}s); "
          f"first job {result['job_s']:.2f}s, turnaround {time.monotonic() - t0:.2f}s")
    again = driver.ask("job")
    print(f"second job {again['job_s']:.2f}s")
    assert sorted(r[0] for r in result["rows"]) == [0, 1, 2, 3]
    executors = spark_cluster.executor_pids()
    assert len(executors) == len(spark_cluster.workers)
    python_pids = set(spark_cluster.python_pids())
    daemons = set(spark_cluster.python_daemon_pids())
    for _, pid, ppid in result["rows"] + again["rows"]:
        assert pid != driver.ready["driver_pid"] and pid != driver.proc.pid
        assert pid in python_pids  # a Python worker under an executor JVM of this cluster...
        assert ppid in daemons  # ...forked by its pyspark daemon
    assert result["executors"]


def test_kill_9_executor_gets_a_new_executor(spark_cluster, driver):
    before = driver.ask("job")
    old = spark_cluster.executor_pids()
    assert old
    victim = old[0]
    old_python = spark_cluster.python_pids(victim)
    assert old_python
    t_kill = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    new = spark_cluster.wait_for_executors(1, exclude=old, timeout=60)
    t_new_jvm = time.monotonic() - t_kill
    deadline = time.monotonic() + 30
    while any(pid_alive(p) for p in old_python) and time.monotonic() < deadline:
        time.sleep(0.05)
    t_python_gone = time.monotonic() - t_kill
    leftovers = [p for p in old_python if pid_alive(p)]
    old_ids = set(before["executors"].split(","))
    deadline = time.monotonic() + 60
    while True:  # the replacement registers with the driver under a new executor id
        ids = set(driver.ask("executors")["executors"].split(",")) - {""}
        if len(ids) == len(old) and ids - old_ids:
            break
        assert time.monotonic() < deadline, f"no replacement executor registered with the driver: {ids}"
        time.sleep(0.1)
    t_registered = time.monotonic() - t_kill
    after = driver.ask("job")
    t_job = time.monotonic() - t_kill
    print(f"kill -9 executor {victim}: new executor JVM {new} after {t_new_jvm:.2f}s, old Python workers gone after "
          f"{t_python_gone:.2f}s (left: {leftovers}), replacement registered with the driver after {t_registered:.2f}s, "
          f"next job done after {t_job:.2f}s (job itself {after['job_s']:.2f}s); "
          f"executor ids {before['executors']} -> {after['executors']}")
    assert not leftovers, "the old executor's Python workers outlived it"
    new_python = set(spark_cluster.python_pids())
    assert {pid for _, pid, _ in after["rows"]} <= new_python
    assert not {pid for _, pid, _ in after["rows"]} & set(old_python)
    state = spark_cluster.master_json()
    assert state["aliveworkers"] == len(spark_cluster.workers)  # the worker survived its executor
