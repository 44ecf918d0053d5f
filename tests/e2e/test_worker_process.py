"""``connect worker start`` as a user runs it: a separate process driven with ``connect connectors ...``
over its REST API; ``kill -9`` of the worker, then a restart resumes every connector in its last
target state from its committed offsets, and nothing is lost."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import orjson
import pytest
from kafka_util import consume_all, create_topic, produce

CLI = [sys.executable, "-m", "worker.cli"]

pytestmark = pytest.mark.timeout(400)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_worker(config: Path, log: Path) -> subprocess.Popen:
    return subprocess.Popen([*CLI, "worker", "start", "--config", str(config)], stdout=open(log, "ab"),
                            stderr=subprocess.STDOUT, start_new_session=True)


def _cli(url: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, "connectors", *args, "--url", url], capture_output=True, text=True, timeout=120)


def _wait_healthy(url: str, proc: subprocess.Popen, log: Path, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"worker exited with {proc.returncode}:\n{log.read_text()[-3000:]}"
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"worker not healthy after {timeout} s:\n{log.read_text()[-3000:]}")


def _state(url: str, name: str) -> str:
    return httpx.get(f"{url}/connectors/{name}/status", timeout=10).json()["connector"]["state"]


def _wait_state(url: str, name: str, state: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _state(url, name) == state:
            return
        time.sleep(0.3)
    raise AssertionError(f"{name} not {state} after {timeout} s: {_state(url, name)}")


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(10)


def test_worker_killed_9_restarts_every_connector_in_its_target_state_and_loses_nothing(kafka_pair, tmp_path, unique):
    src, dst = kafka_pair
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "worker.log"
    worker_conf = tmp_path / "worker.json"
    worker_conf.write_bytes(orjson.dumps({"rest.port": port, "data.dir": str(tmp_path / "data"), "worker.task.slots": 4,
                                          "spark.conf.spark.ui.enabled": "false"}))
    running, paused = f"run-{unique}", f"pause-{unique}"
    n = 30_000
    for topic in (running, paused):
        create_topic(src.bootstrap, topic, 2)
        produce(src.bootstrap, topic, n, 2)
    files = {}
    for name in (running, paused):
        files[name] = tmp_path / f"{name}.json"
        files[name].write_bytes(orjson.dumps({"name": name, "config": {
            "source.connector.class": "kafka", "source.bootstrap.servers": src.bootstrap, "source.topics": name,
            "source.start.position": "earliest", "sink.connector.class": "kafka",
            "sink.bootstrap.servers": dst.bootstrap, "sink.topic.template": "w.{topic}", "tasks.max": "2",
            "epoch.max.ms": "1000", "epoch.max.records": "2000", "max.in.flight.records": "4000"}}))

    # the CLI before any worker runs: a clear message and exit 3
    down = _cli(url, "list")
    assert down.returncode == 3 and "cannot reach the worker" in down.stderr

    first = _start_worker(worker_conf, log)
    try:
        _wait_healthy(url, first, log)
        created = _cli(url, "create", str(files[running]))
        assert created.returncode == 0, created.stderr
        created = _cli(url, "create", str(files[paused]), "--state", "PAUSED")
        assert created.returncode == 0, created.stderr
        again = _cli(url, "create", str(files[running]))
        assert again.returncode == 1 and "409" in again.stderr
        _wait_state(url, paused, "PAUSED")
        listed = _cli(url, "list")
        assert listed.returncode == 0 and running in listed.stdout and "PAUSED" in listed.stdout
        restarted = _cli(url, "restart", running, "--include-tasks")
        assert restarted.returncode == 0, restarted.stderr
        # kill -9 once the running connector has committed some epochs, mid-stream
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            offsets = httpx.get(f"{url}/connectors/{running}/offsets", timeout=10).json()["offsets"]
            if sum(o["offset"]["offset"] + 1 for o in offsets) >= 6000:
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"no progress before the kill:\n{log.read_text()[-3000:]}")
        os.kill(first.pid, signal.SIGKILL)
        first.wait(10)
    finally:
        _kill_group(first)

    second = _start_worker(worker_conf, log)
    try:
        _wait_healthy(url, second, log)
        assert sorted(httpx.get(f"{url}/connectors", timeout=10).json()) == sorted([running, paused])
        _wait_state(url, running, "RUNNING")
        _wait_state(url, paused, "PAUSED")
        got = consume_all(dst.bootstrap, f"w.{running}", range(2), n, timeout=120, ident=lambda m: m.value())
        values = {m.value() for m in got}
        assert len(values) == n, f"{n - len(values)} records lost"
        # Replayed: what was in flight plus one epoch per pair, twice - at the kill, and at the
        # restart --include-tasks before it (new task pairs start from the committed offsets).
        assert len(got) - n <= 2 * (2 * 4000 + 2 * 2000), "more replayed than in flight + one epoch per pair, twice"
        # the paused one moved nothing; resumed through the CLI it delivers everything
        assert consume_all(dst.bootstrap, f"w.{paused}", range(2), 0, timeout=3) == []
        resumed = _cli(url, "resume", paused)
        assert resumed.returncode == 0, resumed.stderr
        got = consume_all(dst.bootstrap, f"w.{paused}", range(2), n, timeout=120, ident=lambda m: m.value())
        assert len({m.value() for m in got}) == n
        status = _cli(url, "status", running)
        assert status.returncode == 0 and "RUNNING" in status.stdout
        offsets = _cli(url, "offsets", running, "--json")
        assert offsets.returncode == 0 and sum(o["offset"]["offset"] + 1 for o in orjson.loads(offsets.stdout)["offsets"]) == n
        assert _cli(url, "stop", running).returncode == 0
        _wait_state(url, running, "STOPPED")
        deleted = _cli(url, "delete", running)
        assert deleted.returncode == 0, deleted.stderr
        missing = _cli(url, "status", running)
        assert missing.returncode == 1 and "404" in missing.stderr
        second.send_signal(signal.SIGTERM)
        assert second.wait(60) == 0, log.read_text()[-3000:]
    finally:
        _kill_group(second)


@pytest.mark.parametrize("settings, env, named", [
    ({"rest.host": "127.0.0.1", "rest.auth.token": "${env:CONNECT_TOKEN}"}, {"CONNECT_TOKEN": ""}, "rest.auth.token"),
    ({"rest.host": "0.0.0.0"}, {}, "rest.allow.unauthenticated"),
], ids=["empty-token", "all-interfaces-without-auth"])
def test_a_worker_that_would_fail_open_refuses_to_start(tmp_path, settings, env, named):
    """Issue 35: CONNECT_TOKEN="" gave a worker with authentication off, on 0.0.0.0 in the Kubernetes
    example. Now it exits 2 naming the key, and nothing listens."""
    port = _free_port()
    conf = tmp_path / "worker.json"
    conf.write_bytes(orjson.dumps({**settings, "rest.port": port, "data.dir": str(tmp_path / "data")}))
    log = tmp_path / "worker.log"
    proc = subprocess.Popen([*CLI, "worker", "start", "--config", str(conf)], stdout=open(log, "wb"),
                            stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ, **env})
    try:
        code = proc.wait(60)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise AssertionError(f"the worker started:\n{log.read_text()[-2000:]}") from None
    assert code == 2, log.read_text()
    assert named in log.read_text()
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
