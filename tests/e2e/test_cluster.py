"""``connect run --master spark://...`` on a real Spark standalone cluster (master + worker on loopback).

The driver is a separate process, as users run it; executors are separate JVMs with their own
Python workers, which share nothing with the driver but the network. Proves: the 100k mirror,
``kill -9`` of an executor mid-stream, SIGTERM to the driver and to its whole process group (exit 0,
last epoch committed, within one epoch), with a relative and an absolute data directory; reports
how often pairs moved between Python workers.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
import spark_cluster as cluster_fixtures
from kafka_util import consume_all, create_topic, produce
from pipeline_util import committed_in_store

spark_cluster = cluster_fixtures.spark_cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

EPOCH_MS = 3000


def _config(path: Path, name: str, src: str, dst: str, topic: str, tasks: int = 2, **extra) -> Path:
    config = {"source.connector.class": "kafka", "source.bootstrap.servers": src, "source.topics": topic,
              "sink.connector.class": "kafka", "sink.bootstrap.servers": dst, "sink.topic.template": "cl.{topic}",
              "tasks.max": str(tasks), "epoch.max.ms": str(EPOCH_MS), **{k: str(v) for k, v in extra.items()}}
    path.write_bytes(orjson.dumps({"name": name, "config": config}))
    return path


def _start(cluster, config: Path, data_dir: str, log: Path, cwd: Path) -> subprocess.Popen:
    args = [sys.executable, "-m", "worker.cli", "run", str(config), "--data-dir", data_dir,
            "--master", cluster.master_url]
    for key, value in cluster.driver_conf().items():
        if key != "spark.master":
            args += ["--spark-conf", f"{key}={value}"]
    return subprocess.Popen(args, cwd=cwd, env=cluster.driver_env(), stdout=open(log, "wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)


def _committed(data_dir: Path) -> int:
    return committed_in_store(data_dir)


def _wait_committed(proc, data_dir: Path, at_least: int, log: Path, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while _committed(data_dir) < at_least:
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, f"only {_committed(data_dir)} committed\n{log.read_text()[-3000:]}"
        time.sleep(0.2)


def _moves(log: Path) -> tuple[int, int]:
    """(pair starts after the first epoch, epochs) from the progress lines."""
    text = log.read_text()
    starts = re.findall(r"epoch +(\d+) .*\(started in pid", text)
    epochs = re.findall(r"^epoch +(\d+)  \S+/\d+ ", text, re.M)
    return sum(1 for e in starts if int(e) > 1), len(epochs)


def _stop(proc: subprocess.Popen, group: bool) -> float:
    t0 = time.monotonic()
    if group:
        os.killpg(proc.pid, signal.SIGTERM)
    else:
        proc.send_signal(signal.SIGTERM)
    proc.wait(120)
    return time.monotonic() - t0


def test_mirror_100k_and_kill_9_of_an_executor_loses_nothing(kafka_pair, spark_cluster, tmp_path, unique):
    src, dst = kafka_pair
    topic, n, parts = f"cl-{unique}", 100_000, 2
    create_topic(src.bootstrap, topic, parts)
    produce(src.bootstrap, topic, n // 2, parts)
    config = _config(tmp_path / "c.json", unique, src.bootstrap, dst.bootstrap, topic,
                     **{"epoch.max.records": 10_000})
    data, log = tmp_path / "data", tmp_path / "run.log"
    proc = _start(spark_cluster, config, str(data), log, tmp_path)
    try:
        _wait_committed(proc, data, 20_000, log)
        victims = spark_cluster.executor_pids()
        assert victims, "no executor to kill"
        os.kill(victims[0], signal.SIGKILL)  # mid-stream: the cluster starts a new executor
        produce(src.bootstrap, topic, n // 2, parts, start=n // 2)
        _wait_committed(proc, data, n, log, timeout=300)
        elapsed = _stop(proc, group=False)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, log.read_text()[-3000:]
    got = consume_all(dst.bootstrap, f"cl.{topic}", range(parts), n, timeout=120)
    values = {m.value() for m in got}
    assert len(values) == n, f"{n - len(values)} records lost"
    moves, epochs = _moves(log)
    print(f"cluster mirror: {n} records, {len(got) - n} duplicates, {epochs} pair-epochs, "
          f"{moves} pair (re)starts after the first epoch (incl. the killed executor's), stop took {elapsed:.1f} s")


@pytest.mark.parametrize("group, relative", [(False, True), (True, False)],
                         ids=["sigterm-process-relative-dir", "sigterm-group-absolute-dir"])
def test_sigterm_ends_within_one_epoch_with_exit_0_and_a_commit(kafka_pair, spark_cluster, tmp_path, unique,
                                                                group, relative):
    src, dst = kafka_pair
    topic, parts = f"term-{unique}", 2
    create_topic(src.bootstrap, topic, parts)
    produce(src.bootstrap, topic, 20_000, parts)
    config = _config(tmp_path / "c.json", unique, src.bootstrap, dst.bootstrap, topic, **{"epoch.max.ms": 20_000})
    data = tmp_path / "data"
    log = tmp_path / "run.log"
    proc = _start(spark_cluster, config, "data" if relative else str(data), log, cwd=tmp_path)
    try:
        _wait_committed(proc, data, 1, log)  # the first 20 s data epoch is committed
        produce(src.bootstrap, topic, 50_000, parts, start=20_000, headers=False)  # mid-epoch, busy
        time.sleep(2)
        before = _committed(data)
        elapsed = _stop(proc, group)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    text = log.read_text()
    assert proc.returncode == 0, text[-3000:]
    assert "stopped: the last epoch is committed" in text
    # epochs here are long (20 s): ending "within one epoch" means well before a full one
    assert elapsed < 15, f"SIGTERM took {elapsed:.1f} s"
    committed = _committed(data)
    assert committed > before, "the interrupted epoch was committed"
    got = consume_all(dst.bootstrap, f"cl.{topic}", range(parts), committed, timeout=60)
    assert len({m.value() for m in got}) >= committed  # everything committed really arrived
    print(f"SIGTERM ({'group' if group else 'process'}, {'relative' if relative else 'absolute'} dir): "
          f"exit 0 after {elapsed:.1f} s, {committed} committed")


def _listening_ports(pid: int) -> set[int]:
    """The TCP ports process ``pid`` listens on (Linux /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def _tls_subject(port: int) -> str | None:
    """The common name of the certificate a TLS server on ``port`` shows; None if it speaks no TLS."""
    import socket
    import ssl

    from cryptography import x509
    from cryptography.x509.oid import NameOID

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, context.wrap_socket(raw) as tls:
            der = tls.getpeercert(binary_form=True)
    except OSError:
        return None
    return x509.load_der_x509_certificate(der).subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value


def _plain_hello_answer(port: int) -> bytes:
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"AUTH " + b"0" * 32 + b"\n")
        try:
            return s.recv(4096)
        except OSError:
            return b""


def test_executors_reach_the_driver_over_tls_and_plain_text_gets_nothing(kafka_pair, spark_cluster, tmp_path, unique):
    """Issue 35: on a cluster the control channel carried the run's secret and the pickled specs (resolved
    credentials) in clear. Now it is TLS with a per-run certificate the executors pin: records still
    flow through executors that share nothing with the driver but the network, and the driver's control
    ports answer a plain-text hello with nothing (a plain server answers "wrong secret")."""
    src, dst = kafka_pair
    topic, parts, n = f"tls-{unique}", 2, 4_000
    create_topic(src.bootstrap, topic, parts)
    produce(src.bootstrap, topic, n, parts)
    data = tmp_path / "data"
    log = tmp_path / "run.log"
    proc = _start(spark_cluster, _config(tmp_path / "c.json", unique, src.bootstrap, dst.bootstrap, topic), str(data),
                  log, cwd=tmp_path)
    try:
        _wait_committed(proc, data, n, log)
        ports = _listening_ports(proc.pid)
        subjects = {port: _tls_subject(port) for port in ports}
        control_ports = [p for p, cn in subjects.items() if cn == "connect-bridge control channel"]
        answers = {port: _plain_hello_answer(port) for port in ports}
        elapsed = _stop(proc, group=False)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, log.read_text()[-3000:]
    assert not [p for p, a in answers.items() if b"wrong secret" in a], f"a plain-text control port: {answers}"
    assert len(control_ports) >= 2, f"the driver's control and hosting ports should speak TLS: {subjects}"
    assert all(not answers[p] or answers[p][:1] == b"\x15" for p in control_ports), answers  # nothing, or a TLS alert
    got = consume_all(dst.bootstrap, f"cl.{topic}", range(parts), n, timeout=60)
    assert len({m.value() for m in got}) == n
    print(f"cluster over TLS: {n} records through the executors, control ports {sorted(control_ports)}, "
          f"stop took {elapsed:.1f} s")
