"""The shipped supervisor configs restart a worker that is alive but no longer answers.

A worker wedged with its port open (on a2dbae7: ``unittest.__main__`` as a connector class left
``/health`` silent, the process alive) is no exit, so ``autorestart`` / ``Restart=always`` never
see it. Here the wedge is ``SIGSTOP``: the process stays, its socket stays open, nothing answers.

- supervisord, with the sections shipped in ``conf/supervisord/connect-worker.conf`` (this machine's
  paths and port; the check every 5 s instead of 60 s, and 10 s from SIGTERM to SIGKILL instead of
  90, since a stopped process only ends at SIGKILL): superlance's ``httpok`` restarts the worker,
  which comes back as the next generation in ``rest.json``. The worker runs with ``umask`` 077.
- systemd (not PID 1 here): ``connect worker start`` speaks sd_notify to a socket the test binds as
  systemd would - READY=1 once healthy, WATCHDOG=1 while ``/health`` answers, none while stopped,
  STOPPING=1 at SIGTERM - and the shipped unit asks for it (``Type=notify``, ``WatchdogSec``).
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
import time
from pathlib import Path

import httpx
import orjson
import pytest
from service_util import wait_for

pytestmark = pytest.mark.timeout(400)

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
RESTART_BOUND_S = 120.0  # from SIGSTOP to a new worker answering: 5 s ticks + 10 s probe + 10 s stop + a start


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker_conf(tmp_path: Path, port: int) -> Path:
    path = tmp_path / "worker.json"
    path.write_bytes(orjson.dumps({"rest.port": port, "data.dir": str(tmp_path / "data"), "worker.task.slots": 2,
                                   "spark.conf.spark.ui.enabled": "false"}))
    return path


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _address(data_dir: Path) -> dict | None:
    try:
        return orjson.loads((data_dir / "rest.json").read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None


def _supervisord_conf(run: Path, tmp_path: Path, port: int) -> Path:
    shipped = configparser.RawConfigParser()
    shipped.read(ROOT / "conf" / "supervisord" / "connect-worker.conf")
    program = dict(shipped["program:connect-worker"])
    health = dict(shipped["eventlistener:connect-worker-health"])
    for section in (program, health):
        section.pop("user")  # the shipped sections run as the connect user; here: as whoever runs the tests
    data_dir = tmp_path / "data"
    program.update(command=f"{BIN / 'connect'} worker start --config {_worker_conf(tmp_path, port)}",
                   directory=str(run), stopwaitsecs="10", stdout_logfile=str(tmp_path / "worker.log"),
                   environment=f'CONNECT_DATA_DIR="{data_dir}",PYSPARK_PYTHON="{sys.executable}",PYTHONUNBUFFERED="1"')
    shipped_bin = "/opt/connect-bridge/.venv/bin/"
    assert health["command"].startswith(f"{shipped_bin}httpok ") and health["events"] == "TICK_60"
    assert health["command"].endswith(" http://127.0.0.1:8083/health")
    health.update(command=health["command"].replace(shipped_bin, f"{BIN}/").replace(":8083/", f":{port}/"),
                  events="TICK_5")
    conf = configparser.RawConfigParser()
    conf["supervisord"] = {"nodaemon": "true", "logfile": str(run / "supervisord.log"),
                           "pidfile": str(run / "supervisord.pid"), "childlogdir": str(run)}
    conf["unix_http_server"] = {"file": str(run / "s.sock")}
    conf["rpcinterface:supervisor"] = {"supervisor.rpcinterface_factory": "supervisor.rpcinterface:make_main_rpcinterface"}
    conf["supervisorctl"] = {"serverurl": f"unix://{run / 's.sock'}"}
    conf["program:connect-worker"] = program
    conf["eventlistener:connect-worker-health"] = health
    path = run / "supervisord.conf"
    with open(path, "w") as f:
        conf.write(f)
    return path


def _umask(pid: int) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Umask:"):
            return line.split()[1]
    return "?"


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_supervisord_restarts_a_worker_whose_health_stops_answering(tmp_path):
    run = Path(tempfile.mkdtemp(prefix="sh"))  # a short path: the control socket's name is bounded
    port = _free_port()
    url, data_dir, log = f"http://127.0.0.1:{port}", tmp_path / "data", tmp_path / "worker.log"
    supervisord = subprocess.Popen([str(BIN / "supervisord"), "-c", str(_supervisord_conf(run, tmp_path, port))],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
    wedged = None
    try:
        wait_for(lambda: _address(data_dir) is not None and _healthy(url), 120, "the worker healthy")
        first = _address(data_dir)
        wedged = first["pid"]
        assert _umask(wedged) == "0077"
        os.kill(wedged, signal.SIGSTOP)
        stopped_at = time.monotonic()
        assert not _healthy(url)

        def replaced():
            a = _address(data_dir)
            return a is not None and a["pid"] != wedged and _healthy(url)

        try:
            wait_for(replaced, RESTART_BOUND_S, "a new worker answering")
        except AssertionError:
            raise AssertionError(f"not restarted; supervisord log:\n{(run / 'supervisord.log').read_text()[-3000:]}\n"
                                 f"worker log:\n{log.read_text()[-2000:]}") from None
        took = time.monotonic() - stopped_at
        assert _address(data_dir)["generation"] == first["generation"] + 1
        assert _gone(wedged)
        print(f"\nwedged worker (SIGSTOP) restarted by supervisord's httpok in {took:.1f} s")
    finally:
        if wedged is not None and not _gone(wedged):
            os.kill(wedged, signal.SIGCONT)
        try:
            os.killpg(supervisord.pid, signal.SIGTERM)
            supervisord.wait(60)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(supervisord.pid, signal.SIGKILL)
        shutil.rmtree(run, ignore_errors=True)


def _messages(s: socket.socket, seconds: float) -> list[str]:
    out, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            out.append(s.recv(4096).decode())
        except TimeoutError:
            pass
    return out


def test_the_worker_speaks_systemd_notify_and_the_watchdog_falls_silent_when_it_hangs(tmp_path):
    unit = (ROOT / "conf" / "systemd" / "connect-worker.service").read_text()
    assert "\nType=notify\n" in unit and "\nWatchdogSec=" in unit and "\nRestart=always\n" in unit
    port = _free_port()
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        path = tempfile.mktemp(prefix="notify", dir="/tmp")
        s.bind(path)
        s.settimeout(0.2)
        env = {**os.environ, "NOTIFY_SOCKET": path, "WATCHDOG_USEC": "3000000", "PYSPARK_PYTHON": sys.executable}
        worker = subprocess.Popen([sys.executable, "-m", "worker.cli", "worker", "start", "--config",
                                   str(_worker_conf(tmp_path, port))], env=env, stdout=subprocess.DEVNULL,
                                  stderr=open(tmp_path / "worker.log", "wb"), start_new_session=True)
        try:
            got: list[str] = []
            deadline = time.monotonic() + 120
            while "READY=1" not in got and time.monotonic() < deadline and worker.poll() is None:
                got += _messages(s, 1.0)
            assert "READY=1" in got, (tmp_path / "worker.log").read_text()[-2000:]
            assert _healthy(f"http://127.0.0.1:{port}")
            assert _messages(s, 3.5).count("WATCHDOG=1") >= 2
            os.kill(worker.pid, signal.SIGSTOP)
            _messages(s, 0.5)
            assert _messages(s, 4.0) == []  # past WatchdogSec with no ping: systemd would kill it here
            os.kill(worker.pid, signal.SIGCONT)
            assert "WATCHDOG=1" in _messages(s, 5.0)
            worker.send_signal(signal.SIGTERM)
            assert "STOPPING=1" in _messages(s, 10.0)
            assert worker.wait(90) == 0
        finally:
            if worker.poll() is None:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait(10)
            os.unlink(path)
