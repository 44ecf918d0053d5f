"""The worker under a real supervisor: supervisord (from PyPI) runs ``connect worker start`` with
the program section shipped in ``conf/supervisord/connect-worker.conf`` (only this machine's paths
changed), while a Kafka->Kafka mirror copies a stream that keeps growing and a second connector
stays PAUSED.

The driver is killed with ``kill -9`` three times, mid-stream. Each time supervisord starts it
again by itself; the REST API answers again within :data:`RECOVERY_BOUND_S` (measured and printed);
the new driver is the next generation in ``rest.json``; both connectors are back in their target
states; the old driver's JVM and Python workers are gone (nothing orphaned holds the data
directory, the port or the brokers); and the CLI finds the restarted worker from its data
directory alone. At the end every record produced is in the target (0 lost), duplicates stay
within what was in flight plus one epoch per pair per kill, the paused connector moved nothing,
and ``supervisorctl stop`` stops the worker cleanly.

Once more on a Spark standalone cluster (master and worker on loopback, ``tests/spark_cluster.py``),
with one kill: the killed driver's executors end with its application.

The systemd unit in ``conf/systemd`` is checked with ``systemd-analyze verify`` where that tool
exists (it cannot be run here: no systemd as PID 1).
"""

from __future__ import annotations

import configparser
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import orjson
import pytest
import spark_cluster as cluster_fixtures
from kafka_util import consume_all, create_topic, produce
from service_util import wait_for

spark_cluster = cluster_fixtures.spark_cluster

pytestmark = pytest.mark.timeout(600)

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
KILLS = 3
RECOVERY_BOUND_S = 60.0  # kill -9 to the REST API answering and both connectors in their target states
TASKS, EPOCH_RECORDS, IN_FLIGHT = 2, 2000, 4000
# Replayed per kill, at most: what was in flight plus one epoch, per task pair.
DUPLICATES_PER_KILL = TASKS * (IN_FLIGHT + EPOCH_RECORDS)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _supervisord_conf(run: Path, worker_conf: Path, data_dir: Path, log: Path) -> Path:
    """supervisord's own sections, and the shipped program section with this machine's paths."""
    shipped = configparser.RawConfigParser()
    shipped.read(ROOT / "conf" / "supervisord" / "connect-worker.conf")
    program = dict(shipped["program:connect-worker"])
    program.pop("user")  # the shipped section runs as the connect user; here: as whoever runs the tests
    program.update(command=f"{BIN / 'connect'} worker start --config {worker_conf}", directory=str(run),
                   environment=f'CONNECT_DATA_DIR="{data_dir}",PYSPARK_PYTHON="{sys.executable}",PYTHONUNBUFFERED="1"',
                   stdout_logfile=str(log))
    conf = configparser.RawConfigParser()
    conf["supervisord"] = {"nodaemon": "true", "logfile": str(run / "supervisord.log"),
                           "pidfile": str(run / "supervisord.pid"), "childlogdir": str(run)}
    conf["unix_http_server"] = {"file": str(run / "s.sock")}
    conf["rpcinterface:supervisor"] = {"supervisor.rpcinterface_factory": "supervisor.rpcinterface:make_main_rpcinterface"}
    conf["supervisorctl"] = {"serverurl": f"unix://{run / 's.sock'}"}
    conf["program:connect-worker"] = program
    path = run / "supervisord.conf"
    with open(path, "w") as f:
        conf.write(f)
    return path


def _descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (read from /proc)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited; only its parent's wait is missing


def _address(data_dir: Path) -> dict | None:
    try:
        return orjson.loads((data_dir / "rest.json").read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _status(url: str, name: str) -> dict | None:
    try:
        r = httpx.get(f"{url}/connectors/{name}/status", timeout=3)
    except httpx.HTTPError:
        return None
    return r.json() if r.status_code == 200 else None


def _in_target_state(url: str, running: str, paused: str) -> bool:
    run, pause = _status(url, running), _status(url, paused)
    return (run is not None and pause is not None and run["connector"]["state"] == "RUNNING" and bool(run["tasks"])
            and all(t["state"] == "RUNNING" for t in run["tasks"]) and pause["connector"]["state"] == "PAUSED")


def _committed(url: str, name: str) -> int:
    try:
        offsets = httpx.get(f"{url}/connectors/{name}/offsets", timeout=5).json()["offsets"]
    except (httpx.HTTPError, ValueError, KeyError):
        return -1
    return sum(o["offset"]["offset"] + 1 for o in offsets)


def _wait(predicate, timeout: float, what: str, log: Path):
    """``service_util.wait_for``, with the worker's log in the failure."""
    try:
        return wait_for(predicate, timeout, what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; worker log:\n{log.read_text()[-4000:]}") from None


def _cli(data_dir: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CONNECT_URL"}
    return subprocess.run([str(BIN / "connect"), "connectors", *args, "--data-dir", str(data_dir)], env=env,
                          capture_output=True, text=True, timeout=120)


def _supervised_mirror_survives_kill_9(kafka_pair, unique: str, tmp_path: Path, *, kills: int,
                                       settings: dict | None = None, env: dict | None = None,
                                       also_gone=lambda: set()) -> None:
    """The scenario of the module docstring with ``kills`` kills; ``settings`` add to the worker config,
    ``env`` is supervisord's (and so the worker's) environment, ``also_gone()`` names processes besides
    the driver's own that must be gone after a kill (a cluster's executors of the killed driver)."""
    src, dst = kafka_pair
    run = Path(tempfile.mkdtemp(prefix="sv"))  # a short path: the control socket's name is bounded
    data_dir, log = tmp_path / "data", tmp_path / "worker.log"
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    worker_conf = tmp_path / "worker.json"
    worker_conf.write_bytes(orjson.dumps({"rest.port": port, "data.dir": str(data_dir), "worker.task.slots": 4,
                                          "spark.conf.spark.ui.enabled": "false", **(settings or {})}))
    running, paused = f"run-{unique}"[:120], f"pause-{unique}"[:120]
    for topic in (running, paused):
        create_topic(src.bootstrap, topic, 2)
    produce(src.bootstrap, paused, 1000, 2)
    files = {}
    for name in (running, paused):
        files[name] = tmp_path / f"{name}.json"
        files[name].write_bytes(orjson.dumps({"name": name, "config": {
            "source.connector.class": "kafka", "source.bootstrap.servers": src.bootstrap, "source.topics": name,
            "source.start.position": "earliest", "sink.connector.class": "kafka",
            "sink.bootstrap.servers": dst.bootstrap, "sink.topic.template": "sv.{topic}", "tasks.max": str(TASKS),
            "epoch.max.ms": "1000", "epoch.max.records": str(EPOCH_RECORDS),
            "max.in.flight.records": str(IN_FLIGHT)}}))

    supervisord = subprocess.Popen([str(BIN / "supervisord"), "-c", str(_supervisord_conf(run, worker_conf, data_dir, log))],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    produced = [0]
    stop_producing = threading.Event()

    def keep_producing() -> None:  # the load: 1,000 records every 0.25 s while the driver dies and comes back
        while not stop_producing.is_set():
            produce(src.bootstrap, running, 1000, 2, start=produced[0], headers=False)
            produced[0] += 1000
            stop_producing.wait(0.25)

    producer = threading.Thread(target=keep_producing, daemon=True)
    recoveries: list[tuple[float, float]] = []
    try:
        _wait(lambda: _address(data_dir) is not None and _healthy(url), 120, "the first worker healthy", log)
        for name, state in ((running, []), (paused, ["--state", "PAUSED"])):
            created = _cli(data_dir, "create", str(files[name]), *state)  # found through rest.json alone
            assert created.returncode == 0, created.stderr
        producer.start()
        _wait(lambda: _in_target_state(url, running, paused), 60, "both connectors in their target states", log)
        for kill in range(1, kills + 1):
            before = _committed(url, running)
            _wait(lambda before=before: _committed(url, running) >= before + 3000, 90,
                  f"progress before kill {kill}", log)
            address = _address(data_dir)
            driver = address["pid"]
            assert address["generation"] == kill
            assert Path(f"/proc/{driver}").exists() and int(
                Path(f"/proc/{driver}/stat").read_text().rsplit(")", 1)[1].split()[1]) == supervisord.pid
            left_behind = _descendants(driver)  # its JVM and, in local mode, the JVM's Python workers
            assert left_behind, "the driver has no JVM child: Spark did not start as expected"
            left_behind |= also_gone()
            os.kill(driver, signal.SIGKILL)
            killed_at = time.monotonic()

            def answering(old=driver):
                a = _address(data_dir)
                return a is not None and a["pid"] != old and _healthy(url)

            _wait(answering, RECOVERY_BOUND_S, f"the REST API back after kill {kill}", log)
            healthy_after = time.monotonic() - killed_at
            _wait(lambda: _in_target_state(url, running, paused), RECOVERY_BOUND_S, f"target states after kill {kill}",
                  log)
            recovered_after = time.monotonic() - killed_at
            recoveries.append((healthy_after, recovered_after))
            assert recovered_after <= RECOVERY_BOUND_S
            assert _address(data_dir)["generation"] == kill + 1
            summary = httpx.get(f"{url}/console/summary", timeout=10).json()
            assert summary["worker"]["generation"] == kill + 1 and summary["worker"]["uptime_s"] < recovered_after + 5
            _wait(lambda left=left_behind: not any(_alive(p) for p in left), 30,
                  f"the killed driver's JVM and Python workers gone (pids {sorted(left_behind)})", log)
        listed = _cli(data_dir, "list")
        assert listed.returncode == 0 and running in listed.stdout and "PAUSED" in listed.stdout, listed.stderr
        stop_producing.set()
        producer.join(60)
        n = produced[0]
        got = consume_all(dst.bootstrap, f"sv.{running}", range(2), n, timeout=240)
        values = {m.value() for m in got}
        expected = {f"value-{i}".encode() for i in range(n)}
        assert values == expected, f"{len(expected - values)} of {n} records lost"
        duplicates = len(got) - n
        master = (settings or {}).get("spark.master", "local")
        print(f"\nsupervised worker ({master}): {kills} x kill -9 of the driver under supervisord; REST API answering again "
              f"after {', '.join(f'{h:.1f}' for h, _ in recoveries)} s, both connectors in their target states after "
              f"{', '.join(f'{r:.1f}' for _, r in recoveries)} s (bound {RECOVERY_BOUND_S:.0f} s); {n} records, "
              f"0 lost, {duplicates} duplicates (bound {kills * DUPLICATES_PER_KILL})")
        assert duplicates <= kills * DUPLICATES_PER_KILL, "more replayed than in flight + one epoch per pair, per kill"
        assert consume_all(dst.bootstrap, f"sv.{paused}", range(2), 0, timeout=3) == []
        assert _status(url, paused)["connector"]["state"] == "PAUSED"

        ctl = [str(BIN / "supervisorctl"), "-c", str(run / "supervisord.conf")]
        stopped = subprocess.run([*ctl, "stop", "connect-worker"], capture_output=True, text=True, timeout=120)
        assert stopped.returncode == 0 and "stopped" in stopped.stdout, stopped.stdout + stopped.stderr
        assert "received SIGTERM: stopping the connectors" in log.read_text()
        assert "stopped: connect-worker (exit status 0)" in (run / "supervisord.log").read_text()
        subprocess.run([*ctl, "shutdown"], capture_output=True, timeout=60)
        supervisord.wait(60)
    finally:
        stop_producing.set()
        for pid in _descendants(supervisord.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(supervisord.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        supervisord.wait(10)
        shutil.rmtree(run, ignore_errors=True)


def test_worker_under_supervisord_comes_back_after_kill_9_in_its_target_states_losing_nothing(kafka_pair, unique,
                                                                                              tmp_path):
    _supervised_mirror_survives_kill_9(kafka_pair, unique, tmp_path, kills=KILLS)


def test_worker_on_a_spark_standalone_cluster_comes_back_under_supervisord_after_kill_9(kafka_pair, spark_cluster,
                                                                                        unique, tmp_path):
    """Once on a standalone cluster: the master drops the killed driver's application, whose executors
    (and their Python workers) end; the new driver registers a new application."""
    settings = {"spark.master": spark_cluster.master_url,
                **{f"spark.conf.{k}": v for k, v in spark_cluster.driver_conf().items() if k != "spark.master"}}
    _supervised_mirror_survives_kill_9(kafka_pair, unique, tmp_path, kills=1, settings=settings,
                                       env=spark_cluster.driver_env(),
                                       also_gone=lambda: {p for e in spark_cluster.executor_pids()
                                                          for p in (e, *spark_cluster.python_pids(e))})


def test_the_shipped_systemd_unit_passes_systemd_analyze_verify(tmp_path):
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed here")
    text = (ROOT / "conf" / "systemd" / "connect-worker.service").read_text()
    # verify checks that ExecStart's program exists: point it at this installation
    unit = tmp_path / "connect-worker.service"
    unit.write_text(text.replace("/opt/connect-bridge/.venv/bin/", f"{BIN}/"))
    done = subprocess.run([tool, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    # verify exits 0 on unknown keys and bad values too (it only logs them): every line it says of the unit counts
    complaints = [line for line in (done.stdout + done.stderr).splitlines() if unit.name in line]
    assert done.returncode == 0 and not complaints, done.stdout + done.stderr
    for setting in ("Restart=always", "KillMode=mixed", "TimeoutStopSec=90", "StartLimitIntervalSec=0"):
        assert f"\n{setting}\n" in text, setting
