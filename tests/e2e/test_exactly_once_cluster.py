"""``exactly.once.support=required`` on a real Spark standalone cluster: an executor killed with -9
mid-stream; its pairs' open transactions are fenced and aborted by the attempts that replace them, and
a ``read_committed`` reader of the target sees every record once, in per-key order (Apache Kafka).
The same run with ``exactly.once.support=disabled`` doubled 10,000 records (2026-11-27)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
import spark_cluster as cluster_fixtures
from kafka_util import assert_once_in_key_order, consume_committed, create_topic, produce_keyed
from pipeline_util import committed_in_store

spark_cluster = cluster_fixtures.spark_cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _start(cluster, config: Path, data_dir: Path, log: Path) -> subprocess.Popen:
    args = [sys.executable, "-m", "worker.cli", "run", str(config), "--data-dir", str(data_dir),
            "--master", cluster.master_url]
    for key, value in cluster.driver_conf().items():
        if key != "spark.master":
            args += ["--spark-conf", f"{key}={value}"]
    return subprocess.Popen(args, env=cluster.driver_env(), stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def _wait_committed(proc, data: Path, at_least: int, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while committed_in_store(data) < at_least:
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, f"only {committed_in_store(data)} committed\n{log.read_text()[-3000:]}"
        time.sleep(0.2)


def test_kill_9_of_an_executor_every_record_once_in_key_order(apache_kafka_pair, spark_cluster, tmp_path, unique):
    src, dst = apache_kafka_pair
    topic, n, parts = f"eos-cl-{unique}", 60_000, 2
    create_topic(src.bootstrap, topic, parts)
    produce_keyed(src.bootstrap, topic, n // 2, parts)
    config = tmp_path / "c.json"
    config.write_bytes(orjson.dumps({"name": unique, "config": {
        "source.connector.class": "kafka", "source.bootstrap.servers": src.bootstrap, "source.topics": topic,
        "sink.connector.class": "kafka", "sink.bootstrap.servers": dst.bootstrap, "sink.topic.template": "cl.{topic}",
        "tasks.max": "2", "epoch.max.ms": "3000", "epoch.max.records": "5000", "exactly.once.support": "required"}}))
    data, log = tmp_path / "data", tmp_path / "run.log"
    proc = _start(spark_cluster, config, data, log)
    try:
        _wait_committed(proc, data, 10_000, log, 240)
        victims = spark_cluster.executor_pids()
        assert victims, "no executor to kill"
        os.kill(victims[0], signal.SIGKILL)  # mid-stream: the cluster starts a new executor
        produce_keyed(src.bootstrap, topic, n // 2, parts, start=n // 2)
        _wait_committed(proc, data, n, log, 360)
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    text = log.read_text()
    assert proc.returncode == 0, text[-3000:]
    assert "exactly-once" in text
    assert_once_in_key_order(consume_committed(dst.bootstrap, f"cl.{topic}", range(parts), n), n)
