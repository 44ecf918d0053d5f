"""RocketMQ brokers: this project's embedded one (:class:`EmbeddedRocketMQ`) and Apache RocketMQ 5.x
(:class:`ApacheRocketMQ`)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from worker.embedded.process import (
    _Broker,
    _data_dir,
    _end,
    _launch,
    _signal_group,
    _wait_listening,
    free_port,
)

__all__ = ["EmbeddedRocketMQ", "ApacheRocketMQ"]


class EmbeddedRocketMQ(_Broker):
    """The embedded RocketMQ name server + broker in its own process on a free loopback port;
    ``namesrv`` is its ``host:port`` (the broker answers on the same port). ``stop`` then
    ``start`` again keeps the port and the data; ``kill`` ends it with SIGKILL (a crash). ``env``
    is added to this process's environment (e.g. ``CONNECT_ROCKETMQ_ACL``: secrets stay out of
    the command line); ``preexec_fn`` runs in the child before the broker (e.g. a lower ``ulimit -n``).
    ``broker_addr`` is the broker's address: the same as ``namesrv``."""

    def __init__(self, data_dir: str | Path, port: int | None = None, log_path: str | Path | None = None,
                 extra_args: list[str] | None = None, env: dict[str, str] | None = None, preexec_fn=None):
        self.port = port or free_port()
        self.namesrv = f"127.0.0.1:{self.port}"
        self.broker_addr = self.namesrv  # one process answers both
        self.data_dir = Path(data_dir)
        self.log_path = log_path
        self.extra_args = list(extra_args or [])
        self.env = dict(env or {})
        self.preexec_fn = preexec_fn
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 20.0) -> EmbeddedRocketMQ:
        import sys

        argv = [sys.executable, "-m", "worker.cli", "rocketmq-broker", "--port", str(self.port),
                "--data-dir", str(self.data_dir), "--log-level", "WARNING", *self.extra_args]
        popen = {"preexec_fn": self.preexec_fn} if self.preexec_fn else {}
        if self.env:
            popen["env"] = {**os.environ, **self.env}
        self.proc = _launch(argv, self.port, "the embedded RocketMQ broker", timeout, self.log_path, **popen)
        return self


class ApacheRocketMQ:
    """Apache RocketMQ 5.x: a name server and one master broker (``broker-a`` unless ``name``), two
    JVMs on free loopback ports, from the pinned Maven Central jars. Same interface as
    :class:`EmbeddedRocketMQ`: ``namesrv`` is the name server's ``host:port``, ``broker_addr`` the
    broker's (a different port here); ``start``/``stop``/``kill``; ``stop`` then ``start`` again
    keeps the ports and the data under ``data_dir`` (default: a temporary folder removed with this
    object). ``freeze``/``thaw`` stop and continue both processes, as freezing the embedded broker
    stops its one process. ``namesrv_extra``/``broker_extra``: more settings for
    ``namesrv.properties``/``broker.conf``. ``start`` returns once the name server routes ``TBW102``
    to this broker (registration included).

    ``one_jvm`` (default) runs both in one JVM (:mod:`worker.brokers.rocketmq_launcher`; two JVMs
    when no ``javac`` is found, or with ``one_jvm=False``): about half the idle CPU and memory."""

    def __init__(self, data_dir: str | Path | None = None, port: int | None = None,
                 log_path: str | Path | None = None, broker_port: int | None = None, name: str = "broker-a",
                 namesrv_heap: str = "256m", broker_heap: str = "384m", direct_memory: str = "256m",
                 namesrv_extra: dict[str, str] | None = None, broker_extra: dict[str, str] | None = None,
                 one_jvm: bool = True):
        from worker.brokers.rocketmq import broker_port as pick_broker_port

        self.port = port or free_port()
        self.broker_port = broker_port or pick_broker_port()
        self.namesrv = f"127.0.0.1:{self.port}"
        self.broker_addr = f"127.0.0.1:{self.broker_port}"
        self.name = name
        self.log_path = log_path
        self._temp, self.data_dir = _data_dir(data_dir, "apache-rocketmq-")
        self._heaps = (namesrv_heap, broker_heap, direct_memory)
        self._extra = (dict(namesrv_extra or {}), dict(broker_extra or {}))
        self.one_jvm = one_jvm
        self.namesrv_proc: subprocess.Popen | None = None
        self.proc: subprocess.Popen | None = None  # the broker
        self.started_in = 0.0
        self.timings: dict[str, float] = {}  # seconds from start() until each listened

    def _files(self) -> tuple[Path, Path]:
        from worker.brokers.rocketmq import broker_conf, logback_xml, namesrv_properties

        self.data_dir.mkdir(parents=True, exist_ok=True)
        for what in ("namesrv", "broker", "rocketmq"):
            (self.data_dir / f"{what}.logback.xml").write_text(logback_xml(what))
        namesrv = self.data_dir / "namesrv.properties"
        namesrv.write_text(namesrv_properties(port=self.port, extra=self._extra[0]))
        broker = self.data_dir / "broker.conf"
        broker.touch(mode=0o600)  # it may hold a secret (worker.brokers.rocketmq.authentication)
        broker.chmod(0o600)
        broker.write_text(broker_conf(name=self.name, port=self.broker_port, namesrv=self.namesrv,
                                      store=self.data_dir / "store", extra=self._extra[1]))
        return namesrv, broker

    def _java(self, what: str, main: list[str], heap: str, processors: int, direct: str | None = None) -> list[str]:
        from worker.brokers.rocketmq import java_argv

        return java_argv(main, heap=heap, processors=processors, home=self.data_dir, direct_memory=direct,
                         logback=self.data_dir / f"{what}.logback.xml")

    def start(self, timeout: float = 240.0) -> ApacheRocketMQ:
        started = time.monotonic()
        namesrv_conf, broker_conf = self._files()
        namesrv_heap, broker_heap, direct = self._heaps
        env = {**os.environ, "ROCKETMQ_HOME": str(self.data_dir)}
        # one after the other: a broker up before its name server registers only 10 s later
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        popen = {"stdout": out, "stderr": subprocess.STDOUT, "stdin": subprocess.DEVNULL, "start_new_session": True,
                 "env": env}
        try:
            launcher = self._launcher() if self.one_jvm else None
            if launcher is not None:
                self._start_one_jvm(launcher, namesrv_conf, broker_conf, popen, started, timeout)
                return self
            self.namesrv_proc = subprocess.Popen(
                self._java("namesrv", ["org.apache.rocketmq.namesrv.NamesrvStartup", "-c", str(namesrv_conf)],
                           namesrv_heap, 1), **popen)
            _wait_listening(self.namesrv_proc, self.port, "the Apache RocketMQ name server", timeout, self.log_path)
            self.timings = {"namesrv": time.monotonic() - started}
            self.proc = subprocess.Popen(
                self._java("broker", ["org.apache.rocketmq.broker.BrokerStartup", "-c", str(broker_conf)], broker_heap,
                           2, direct), **popen)
            left = max(1.0, timeout - (time.monotonic() - started))
            _wait_listening(self.proc, self.broker_port, "the Apache RocketMQ broker", left, self.log_path)
            self.timings["broker"] = time.monotonic() - started
            self._wait_registered(max(1.0, timeout - (time.monotonic() - started)))
        except BaseException:
            self.kill()
            raise
        finally:
            if out is not subprocess.DEVNULL:
                out.close()  # the children hold it
        self.started_in = time.monotonic() - started
        return self

    def _launcher(self) -> Path | None:
        from worker.brokers.maven import classpath
        from worker.brokers.rocketmq import ROCKETMQ
        from worker.brokers.rocketmq_launcher import launcher_classpath

        return launcher_classpath(classpath(ROCKETMQ)[0].parent)

    def _start_one_jvm(self, launcher: Path, namesrv_conf: Path, broker_conf: Path, popen: dict, started: float,
                       timeout: float) -> None:
        from worker.brokers.rocketmq_launcher import MAIN

        _, broker_heap, direct = self._heaps
        argv = self._java("rocketmq", [MAIN, str(namesrv_conf), str(broker_conf)], broker_heap, 2, direct)
        cp = argv.index("-cp")
        argv[cp + 1] = f"{launcher}:{argv[cp + 1]}"
        self.proc = subprocess.Popen(argv, **popen)
        _wait_listening(self.proc, self.port, "the Apache RocketMQ name server", timeout, self.log_path)
        self.timings = {"namesrv": time.monotonic() - started}
        _wait_listening(self.proc, self.broker_port, "the Apache RocketMQ broker",
                        max(1.0, timeout - (time.monotonic() - started)), self.log_path)
        self.timings["broker"] = time.monotonic() - started
        self._wait_registered(max(1.0, timeout - (time.monotonic() - started)))
        self.started_in = time.monotonic() - started

    def _wait_registered(self, timeout: float) -> None:
        """Until the name server routes TBW102 (the auto-create template topic) to this broker."""
        from connect.errors import ConnectError
        from connectors.rocketmq.sync_client import SyncRocketMQClient

        deadline = time.monotonic() + timeout
        with SyncRocketMQClient(self.namesrv, timeout=2.0) as client:
            while time.monotonic() < deadline:
                for proc, what in ((self.namesrv_proc, "name server"), (self.proc, "broker")):
                    if proc is not None and proc.poll() is not None:
                        raise RuntimeError(f"the Apache RocketMQ {what} exited with {proc.returncode} "
                                           f"(log: {self.log_path})")
                try:
                    if client.topic_route("TBW102").master_addr(self.name) == self.broker_addr:
                        return
                except ConnectError:
                    pass
                time.sleep(0.2)
        raise RuntimeError(f"the Apache RocketMQ broker {self.broker_addr} did not register with {self.namesrv} "
                           f"within {timeout:.0f}s (log: {self.log_path})")

    def _procs(self) -> list[subprocess.Popen]:
        return [p for p in (self.proc, self.namesrv_proc) if p is not None and p.poll() is None]

    def freeze(self) -> None:
        """SIGSTOP to the name server and the broker: connections stay open, nothing answers."""
        procs = self._procs()
        if not procs or len(procs) < (1 if self.namesrv_proc is None else 2):
            raise RuntimeError("Apache RocketMQ is not running: nothing to freeze")
        for proc in procs:
            _signal_group(proc, signal.SIGSTOP)

    def thaw(self) -> None:
        for proc in self._procs():
            _signal_group(proc, signal.SIGCONT)

    def rss_bytes(self) -> dict[str, int]:
        """Resident memory (VmRSS) of each running process: ``{"namesrv": n, "broker": n}`` (in one
        JVM the name server's is 0: ``broker`` counts both)."""
        out = {}
        for what, proc in (("namesrv", self.namesrv_proc), ("broker", self.proc)):
            out[what] = 0
            if proc is not None and proc.poll() is None:
                with open(f"/proc/{proc.pid}/status") as status:
                    out[what] = next((int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:")), 0)
        return out

    def stop(self, timeout: float = 20.0) -> None:
        """The broker first (it unregisters), then the name server; each killed past ``timeout``."""
        for proc in (self.proc, self.namesrv_proc):
            _end(proc, timeout)
        self.proc = self.namesrv_proc = None

    def kill(self) -> None:
        """SIGKILL to both (a crash); ``start`` again recovers the store."""
        for proc in (self.proc, self.namesrv_proc):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        self.proc = self.namesrv_proc = None

    def __enter__(self) -> ApacheRocketMQ:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
