"""The ``connect`` CLI as a user runs it: separate processes, signals, kill -9, bad configs."""

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
from kafka_util import consume_all, create_topic, produce
from pipeline_util import committed_in_store

CLI = [sys.executable, "-m", "worker.cli"]


def _cli(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, **kw)


def _write(path: Path, document) -> Path:
    path.write_bytes(orjson.dumps(document))
    return path


def _start(config: Path, data_dir: Path, log: Path) -> subprocess.Popen:
    return subprocess.Popen([*CLI, "run", str(config), "--data-dir", str(data_dir),
                             "--spark-conf", "spark.ui.enabled=false"],
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True)


def _committed(data_dir: Path) -> int:
    return committed_in_store(data_dir)


def _wait_gone(pgid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


_IN_FLIGHT = re.compile(r"in flight [1-9]")


def _last_epoch_lines(log: Path) -> str:
    """The progress lines of the last epoch printed (``epoch N  connector/task ...``)."""
    lines = [line for line in log.read_text().splitlines() if re.match(r"epoch +\d+  \S+/\d+ ", line)]
    if not lines:
        return ""
    last = lines[-1].split()[1]
    return "\n".join(line for line in lines if line.split()[1] == last)


def test_kill_9_mid_stream_then_restart_loses_nothing(kafka_pair, tmp_path, unique):
    src, dst = kafka_pair
    topic, n, parts, per_epoch, tasks, in_flight = f"crash-{unique}", 40_000, 2, 2_000, 2, 4_000
    create_topic(src.bootstrap, topic, parts)
    produce(src.bootstrap, topic, n, parts)
    config = _write(tmp_path / "crash.json", {"name": unique, "config": {
        "source.connector.class": "kafka", "source.bootstrap.servers": src.bootstrap, "source.topics": topic,
        "sink.connector.class": "kafka", "sink.bootstrap.servers": dst.bootstrap, "sink.topic.template": "c.{topic}",
        "tasks.max": str(tasks), "epoch.max.ms": "1000", "epoch.max.records": str(per_epoch),
        "max.in.flight.records": str(in_flight)}})
    data = tmp_path / "data"
    first = _start(config, data, tmp_path / "first.log")
    deadline = time.monotonic() + 120
    # Killed once an epoch has ended with records still in flight (put, not acknowledged: they
    # stay with the pair into its next epoch), so the crash takes records of an earlier epoch along.
    while not (_committed(data) >= 3 * per_epoch and _IN_FLIGHT.search(_last_epoch_lines(tmp_path / "first.log")))\
            and time.monotonic() < deadline:
        assert first.poll() is None, (tmp_path / "first.log").read_text()
        time.sleep(0.02)
    os.kill(first.pid, signal.SIGKILL)
    before = _committed(data)
    assert 0 < before < n, "the crash must happen mid-stream"
    assert _IN_FLIGHT.search(_last_epoch_lines(tmp_path / "first.log")), "no epoch ended with records in flight"
    first.wait(10)
    if not _wait_gone(first.pid, 20):  # its JVM and Python workers exit when the driver dies
        os.killpg(first.pid, signal.SIGKILL)
        pytest.fail("Spark processes outlived the killed driver by 20 s")

    second = _start(config, data, tmp_path / "second.log")
    try:
        deadline = time.monotonic() + 180
        while _committed(data) < n and time.monotonic() < deadline:
            assert second.poll() is None, (tmp_path / "second.log").read_text()
            time.sleep(0.2)
        assert _committed(data) == n
    finally:
        second.send_signal(signal.SIGTERM)
        code = second.wait(60)
    log = (tmp_path / "second.log").read_text()
    assert code == 0, log
    assert "finishing the epoch, flushing and committing" in log

    mirrored = consume_all(dst.bootstrap, f"c.{topic}", range(parts), n, ident=lambda m: m.value())
    values = [m.value() for m in mirrored]
    assert set(values) == {f"value-{i}".encode() for i in range(n)}  # 0 lost
    duplicates = len(values) - n
    # Epochs end without draining: a crash replays what was in flight (at most max.in.flight.records
    # per pair; measured: the first acknowledgements from tansu take ~1 s, while 2,000-record epochs
    # take 10 ms) plus the epoch whose result was not persisted yet.
    bound = tasks * (in_flight + per_epoch)
    assert duplicates <= bound, f"{duplicates} duplicates exceed max.in.flight.records + one epoch per pair"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_stop_signal_finishes_the_epoch_and_commits(kafka_pair, tmp_path, unique, signum):
    src, dst = kafka_pair
    topic = f"term-{unique}"
    create_topic(src.bootstrap, topic, 1)
    produce(src.bootstrap, topic, 500, 1)
    config = _write(tmp_path / "c.json", {"name": unique, "config": {
        "source.connector.class": "kafka", "source.bootstrap.servers": src.bootstrap, "source.topics": topic,
        "sink.connector.class": "kafka", "sink.bootstrap.servers": dst.bootstrap, "epoch.max.ms": "60000"}})
    proc = _start(config, tmp_path / "data", tmp_path / "run.log")
    try:
        # Records stream to the sink as they are polled: once they are all in the target, the
        # first (60 s) epoch is under way and has not committed yet.
        assert len(consume_all(dst.bootstrap, topic, [0], 500, timeout=90)) == 500
        assert _committed(tmp_path / "data") == 0
    except BaseException:
        proc.kill()
        raise
    t0 = time.monotonic()
    proc.send_signal(signum)
    code = proc.wait(60)
    log = (tmp_path / "run.log").read_text()
    assert code == 0, log
    assert time.monotonic() - t0 < 30, "stop must not wait for the whole 60 s epoch"
    assert _committed(tmp_path / "data") == 500, log


def test_validate_reports_every_bad_key_and_exits_non_zero(tmp_path):
    bad = _write(tmp_path / "bad.json", {"name": "bad", "config": {
        "source.connector.class": "nope",
        "sink.connector.class": "kafka",
        "tasks.max": "zero",
        "errors.tolerance": "some",
        "epoch.max.msec": "10",
        "sink.topic.template": "x.{name}"}})
    result = _cli("validate", str(bad))
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line.startswith("  - ")]
    keys = [re.match(r"  - (\S+):", line).group(1) for line in lines]
    assert sorted(keys) == sorted(["source.connector.class", "sink.bootstrap.servers", "tasks.max",
                                   "errors.tolerance", "epoch.max.msec", "sink.topic.template"]), result.stderr
    assert "'zero'" in result.stderr and "must be an integer" in result.stderr
    assert "must be one of none, all" in result.stderr
    assert "unknown source connector 'nope'" in result.stderr
    assert "did you mean source.epoch.max.msec" in result.stderr
    assert str(bad) in result.stderr


def test_run_refuses_bad_configs_before_starting_anything(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text('{"name": "x", "config": {')
    missing_env = _write(tmp_path / "env.json", {"name": "y", "config": {
        "source.connector.class": "connect.testing:MemorySourceConnector",
        "sink.connector.class": "connect.testing:MemorySinkConnector",
        "sink.name": "${env:CONNECT_TEST_UNSET_VARIABLE}"}})
    result = _cli("run", str(broken), str(missing_env), "--data-dir", str(tmp_path / "d"))
    assert result.returncode == 2
    assert f"{broken}: 1 configuration error" in result.stderr and "not valid JSON" in result.stderr
    assert "environment variable CONNECT_TEST_UNSET_VARIABLE is not set" in result.stderr
    assert "starting Spark" not in result.stderr


def test_plugins_lists_builtin_connectors():
    result = _cli("plugins")
    assert result.returncode == 0
    for name in ("kafka-source", "kafka-sink"):
        assert name in result.stdout
    assert "memory" not in result.stdout  # test connectors are not production plugins


def test_run_with_unreachable_source_names_the_connector_and_exits_1(tmp_path):
    from worker.embedded import free_port

    config = _write(tmp_path / "down.json", {"name": "down", "config": {
        "source.connector.class": "kafka", "source.bootstrap.servers": f"127.0.0.1:{free_port()}",
        "source.topics": "x", "sink.connector.class": "kafka", "sink.bootstrap.servers": "127.0.0.1:1"}})
    result = _cli("run", str(config), "--data-dir", str(tmp_path / "d"), "--spark-conf", "spark.ui.enabled=false")
    assert result.returncode == 1, result.stderr
    assert "error: a connector could not start: connector 'down': cannot list topics on 127.0.0.1:" in result.stderr


def test_pulsar_kill_9_mid_stream_then_restart_loses_nothing(pulsar_pair, tmp_path, unique):
    """Pulsar -> Pulsar as a `connect run` process killed with SIGKILL after some epochs were
    committed, then restarted on the same data directory: every record reaches the target."""
    import sqlite3

    import pulsar_util

    src, dst = pulsar_pair
    topic, n, parts = f"persistent://public/default/crash-{unique.rsplit('-', 1)[1]}", 40_000, 2
    src.create_partitioned_topics({topic: parts})
    dst.create_partitioned_topics({f"{topic}-c": parts})
    pulsar_util.produce(src, topic, n, parts)
    config = _write(tmp_path / "crash.json", {"name": unique, "config": {
        "source.connector.class": "pulsar", "source.service.url": src.service_url, "source.topics": topic,
        "sink.connector.class": "pulsar", "sink.service.url": dst.service_url, "sink.topic.template": "{topic}-c",
        "tasks.max": "2", "epoch.max.ms": "1000", "epoch.max.records": "2000", "max.in.flight.records": "4000"}})
    data = tmp_path / "data"

    def committed_positions() -> int:
        db = data / "offsets.sqlite"
        if not db.exists():
            return 0
        try:
            with sqlite3.connect(db) as conn:
                rows = conn.execute("SELECT offset FROM offsets").fetchall()
        except sqlite3.OperationalError:  # the file exists, its table not yet (the process is creating it)
            return 0
        return sum(1 for (o,) in rows if orjson.loads(o).get("ledger", -1) >= 0)

    first = _start(config, data, tmp_path / "first.log")
    deadline = time.monotonic() + 120
    while committed_positions() < parts and time.monotonic() < deadline:
        assert first.poll() is None, (tmp_path / "first.log").read_text()
        time.sleep(0.1)
    assert committed_positions() == parts, "both partitions must have committed positions before the crash"
    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)
    if not _wait_gone(first.pid, 20):
        os.killpg(first.pid, signal.SIGKILL)
        pytest.fail("Spark processes outlived the killed driver by 20 s")
    landed = sum(map(len, pulsar_util.consume_all(dst, f"{topic}-c", parts, 0, timeout=5).values()))
    assert landed < n, "the crash must happen mid-stream"

    second = _start(config, data, tmp_path / "second.log")
    try:
        mirrored = pulsar_util.consume_all(dst, f"{topic}-c", parts, n, timeout=180)
    finally:
        second.send_signal(signal.SIGTERM)
        code = second.wait(60)
    assert code == 0, (tmp_path / "second.log").read_text()
    values = [m.data() for msgs in mirrored.values() for m in msgs]
    assert set(values) == {f"value-{i}".encode() for i in range(n)}  # 0 lost


def _listener() -> tuple[int, list[bytes]]:
    """A socket server that records what each connection sends (then closes it)."""
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    received: list[bytes] = []

    def serve():
        while True:
            conn, _ = server.accept()
            with conn:
                conn.settimeout(5)
                try:
                    received.append(conn.recv(65536))
                except OSError:
                    pass

    threading.Thread(target=serve, daemon=True).start()
    return server.getsockname()[1], received


def test_a_rest_json_planted_in_a_world_writable_data_dir_gets_no_credentials(tmp_path):
    """Issue 35: `connect connectors --data-dir DIR` sent `Authorization: Bearer ...` to whatever URL a
    rest.json in DIR named. A file in a directory others can write is refused, naming why."""
    port, received = _listener()
    data = tmp_path / "shared"
    data.mkdir()
    os.chmod(data, 0o777)
    _write(data / "rest.json", {"url": f"http://127.0.0.1:{port}", "pid": 1, "worker_id": "w", "started_at": 1.0,
                                "generation": 1})
    result = _cli("connectors", "list", "--data-dir", str(data), "--token", "t0ken-canary")
    time.sleep(0.5)
    assert not any(b"Authorization" in r or b"t0ken-canary" in r for r in received), received
    assert received == []
    assert result.returncode == 2, result.stderr
    assert "refusing" in result.stderr and "writable by its group or by others" in result.stderr
    assert "--url" in result.stderr and "t0ken-canary" not in result.stderr
