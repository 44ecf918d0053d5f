"""A real Spark standalone cluster on loopback for tests: one master and 1-2 workers from the pyspark install.

    # in conftest.py:  from spark_cluster import spark_cluster  # noqa: F401
    # in a test module (a plain import would trip ruff's F811 on the fixture arguments):
    import spark_cluster as cluster_fixtures
    spark_cluster = cluster_fixtures.spark_cluster

    def test_x(spark_cluster):
        spark_cluster.master_url                 # spark://127.0.0.1:<port>
        env = spark_cluster.driver_env()         # for a driver subprocess: SPARK_LOCAL_IP, PYSPARK_PYTHON...
        conf = spark_cluster.driver_conf()       # --conf pairs: master, driver host, ui off
        spark_cluster.executor_pids()            # CoarseGrainedExecutorBackend JVMs
        spark_cluster.python_pids(executor_pid)  # pyspark daemon + forked Python workers under one

Every process runs in its own session (``start_new_session``), with ports picked free and logs in a
temporary directory. Each carries ``SPARK_TEST_CLUSTER=<id>`` in its environment, as do the
executors and Python workers the workers start (and drivers started with ``driver_env()``), so
``stop()`` finds and kills all of them, even the ones that were re-parented or put in their own
process group (the pyspark daemon does ``setpgid(0, 0)``).

Standalone deploy, not ``local[*]``: executors are separate JVMs that a test can ``kill -9``, and the
master and worker then start a replacement executor, as on a real cluster.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

__all__ = ["SparkCluster", "spark_cluster", "start_spark_cluster", "spark_home", "proc_children", "pid_alive", "die_with_parent"]

MARKER = "SPARK_TEST_CLUSTER"
_PROJECT_ROOT = str(Path(__file__).resolve().parent.parent)
# C1-only JIT and the serial GC: the daemons and executors only schedule here; on 2 cores they start faster
DAEMON_JAVA_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def spark_home() -> str:
    import pyspark

    return str(Path(pyspark.__file__).resolve().parent)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- /proc helpers (Linux) ---------------------------------------------------------------------


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, ppid) of a process, or None if it is gone."""
    raw = _read(f"/proc/{pid}/stat")
    if not raw:
        return None
    fields = raw[raw.rfind(b")") + 2:].split()  # the command name may contain spaces and parentheses
    return fields[0].decode(), int(fields[1])


def pid_alive(pid: int) -> bool:
    """Alive and not a zombie."""
    st = _stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def cmdline(pid: int) -> str:
    return _read(f"/proc/{pid}/cmdline").replace(b"\0", b" ").decode(errors="replace").strip()


def _all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def proc_children(pid: int, recursive: bool = True) -> list[int]:
    """Live descendants of ``pid`` (children only if not ``recursive``)."""
    parents: dict[int, list[int]] = {}
    for p in _all_pids():
        st = _stat(p)
        if st is not None and st[0] not in ("Z", "X"):
            parents.setdefault(st[1], []).append(p)
    out, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            if recursive:
                todo.append(child)
    return out


def _marked_pids(tag: str) -> list[int]:
    needle = f"{MARKER}={tag}".encode()
    return [p for p in _all_pids() if needle in _read(f"/proc/{p}/environ").split(b"\0") and pid_alive(p)]


# ---- the cluster ---------------------------------------------------------------------------------


@dataclass
class _Daemon:
    name: str
    proc: subprocess.Popen
    log: Path
    web_port: int

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(_read(str(self.log)).decode(errors="replace").splitlines()[-lines:])


@dataclass
class SparkCluster:
    base_dir: Path
    cores: int
    memory: str
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    master_port: int = field(default_factory=_free_port)
    master_web_port: int = field(default_factory=_free_port)
    master: _Daemon | None = None
    workers: list[_Daemon] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    @property
    def log_dir(self) -> Path:
        return self.base_dir / "logs"

    @property
    def work_dir(self) -> Path:
        """Workers' --work-dir: executor stdout/stderr end up in <work_dir>/<worker n>/<app id>/<executor id>/."""
        return self.base_dir / "work"

    def base_env(self) -> dict[str, str]:
        env = dict(os.environ)
        pythonpath = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        env.update({
            MARKER: self.tag,
            "SPARK_HOME": spark_home(),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOCAL_DIRS": str(self.base_dir / "local"),
            "SPARK_CONF_DIR": str(self.base_dir / "conf"),  # empty: no stray spark-defaults.conf
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "PYTHONPATH": os.pathsep.join(dict.fromkeys([_PROJECT_ROOT, *pythonpath])),
        })
        env.pop("SPARK_MASTER_HOST", None)
        env.pop("PYSPARK_SUBMIT_ARGS", None)
        return env

    def driver_env(self) -> dict[str, str]:
        """Environment for a driver subprocess: loopback, executors on this venv's Python, the marker."""
        return self.base_env()

    def driver_conf(self) -> dict[str, str]:
        """Spark settings for a driver of this cluster (the JVM options cut a SparkSession's start from ~9 to ~6 s)."""
        return {"spark.master": self.master_url, "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1", "spark.ui.enabled": "false",
                "spark.pyspark.python": sys.executable, "spark.executor.memory": "1g",
                "spark.driver.extraJavaOptions": DAEMON_JAVA_OPTS, "spark.executor.extraJavaOptions": DAEMON_JAVA_OPTS}

    # ---- lifecycle ----------------------------------------------------------------------------

    def start(self, workers: int = 1, timeout: float = 120.0) -> SparkCluster:
        for d in (self.log_dir, self.work_dir, self.base_dir / "local", self.base_dir / "conf"):
            d.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        deadline = t0 + timeout
        try:
            self.master = self._spawn("master", self.master_web_port, [
                "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                "--port", str(self.master_port), "--webui-port", str(self.master_web_port)])
            # a worker that finds no master retries only after 5-15 s: start workers once the master listens
            self._wait(lambda: _listening(self.master_port), deadline, "master RPC port", [self.master])
            self.timings["master_listening_s"] = time.monotonic() - t0
            for i in range(workers):
                web = _free_port()
                work = self.work_dir / f"worker-{i}"
                work.mkdir(exist_ok=True)
                self.workers.append(self._spawn(f"worker-{i}", web, [
                    "org.apache.spark.deploy.worker.Worker", self.master_url, "--host", "127.0.0.1",
                    "--cores", str(self.cores), "--memory", self.memory, "--webui-port", str(web),
                    "--work-dir", str(work)]))
            self._wait(lambda: self.alive_workers() >= workers, deadline, f"{workers} worker(s) to register",
                       [self.master, *self.workers])
            self.timings["workers_registered_s"] = time.monotonic() - t0
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, name: str, web_port: int, args: list[str]) -> _Daemon:
        log = self.log_dir / f"{name}.log"
        env = self.base_env()
        env["SPARK_DAEMON_JAVA_OPTS"] = DAEMON_JAVA_OPTS
        env["SPARK_MASTER_OPTS"] = "-Dspark.master.rest.enabled=false"  # else it binds the fixed port 6066
        with open(log, "ab") as out:
            proc = subprocess.Popen([str(Path(spark_home()) / "bin" / "spark-class"), *args], env=env,
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True, cwd=self.base_dir, preexec_fn=die_with_parent)
        return _Daemon(name, proc, log, web_port)

    def _wait(self, ready, deadline: float, what: str, daemons: list[_Daemon]) -> None:
        while True:
            for d in daemons:
                if d.proc.poll() is not None:
                    raise RuntimeError(f"spark {d.name} exited with {d.proc.returncode} waiting for {what}:\n"
                                       f"{d.log_tail()}")
            try:
                if ready():
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                tails = "\n".join(f"--- {d.name} ({d.log})\n{d.log_tail()}" for d in daemons)
                raise TimeoutError(f"spark cluster: timed out waiting for {what}\n{tails}")
            time.sleep(0.2)

    def stop(self, timeout: float = 20.0) -> list[int]:
        """SIGKILL the daemons, executors, Python workers and marked drivers. Returns the pids killed."""
        me = {os.getpid(), *_ancestors(os.getpid())}
        daemons = [d for d in [self.master, *self.workers] if d is not None]
        victims: set[int] = set(_marked_pids(self.tag))
        for d in daemons:
            victims.add(d.proc.pid)
            victims.update(proc_children(d.proc.pid))
        for pid in list(victims):
            victims.update(proc_children(pid))
        victims -= me
        for d in daemons:
            try:
                os.killpg(d.proc.pid, signal.SIGKILL)  # their own session/process group
            except (ProcessLookupError, PermissionError):
                pass
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for d in daemons:
            try:
                d.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            left = [p for p in victims | set(_marked_pids(self.tag)) if p not in me and pid_alive(p)]
            if not left:
                break
            for pid in left:  # forked while we were killing
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.05)
        self.master, self.workers = None, []
        return sorted(victims)

    def __enter__(self) -> SparkCluster:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- state ----------------------------------------------------------------------------------

    def master_json(self, timeout: float = 5.0) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.master_web_port}/json/", timeout=timeout) as r:
            return json.load(r)

    def worker_json(self, index: int = 0, timeout: float = 5.0) -> dict:
        """The worker's view: ``executors`` (running), ``finishedexecutors``, cores/memory used."""
        port = self.workers[index].web_port
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/", timeout=timeout) as r:
            return json.load(r)

    def alive_workers(self) -> int:
        return int(self.master_json().get("aliveworkers", 0))

    def all_pids(self) -> list[int]:
        """Every live process of this cluster (daemons, executors, Python workers, marked drivers)."""
        return sorted(set(_marked_pids(self.tag)) - {os.getpid()})

    def executor_pids(self) -> list[int]:
        """Live executor JVMs (CoarseGrainedExecutorBackend) the workers started."""
        return sorted(p for p in _marked_pids(self.tag) if "CoarseGrainedExecutorBackend" in cmdline(p))

    def python_pids(self, executor_pid: int | None = None) -> list[int]:
        """Python processes under an executor (or all executors): the pyspark daemon and its forked workers."""
        roots = [executor_pid] if executor_pid is not None else self.executor_pids()
        out = []
        for root in roots:
            out += [p for p in proc_children(root) if "python" in cmdline(p).split(" ")[0].rsplit("/", 1)[-1]]
        return sorted(out)

    def python_daemon_pids(self, executor_pid: int | None = None) -> list[int]:
        roots = [executor_pid] if executor_pid is not None else self.executor_pids()
        return sorted(p for r in roots for p in proc_children(r, recursive=False) if "pyspark.daemon" in cmdline(p))

    def wait_for_executors(self, count: int = 1, exclude: tuple[int, ...] | list[int] = (), timeout: float = 60.0) -> list[int]:
        """Wait until ``count`` executor JVMs not in ``exclude`` are alive; returns their pids."""
        deadline = time.monotonic() + timeout
        while True:
            pids = [p for p in self.executor_pids() if p not in exclude]
            if len(pids) >= count:
                return pids
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {count} new executor(s) within {timeout}s (have {pids}, excluded {list(exclude)})")
            time.sleep(0.05)


def die_with_parent() -> None:
    """In the child before exec: SIGKILL it if the process that started it dies without a teardown (a test
    run killed, pytest-timeout's os._exit). Executors then stop too: they watch their worker (WorkerWatcher).
    Linux fires it when the parent *thread* ends: start clusters from a thread that outlives them (the main one)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _ancestors(pid: int) -> list[int]:
    out = []
    st = _stat(pid)
    while st is not None and st[1] > 1:
        out.append(st[1])
        st = _stat(st[1])
    return out


def start_spark_cluster(base_dir: str | Path, workers: int = 1, cores: int = 2, memory: str = "2g",
                        timeout: float = 120.0) -> SparkCluster:
    """Start and wait until every worker registered; call ``stop()`` (or use ``with``) to tear down."""
    if not 1 <= workers <= 4:
        raise ValueError("workers: 1 to 4")
    return SparkCluster(Path(base_dir), cores=cores, memory=memory).start(workers, timeout)


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory):
    """One standalone cluster for the session. SPARK_TEST_WORKERS (1) and SPARK_TEST_WORKER_CORES (2) size it."""
    cluster = start_spark_cluster(tmp_path_factory.mktemp("spark-cluster"),
                                  workers=int(os.environ.get("SPARK_TEST_WORKERS", "1")),
                                  cores=int(os.environ.get("SPARK_TEST_WORKER_CORES", "2")))
    yield cluster
    cluster.stop()
    left = cluster.all_pids()
    if left:
        raise RuntimeError(f"spark cluster teardown left processes behind: {left}")
